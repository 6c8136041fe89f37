package agent

import (
	"slices"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/internal/textfmt"
	"github.com/carve-dev/carve/partition"
)

// checkStateDir makes sure the state directory can take the apply's
// checkpoints before any of the change happens: before a rollout slot is
// taken (a failure there would count against the fleet's budget) and
// before devices are withdrawn. A directory that is read-only, full or in
// the way of a file fails the pass with the GPUs and the advertised
// devices as they are; the pass is retried.
func (p *pass) checkStateDir() (bool, error) {
	r := p.r
	plans := slices.Concat(p.ready, p.blocked)
	if r.Checkpoints == nil || !slices.ContainsFunc(plans, func(gp partition.GPUPlan) bool { return len(gp.Ops) > 0 || len(gp.WouldDo) > 0 }) {
		return true, nil
	}
	cp := carvev1.Checkpoint{Profile: p.want.Profile, ProfileHash: p.want.Hash, Started: p.in.Now, Plan: partition.NodePlanToV1(partition.NodePlan{GPUs: plans}), Done: map[int]int{}}
	data, err := cp.Encode()
	if err == nil {
		err = r.Checkpoints.Probe(2*len(data) + 4096) // room for the ops done and the paused operands
	}
	if err == nil {
		return true, nil
	}
	p.raise(carvev1.StateFailed)
	p.err = err
	p.wakeAt(p.in.Now.Add(r.retryInterval()))
	p.event(true, carvev1.ReasonApplyFailed, "profile %s: no change started on %s: %s", p.sel.Profile,
		textfmt.GPUs(partition.Indices(plans)), textfmt.OneLine(err.Error()))
	p.log.Error("state directory unusable; no change started", "err", err)
	return false, nil
}
