package agent

import (
	"fmt"
	"slices"
	"strings"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/internal/textfmt"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/timeslice"
)

// drain applies the drain policy to the changes that devices in use block.
// Under wait and evict the devices such a change removes are no longer
// advertised, so that no new pod lands on them; under fail the change is
// not made and they stay.
func (p *pass) drain() (bool, error) {
	if len(p.blocked) == 0 {
		p.r.drain = nil
		return true, nil
	}
	now, policy := p.in.Now, p.file.Drain
	target := p.want.Profile + "/" + p.want.Hash
	if p.r.drain == nil || p.r.drain.target != target {
		p.r.drain = &drainState{target: target, since: now}
	}
	what := fmt.Sprintf("profile %s: devices in use block the change of %s: %s",
		p.sel.Profile, textfmt.GPUs(partition.Indices(p.blocked)), strings.Join(blockers(p.blocked), ", "))
	if policy.Policy != configs.DrainFail && !p.allowed() {
		return false, nil
	}
	switch {
	case policy.Policy == configs.DrainFail:
		p.raise(carvev1.StateFailed)
		p.err = fmt.Errorf("%s: %w", what, partition.ErrBlocked)
		p.event(true, carvev1.ReasonBlocked, "%s; drain policy fail: the change is not made", what)
		return true, nil
	case now.Sub(p.r.drain.since) >= policy.Timeout:
		p.raise(carvev1.StateFailed)
		p.err = fmt.Errorf("%s: drain timeout %s passed: %w", what, policy.Timeout, partition.ErrBlocked)
		p.event(true, carvev1.ReasonDrainTimeout, "%s; still in use after the drain timeout of %s, nothing was killed", what, policy.Timeout)
		p.wakeAt(now.Add(p.r.drainRetry()))
	default:
		p.raise(carvev1.StateDraining)
		p.wakeAt(now.Add(p.r.drainRetry()))
		p.wakeAt(p.r.drain.since.Add(policy.Timeout))
		if policy.Policy == configs.DrainEvict {
			p.event(false, carvev1.ReasonEvicting, "%s; evicting the pods that hold them", what)
		} else {
			p.event(false, carvev1.ReasonDraining, "%s; waiting for them to be released (timeout %s)", what, policy.Timeout)
		}
	}
	p.drainDeadline = p.r.drain.since.Add(policy.Timeout)
	p.hide = timeslice.NewIDSet(p.node.GoingAway(p.blocked))
	return true, nil
}

// blockers lists the UUIDs of the devices in use that block the plans,
// sorted, each once.
func blockers(plans []partition.GPUPlan) []string {
	var busy []string
	for _, gp := range plans {
		for _, b := range gp.Blocked {
			busy = append(busy, b.UUID)
		}
	}
	slices.Sort(busy)
	return slices.Compact(busy)
}
