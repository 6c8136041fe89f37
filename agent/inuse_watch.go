package agent

import (
	"context"
	"strings"
	"time"

	carvev1 "github.com/carve-dev/carve/api/v1"
)

// InUsePollInterval is how often the agent asks the kubelet which devices
// pods hold, to start a pass when a pod that holds one starts or ends: the
// node record lists them (carvectl plan --node previews from it). The
// kubelet offers no watch; the question is a local call, and a pass runs
// only when the answer differs from what the record says.
const InUsePollInterval = 10 * time.Second

// watchInUse asks src every interval which devices pods hold and calls
// changed when the answer differs from recorded (what the node record
// written last says, inUseKey), until ctx ends. A question the kubelet
// does not answer changes nothing.
func watchInUse(ctx context.Context, src InUseSource, interval time.Duration, recorded func() string, changed func()) {
	if src == nil || interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		u, err := src.InUse(ctx)
		if err == nil && inUseKey(InUseRecord(u)) != recorded() {
			changed()
		}
	}
}

// inUseKey is what a node record says of the devices in use (the devices
// and the pods that hold them), as one comparable string; "?" when it
// says nothing.
func inUseKey(r *carvev1.InUseRecord) string {
	if r == nil {
		return "?"
	}
	var b strings.Builder
	for _, d := range r.Devices {
		b.WriteString(d.UUID)
		b.WriteByte('=')
		b.WriteString(strings.Join(d.Pods, ","))
		b.WriteByte(';')
	}
	return b.String()
}
