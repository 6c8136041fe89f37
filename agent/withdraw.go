package agent

import (
	"fmt"

	"github.com/carve-dev/carve/partition"
)

// withdrawAndReplan stops advertising the devices the ready changes remove
// and asks the kubelet again which devices pods hold: a pod may have been
// given one between the plan and the withdrawal. Each ready GPU is planned
// again with that answer, and a GPU it now blocks joins the blocked ones.
func (p *pass) withdrawAndReplan() (bool, error) {
	ids := p.node.GoingAway(p.ready)
	if len(ids) == 0 {
		return true, nil
	}
	if !p.allowed() {
		return false, nil
	}
	if err := p.r.Devices.Withdraw(p.ctx, ids); err != nil {
		return false, fmt.Errorf("reconcile: withdraw devices before destroying them: %w", err)
	}
	inUse, err := p.r.InUse.InUse(p.ctx)
	if err != nil {
		return false, fmt.Errorf("reconcile: devices in use after withdrawing: %w", err)
	}
	p.inUse = inUse
	busy := inUse.Set()
	var still []partition.GPUPlan
	view := p.planView(p.want)
	for _, gp := range p.ready {
		g, _ := view.GPU(gp.Index)
		np, err := partition.PlanGPU(g, p.node.Models[g.Index], p.want.Targets[g.Index], busy)
		if err != nil {
			p.unrealisable(err)
			return false, nil
		}
		if np.IsBlocked() {
			p.blocked = append(p.blocked, np)
			continue
		}
		still = append(still, np)
	}
	p.ready = still
	return true, nil
}
