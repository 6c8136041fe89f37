package agent

import (
	"fmt"
	"time"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/internal/textfmt"
)

// plan resolves the selected profile on the node's GPUs and plans it with
// the devices pods hold. A profile that does not fit (or has dynamic GPUs
// without --advertise dra) ends the pass with the GPUs as they are; so does
// a node already as wanted, which then has the profile in force (and gets
// back the operands an apply stopped after its last op left paused).
func (p *pass) plan() (bool, error) {
	want, ok := p.desiredState()
	if !ok {
		return false, nil
	}
	p.want = want
	view := p.planView(want)
	plan, err := want.Plan(view, nil)
	if err != nil {
		p.unrealisable(err)
		return false, nil
	}
	if plan.NoOp() {
		p.r.drain = nil
		p.sharing, p.done = want.Sharing, p.target()
		// An apply stopped after its last op (a shutdown, a kill) left
		// nothing to do but what follows it: the paused operands.
		p.restoreOperands()
		return false, nil
	}
	if p.inUse, err = p.r.InUse.InUse(p.ctx); err != nil {
		return false, fmt.Errorf("reconcile: devices in use: %w", err)
	}
	if p.nodePlan, err = want.Plan(view, p.inUse.Set()); err != nil {
		p.unrealisable(err)
		return false, nil
	}
	return true, nil
}

// order sorts the GPUs' changes: those that can run now (ready), those
// devices in use block, and disruptive ones that wait for a maintenance
// window.
func (p *pass) order() (bool, error) {
	inMaint, maintNext := p.file.InMaintenance(p.in.Now)
	for _, gp := range p.nodePlan.GPUs {
		switch {
		case gp.NoOp():
		case gp.Disruptive() && !inMaint:
			p.waiting = append(p.waiting, gp.Index)
		case gp.IsBlocked():
			p.blocked = append(p.blocked, gp)
		default:
			p.ready = append(p.ready, gp)
		}
	}
	if len(p.waiting) > 0 {
		p.raise(carvev1.StatePending)
		p.wakeAt(maintNext)
		when := "no maintenance window is scheduled"
		if !maintNext.IsZero() {
			when = "the next maintenance window starts at " + maintNext.UTC().Format(time.RFC3339)
		}
		p.waitingFor("a maintenance window for %s: %s", textfmt.GPUs(p.waiting), when)
		p.event(false, carvev1.ReasonPending, "profile %s: disruptive changes on %s wait for a maintenance window; %s",
			p.sel.Profile, textfmt.GPUs(p.waiting), when)
	}
	return true, nil
}
