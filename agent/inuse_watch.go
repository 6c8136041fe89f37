package agent

import (
	"context"
	"strings"
	"time"

	"github.com/carve-dev/carve/plugin"
)

// InUsePollInterval is how often the agent asks the kubelet which devices
// pods hold, to start a pass when a pod that holds one starts or ends: the
// node record lists them (carvectl plan --node previews from it). The
// kubelet offers no watch; the question is a local call, and a pass runs
// only when the answer changed.
const InUsePollInterval = 10 * time.Second

// watchInUse asks src every interval which devices pods hold and calls
// changed when the answer differs from the one before, until ctx ends.
// The first answer only sets the baseline (the controller's first pass
// records it); an error leaves the baseline as it was.
func watchInUse(ctx context.Context, src InUseSource, interval time.Duration, changed func()) {
	if src == nil || interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	last, known := "", false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		u, err := src.InUse(ctx)
		if err != nil {
			continue
		}
		key := inUseKey(u)
		if known && key != last {
			changed()
		}
		last, known = key, true
	}
}

// inUseKey is what the node record says of an answer (the devices and the
// pods that hold them), as one comparable string.
func inUseKey(u *plugin.InUse) string {
	var b strings.Builder
	for _, d := range InUseRecord(u).Devices {
		b.WriteString(d.UUID)
		b.WriteByte('=')
		b.WriteString(strings.Join(d.Pods, ","))
		b.WriteByte(';')
	}
	return b.String()
}
