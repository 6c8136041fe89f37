package agent

import (
	"errors"
	"time"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/internal/textfmt"
	"github.com/carve-dev/carve/partition"
)

// beginChange makes the node's record say that it is mid-change before
// its first disruptive step (write-ahead: the outside view is never behind
// the GPUs), then renews the rollout slot, so that a node that took the
// slot over before the record said so is seen before anything changes. A
// change already recorded (an earlier pass, or an agent before a restart)
// goes on. Without a RecordChange hook nothing is recorded.
func (p *pass) beginChange() (bool, error) {
	r := p.r
	if p.disrupts() && r.heldNow() {
		p.holdBackAll()
		p.stopHeld(0)
		return false, nil
	}
	if r.change != nil || r.Hooks.RecordChange == nil || !p.disrupts() {
		return true, nil
	}
	change := &carvev1.ChangeRecord{Since: p.in.Now.UTC().Format(time.RFC3339), Profile: p.sel.Profile}
	if r.Rollout != nil {
		change.Slot = r.Rollout.Slot()
	}
	next := carvev1.NodeRecord{}
	if p.in.Previous != nil {
		next = *p.in.Previous
	}
	next.Change, next.AgentVersion, next.ConfigMap = change, r.AgentVersion, r.ConfigMap
	rec := carvev1.Next(p.in.Previous, next, p.in.Now)
	if err := r.Hooks.RecordChange(p.ctx, rec); err != nil {
		p.holdBackAll()
		p.raise(carvev1.StatePending)
		p.waitingFor("its record to say that it is mid-change before the first disruptive step: %s", textfmt.OneLine(err.Error()))
		p.wakeAt(p.in.Now.Add(r.slotRetry()))
		return false, nil
	}
	p.in.Previous, r.change = &rec, change
	if r.Rollout == nil {
		return true, nil
	}
	if err := r.Rollout.Confirm(p.ctx); err != nil {
		// Nothing has changed yet: the record this pass writes says so
		// again.
		r.change = nil
		p.holdBackAll()
		p.fence(err)
		return false, nil
	}
	return true, nil
}

// disrupts reports whether the pass is about to make a disruptive step:
// a ready change that destroys, or a blocked one whose devices are
// withdrawn while the drain policy waits or evicts.
func (p *pass) disrupts() bool {
	return disruptive(p.ready) || p.file != nil && p.file.Drain.Policy != configs.DrainFail && disruptive(p.blocked)
}

// holdBackAll queues every disruptive change of the pass: none starts.
func (p *pass) holdBackAll() {
	p.ready, p.blocked = p.holdBack(p.ready), p.holdBack(p.blocked)
}

// allowed reports whether a disruptive step may start now, as the hold
// and the rollout's fence say; when it may not, the pass stops there
// (stopHeld, fence).
func (p *pass) allowed() bool {
	if p.r.heldNow() {
		p.stopHeld(0)
		return false
	}
	if err := p.r.Fence(); err != nil {
		p.fence(err)
		return false
	}
	return true
}

// fence records that the change stopped at an operation boundary because
// the rollout slot is not valid: the node stays mid-change, keeps its
// checkpoint, waits, and goes on once it holds its slot again.
func (p *pass) fence(err error) {
	if p.fenced != nil {
		return
	}
	p.fenced = err
	p.raise(carvev1.StatePending)
	p.waitingFor("its rollout slot: %s", textfmt.OneLine(err.Error()))
	p.event(true, carvev1.ReasonRolloutFenced, "profile %s: the disruptive change stopped at an operation boundary and goes on once this node holds its rollout slot again: %s",
		p.sel.Profile, textfmt.OneLine(err.Error()))
	p.wakeAt(p.in.Now.Add(p.r.slotRetry()))
	p.log.Warn("disruptive change fenced", "err", err)
}

// fencedOp is the Applier's BeforeOp: no op starts while the node is held,
// and a disruptive op starts only while the fence allows it. Creating
// instances in free space needs no slot, so the fence does not hold it
// back (what is left of a failed change, say).
func (r *Reconciler) fencedOp(_, _ int, op partition.Op) error {
	if r.heldNow() {
		return ErrHeld
	}
	if !op.Disruptive() {
		return nil
	}
	return r.Fence()
}

// isFenced reports whether err is the fence's.
func isFenced(err error) bool { return errors.Is(err, ErrFenced) }

// Fence reports whether a disruptive step may start now (the pass's
// withdrawals and ops, the caller's evictions): nil without a rollout.
func (r *Reconciler) Fence() error {
	if r.Rollout == nil {
		return nil
	}
	return r.Rollout.Fence()
}
