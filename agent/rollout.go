package agent

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/internal/textfmt"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/rollout"
)

// Rollout hands out the slots that bound how many nodes are in a
// disruptive change at once, and keeps the failure budget; *LeaseRollout
// is one. A Reconciler without one bounds nothing.
type Rollout interface {
	// Acquire takes a slot for this node's disruptive change, or keeps the
	// one it holds; a Decision that is not granted says why.
	Acquire(ctx context.Context, policy configs.Rollout, revision string) (rollout.Decision, error)
	// Holding reports whether this node holds a slot.
	Holding() bool
	// Slot names the slot this node holds, "" when none.
	Slot() string
	// Fence says whether this node may start a disruptive step now: nil
	// while it holds its slot and renewed it recently enough that no other
	// node can have taken it over; else an error wrapping ErrFenced that
	// says why.
	Fence() error
	// Confirm renews this node's slot at once. Called after the node's
	// record says that it is mid-change and before its first disruptive
	// step, so that a node that took the slot over before the record was
	// written is seen (an error wrapping ErrFenced) before anything
	// changes.
	Confirm(ctx context.Context) error
	// Release gives this node's slot back, if it holds one.
	Release(ctx context.Context) error
	// Report records how this node's disruptive change on revision ended:
	// failed writes the failure, else any earlier failure is removed.
	// halted reports whether the failures on revision now spend the
	// budget.
	Report(ctx context.Context, policy configs.Rollout, revision string, failed bool) (halted bool, err error)
	// Recovered removes this node's failure, if one is recorded, once the
	// profile in force is realised without a slot.
	Recovered(ctx context.Context) error
}

var _ Rollout = (*LeaseRollout)(nil)

// Defaults of the rollout's timing.
const (
	// DefaultSlotRetry is how often a node waiting for a rollout slot asks
	// again (plus up to half as much at random, so that waiting nodes do
	// not ask together).
	DefaultSlotRetry = 5 * time.Second
	// DefaultHaltedRetry is how often a node held back by a halted rollout
	// looks again; a new revision of the file wakes it at once.
	DefaultHaltedRetry = time.Minute
)

// takeSlot holds back the disruptive changes (ready or blocked) until the
// node holds a rollout slot: they keep their devices advertised and wait,
// state pending, with the reason in the record and an Event. Changes that
// destroy nothing go ahead without one.
func (p *pass) takeSlot() (bool, error) {
	r := p.r
	if r.Rollout == nil || !slices.ContainsFunc(slices.Concat(p.ready, p.blocked), partition.GPUPlan.Disruptive) {
		return true, nil
	}
	policy := p.file.RolloutFor(p.sel)
	dec, err := r.Rollout.Acquire(p.ctx, policy, p.in.Revision)
	if err == nil {
		r.halted = haltedRevision{revision: p.in.Revision, halted: dec.Halted}
		for _, l := range dec.Stuck {
			p.stuck = append(p.stuck, StuckSlot{Slot: l.Name, Holder: l.Holder, For: max(p.in.Now.Sub(l.Expires()), 0)})
		}
	}
	if err == nil && dec.Granted {
		return true, nil
	}
	p.ready, p.blocked = p.holdBack(p.ready), p.holdBack(p.blocked)
	p.raise(carvev1.StatePending)
	retry := r.slotRetry()
	switch {
	case err != nil:
		p.waitingFor("a rollout slot: the rollout Leases cannot be read: %s", textfmt.OneLine(err.Error()))
		p.event(true, carvev1.ReasonRolloutQueued, "profile %s: disruptive changes on %s wait for a rollout slot; the rollout Leases cannot be read: %s",
			p.sel.Profile, textfmt.GPUs(p.queued), textfmt.OneLine(err.Error()))
	case dec.Halted:
		retry = DefaultHaltedRetry
		p.waitingFor("%s", dec.Reason(policy))
		p.event(true, carvev1.ReasonRolloutHalted, "profile %s: disruptive changes on %s are held back: %s", p.sel.Profile, textfmt.GPUs(p.queued), dec.Reason(policy))
	default:
		p.waitingFor("a rollout slot: %s", dec.Reason(policy))
		p.event(false, carvev1.ReasonRolloutQueued, "profile %s: disruptive changes on %s wait for a rollout slot: %s", p.sel.Profile, textfmt.GPUs(p.queued), dec.Reason(policy))
	}
	p.wakeAt(p.in.Now.Add(retry + rand.N(retry/2+1)))
	return true, nil
}

// holdBack returns the plans that destroy nothing and queues the GPUs of
// the others.
func (p *pass) holdBack(plans []partition.GPUPlan) []partition.GPUPlan {
	var keep []partition.GPUPlan
	for _, gp := range plans {
		if gp.Disruptive() {
			p.queued = append(p.queued, gp.Index)
			continue
		}
		keep = append(keep, gp)
	}
	return keep
}

// waitingFor records what the pending node waits for.
func (p *pass) waitingFor(format string, args ...any) {
	if p.waitReason == "" {
		p.waitReason = fmt.Sprintf(format, args...)
	}
}

// endChange settles this node's part in the rollout once the pass is
// over. A node still mid-change keeps its slot and its record's change:
// it drains, applies, needs a reboot, was stopped at an operation boundary
// by its fence, is held (carve.dev/hold) mid-change, or waits for a slot to go on with a change under way.
// Otherwise the change is over: the new devices are advertised, or the
// change failed, which counts against the revision's failure budget. The
// record written after this pass no longer says mid-change, and the slot
// is released once it is written (ReleaseSlot), so that the outside view
// never shows more nodes mid-change than slots held.
func (p *pass) endChange() {
	r := p.r
	if p.stillChanging() {
		return
	}
	r.change = nil
	if r.Rollout == nil {
		return
	}
	if !r.Rollout.Holding() {
		p.clearRecoveredFailure()
		return
	}
	p.release = true
	failed := p.state == carvev1.StateFailed
	if p.file == nil {
		return
	}
	policy := p.file.RolloutFor(p.sel)
	halted, err := r.Rollout.Report(p.ctx, policy, p.in.Revision, failed)
	switch {
	case err != nil:
		p.log.Warn("could not record the outcome of the change for the rollout", "failed", failed, "err", err)
	case failed && halted:
		p.events = append(p.events, Event{Warning: true, Reason: carvev1.ReasonRolloutHalted, OnConfigMap: true,
			Message: fmt.Sprintf("rollout halted: this node's disruptive change failed, and the failed nodes reach rollout.maxFailures (%d) on this revision of the profile file; no further node starts one until the file changes (fix or revert it)",
				policy.MaxFailures)})
	}
	if err == nil {
		r.halted = haltedRevision{revision: p.in.Revision, halted: halted}
	}
}

// stillChanging reports whether the node is still mid-change after the
// pass.
func (p *pass) stillChanging() bool {
	switch {
	case p.fenced != nil, p.held && p.r.change != nil:
		return true
	case p.state == carvev1.StateDraining, p.state == carvev1.StateRebootRequired, p.state == carvev1.StateApplying:
		return true
	}
	return p.state == carvev1.StatePending && p.r.change != nil && len(p.queued) > 0
}

// ReleaseSlot gives the node's rollout slot back after a pass whose
// Result says ReleaseSlot, once that Result's record (which no longer says
// mid-change) is written. A slot that cannot be released is left to
// expire: the record shows no change in progress, so it is taken over.
func (r *Reconciler) ReleaseSlot(ctx context.Context) {
	if r.Rollout == nil {
		return
	}
	if err := r.Rollout.Release(ctx); err != nil {
		r.logger().Warn("could not release the rollout slot; it expires on its own", "err", err)
	}
}

// clearRecoveredFailure removes this node's failure from the rollout's
// budget once the profile in force is realised without a slot: a change
// that failed after its last operation (advertising to a kubelet that was
// restarting) and then converged must not go on halting other nodes.
// Without a failure recorded this costs nothing (at most one request
// after the agent starts).
func (p *pass) clearRecoveredFailure() {
	if p.state != carvev1.StateSuccess || p.done == nil {
		return
	}
	if err := p.r.Rollout.Recovered(p.ctx); err != nil {
		p.log.Warn("could not remove this node's failure from the rollout", "err", err)
	}
}

// rolloutStatus is the node's part in the rollout once the pass is over.
func (p *pass) rolloutStatus() RolloutStatus {
	r := p.r
	if r.Rollout == nil {
		return RolloutStatus{}
	}
	return RolloutStatus{
		Holding: r.Rollout.Holding() && !p.release,
		Waiting: len(p.queued) > 0,
		Halted:  r.halted.halted && r.halted.revision == p.in.Revision,
		Stuck:   p.stuck,
	}
}

// slotRetry is how often a node waiting for a slot asks again.
func (r *Reconciler) slotRetry() time.Duration {
	if r.SlotRetry > 0 {
		return r.SlotRetry
	}
	return DefaultSlotRetry
}
