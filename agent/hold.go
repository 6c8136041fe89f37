package agent

import (
	"errors"
	"fmt"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/internal/textfmt"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/timeslice"
)

// holdSet is the label that holds a node, as it is written on it.
const holdSet = carvev1.LabelHold + "=" + carvev1.HoldTrue

// holdWait is the start of a held node's waiting reason.
const holdWait = "its hold to be removed (" + holdSet + ")"

// ErrHeld is the error of a step not taken because an operator holds the
// node (carve.dev/hold=true).
var ErrHeld = errors.New("the node is held (" + holdSet + ")")

// checkHold reads the hold from the labels the pass starts from: a held
// node is in state held whatever else the pass finds, short of a failure;
// a value of carve.dev/hold other than "true" holds nothing and is
// reported; a hold removed since the last pass is reported too.
func (p *pass) checkHold() (bool, error) {
	r := p.r
	held, invalid := carvev1.Held(p.in.Labels)
	if invalid {
		p.event(true, carvev1.ReasonHoldIgnored, "%s=%q holds nothing: only %q holds the node; carve goes on as if it were absent",
			carvev1.LabelHold, p.in.Labels[carvev1.LabelHold], carvev1.HoldTrue)
	}
	wasHeld := r.held || p.in.Previous != nil && p.in.Previous.State == carvev1.StateHeld
	r.held = held
	if !held {
		if wasHeld {
			p.event(false, carvev1.ReasonHoldLifted, "%s removed: carve goes on", carvev1.LabelHold)
			p.log.Info("hold lifted")
		}
		return true, nil
	}
	p.held = true
	p.raise(carvev1.StateHeld)
	p.waitReason = holdWait
	return true, nil
}

// observeHeld ends the pass of a held node once the profile in force is
// selected: it plans the profile, records the change the agent would make
// without the hold (in the record's Waiting and a Held Event) and changes
// nothing: no NVML mutation, no withdrawal, no new sharing; the devices
// are advertised as they are.
func (p *pass) observeHeld() (bool, error) {
	if !p.held {
		return true, nil
	}
	want, ok := p.desiredState()
	if !ok {
		return false, nil
	}
	plan, err := want.Plan(p.planView(want), nil)
	if err != nil {
		p.unrealisable(err)
		return false, nil
	}
	p.want, p.r.drain = want, nil
	p.holdNoted(p.wouldChange(plan))
	return false, nil
}

// wouldChange says what realising want would change: the plan's ops, or
// only the sharing, or nothing.
func (p *pass) wouldChange(plan partition.NodePlan) string {
	var gpus []int
	ops, disrupts := 0, false
	for _, gp := range plan.GPUs {
		if gp.NoOp() {
			continue
		}
		gpus = append(gpus, gp.Index)
		ops += len(gp.Ops)
		disrupts = disrupts || gp.Disruptive()
	}
	profile := fmt.Sprintf("profile %s (%s)", p.want.Profile, p.sel.Source)
	switch a := p.r.applied; {
	case len(gpus) > 0 && disrupts:
		return fmt.Sprintf("%s: %d ops on %s, disruptive", profile, ops, textfmt.GPUs(gpus))
	case len(gpus) > 0:
		return fmt.Sprintf("%s: %d ops on %s, creates only", profile, ops, textfmt.GPUs(gpus))
	case a == nil || a.profile != p.want.Profile || a.hash != p.want.Hash || !sameSharing(a.sharing, p.want.Sharing):
		return profile + ": no MIG change, the sharing of the devices changes"
	}
	return profile + ": nothing, it is realised"
}

// holdNoted records what the held node would do, in its record and an
// Event.
func (p *pass) holdNoted(would string) {
	p.waitReason = holdWait + "; it would then apply " + would
	p.event(false, carvev1.ReasonHeld, "node held by %s: carve observes only; without the hold it would apply %s", holdSet, would)
}

// heldNow reports whether the node is held at this instant (the Hold
// hook), for a hold set while a change is under way.
func (r *Reconciler) heldNow() bool { return r.Hold != nil && r.Hold() }

// stopHeld records that a hold set during the pass stopped the change at
// an operation boundary after ops ops: the node is held, stays mid-change
// if it was, and keeps its slot and checkpoint; the next pass after the
// hold is removed goes on with the remaining ops.
func (p *pass) stopHeld(ops int) {
	if p.held {
		return
	}
	p.held, p.r.held = true, true
	p.raise(carvev1.StateHeld)
	p.waitReason = fmt.Sprintf("%s; the change to profile %s stopped at an operation boundary after %d ops", holdWait, p.sel.Profile, ops)
	p.event(false, carvev1.ReasonHeld, "node held by %s: the change to profile %s stopped at an operation boundary after %d ops; it goes on once the hold is removed",
		holdSet, p.sel.Profile, ops)
	p.log.Info("held mid-change", "profile", p.sel.Profile, "opsDone", ops)
}

// hideWhileHeld keeps a held node that is mid-change as unavailable as the
// change left it: the devices the rest of the change removes stay
// withdrawn, so that no pod lands on them while the change waits.
func (p *pass) hideWhileHeld() {
	if !p.held || p.r.change == nil || p.want.Targets == nil {
		return
	}
	plan, err := p.want.Plan(p.planView(p.want), nil)
	if err != nil {
		return
	}
	ids := p.node.GoingAway(plan.GPUs)
	if len(ids) == 0 {
		return
	}
	if p.hide == nil {
		p.hide = timeslice.IDSet{}
	}
	for _, id := range ids {
		p.hide[id] = true
	}
}
