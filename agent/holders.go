package agent

import (
	"fmt"
	"strings"

	"github.com/carve-dev/carve/internal/textfmt"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/plugin"
)

// maxPodsNamed is the most pods a refusal's message names; the rest are
// counted.
const maxPodsNamed = 5

// withPods adds to err, when the GPU refused an op because processes hold
// its devices (a partition.InUseError), the pods that hold those devices
// by the kubelet's account: "<err>; pods: team-a/infer-7", or "; no pod
// holds them by the kubelet's account" (a process outside Kubernetes, or a
// pod given the GPU another way). The kubelet is asked again: the pass
// planned around the devices pods held then, so only a pod that started
// since can hold them; when it cannot answer, the pods are "unknown".
// Other errors come back as they are.
func (p *pass) withPods(err error) error {
	e := partition.InUseOf(err)
	if e == nil || len(e.Devices) == 0 {
		return err
	}
	inUse, qerr := p.r.InUse.InUse(p.ctx)
	if qerr != nil {
		return fmt.Errorf("%w; pods: unknown (%s)", err, textfmt.OneLine(qerr.Error()))
	}
	names := podNames(inUse.Holding(e.Devices))
	if len(names) == 0 {
		return fmt.Errorf("%w; no pod holds them by the kubelet's account", err)
	}
	return fmt.Errorf("%w; pods: %s", err, names)
}

// podNames names the pods of assignments as namespace/name, each once, in
// order, at most maxPodsNamed with the rest counted; an allocated claim
// that no pod uses is named "claim namespace/name".
func podNames(as []plugin.Assignment) string {
	var names []string
	seen := map[string]bool{}
	for _, a := range as {
		name := a.Namespace + "/" + a.Pod
		if a.Pod == "" {
			name = "claim " + a.Namespace + "/" + strings.TrimPrefix(a.Resource, "resourceclaim/")
		}
		if !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	if len(names) > maxPodsNamed {
		return strings.Join(names[:maxPodsNamed], ", ") + fmt.Sprintf(" and %d more", len(names)-maxPodsNamed)
	}
	return strings.Join(names, ", ")
}
