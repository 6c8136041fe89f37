package agent

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/internal/textfmt"
	"github.com/carve-dev/carve/partition"
)

// ErrShutdown is the error of a reconcile pass stopped because the agent is
// shutting down (its context ended) in the middle of an apply: the NVML
// operation in flight finished and is checkpointed, no further one
// started, and the change stays under way (the node's record, paused
// operands, the rollout slot) for the next start to finish.
var ErrShutdown = errors.New("apply stopped at an operation boundary for shutdown")

// apply runs the ready changes, with a checkpoint after each op, reads the
// GPUs again, and settles what is in force: the selected profile when
// nothing is pending, draining or failed; a GPU whose change waits keeps
// the sharing it had, since its replicas change with its partition.
func (p *pass) apply() (bool, error) {
	if len(p.ready) > 0 {
		p.runReady()
		if p.stopped != nil {
			return false, fmt.Errorf("reconcile: %w after %d ops; the checkpoint has them and the next start goes on from there: %w",
				ErrShutdown, p.opsApplied, p.stopped)
		}
		node, err := partition.ReadNode(p.r.Lib)
		if err != nil {
			return false, fmt.Errorf("reconcile: read GPUs after apply: %w", err)
		}
		p.node = node
	}
	// Whether the apply went well or not, and also after a resumed one
	// found nothing left to do; not while the change is stopped by the
	// fence, mid-way.
	if p.fenced == nil {
		p.restoreOperands()
	}
	if p.state == "" {
		p.done = p.target()
	}
	p.sharing = p.want.Sharing
	if applied := p.r.applied; applied != nil && len(p.blocked)+len(p.waiting)+len(p.queued) > 0 {
		p.sharing = maps.Clone(p.want.Sharing)
		for _, gp := range p.blocked {
			p.sharing[gp.Index] = applied.sharing[gp.Index]
		}
		for _, i := range slices.Concat(p.waiting, p.queued) {
			p.sharing[i] = applied.sharing[i]
		}
	}
	return true, nil
}

// runReady applies the ready plans and records how it went.
func (p *pass) runReady() {
	n, d, err := p.r.applyPlans(p, p.ready)
	p.opsApplied, p.applyDuration = n, d
	err = p.withPods(err)
	profile := p.sel.Profile
	switch {
	case errors.Is(err, ErrHeld):
		p.stopHeld(n)
		return
	case isFenced(err):
		p.fence(err)
		return
	case p.interrupted(err):
		// The agent is shutting down: the op in flight finished and is
		// checkpointed, and the change stays under way (its record, its
		// paused operands, its rollout slot) for the next start.
		p.stopped = err
		p.log.Info("apply stopped at an operation boundary for shutdown", "profile", profile, "opsDone", n, "duration", d)
		return
	case err == nil:
		p.event(false, carvev1.ReasonRepartitioned, "profile %s (%s) applied in %s: %d ops on %s",
			profile, p.sel.Source, d.Round(time.Millisecond), n, textfmt.GPUs(partition.Indices(p.ready)))
		p.log.Info("repartitioned", "profile", profile, "ops", n, "duration", d)
		return
	case partition.RebootRequired(err):
		p.raise(carvev1.StateRebootRequired)
		p.wakeAt(p.in.Now.Add(p.r.drainRetry()))
		p.event(true, carvev1.ReasonRebootRequired, "profile %s: a GPU must be reset to change its MIG mode but cannot be now (processes hold it, or the platform needs a reboot): %s", profile, err)
	default:
		p.raise(carvev1.StateFailed)
		p.wakeAt(p.in.Now.Add(p.r.retryInterval()))
		p.event(true, carvev1.ReasonApplyFailed, "profile %s: apply failed after %d ops: %s", profile, n, err)
	}
	p.err = err
	p.log.Error("apply failed", "profile", profile, "opsDone", n, "err", err)
}

// interrupted reports whether err is the pass's context ending (the agent
// shutting down), not a failure of the apply.
func (p *pass) interrupted(err error) bool {
	cerr := p.ctx.Err()
	return cerr != nil && errors.Is(err, cerr)
}

// applyPlans runs the plans with checkpoints and returns the ops done and
// how long they took.
func (r *Reconciler) applyPlans(p *pass, plans []partition.GPUPlan) (int, time.Duration, error) {
	cp := carvev1.Checkpoint{Profile: p.want.Profile, ProfileHash: p.want.Hash, Started: r.now(), Plan: partition.NodePlanToV1(partition.NodePlan{GPUs: plans}), Done: map[int]int{}}
	save := func() error {
		if r.Checkpoints == nil {
			return nil
		}
		r.intent, r.applying = true, ApplyRecordOf(cp)
		return r.Checkpoints.Save(cp)
	}
	if err := save(); err != nil {
		return 0, 0, fmt.Errorf("checkpoint before applying: %w", err)
	}
	if r.heldNow() {
		return 0, 0, fmt.Errorf("before pausing operands and the first op: %w", ErrHeld)
	}
	if disruptive(plans) {
		if err := r.Fence(); err != nil {
			return 0, 0, fmt.Errorf("before pausing operands and the first op: %w", err)
		}
	}
	if err := r.pauseOperands(p, plans, &cp, save); err != nil {
		return 0, 0, err
	}
	n := 0
	uuids := make(map[int]string, len(plans))
	for _, gp := range plans {
		uuids[gp.Index] = gp.UUID
	}
	defer r.inFlight.Store(nil)
	app := partition.Applier{Lib: r.Lib, BeforeOp: r.startOp, AfterOp: func(gpu, step int, op partition.Op) error {
		r.inFlight.Store(nil)
		n++
		cp.Done[gpu] = step
		if rs, ok := r.Devices.(GPUResetter); ok && op.Kind == partition.OpResetGPU {
			rs.GPUReset(uuids[gpu])
		}
		if err := save(); err != nil {
			return err
		}
		if r.Hooks.AfterOp != nil {
			return r.Hooks.AfterOp(gpu, step, op)
		}
		return nil
	}}
	if r.Hooks.BeforeApply != nil {
		r.Hooks.BeforeApply(p.ctx, p.want.Profile, plans)
	}
	start := r.now()
	for _, gp := range plans {
		p.log.Info("applying", "gpu", gp.Index, "uuid", gp.UUID, "ops", len(gp.Ops))
		if err := app.Apply(p.ctx, gp); err != nil {
			return n, r.now().Sub(start), err
		}
	}
	if err := p.ctx.Err(); err != nil {
		// The signal came during the last op: the change is done on the
		// GPUs, but what follows it (operands, record, slot) is the next
		// start's, from the checkpoint.
		return n, r.now().Sub(start), fmt.Errorf("all %d ops done, then: %w", n, err)
	}
	return n, r.now().Sub(start), nil
}

// clearIntent removes the checkpoint once the node is as wanted.
func (p *pass) clearIntent() {
	r := p.r
	// The checkpoint keeps operand labels to restore until they are.
	if !r.intent || r.Checkpoints == nil || len(r.paused) > 0 {
		return
	}
	if err := r.Checkpoints.Clear(); err != nil {
		p.event(true, carvev1.ReasonCheckpointFailed, "the node is as wanted, but the apply checkpoint could not be removed: %s", err)
		return
	}
	r.intent, r.applying = false, nil
}

// startOp is the Applier's BeforeOp: the rollout's fence, then the op is
// noted as in flight (InFlight) until it is done.
func (r *Reconciler) startOp(gpu, step int, op partition.Op) error {
	if err := r.fencedOp(gpu, step, op); err != nil {
		return err
	}
	what := fmt.Sprintf("GPU %d op %d %s", gpu, step, op)
	r.inFlight.Store(&what)
	return nil
}

// InFlight names the NVML operation running now ("GPU 0 op 3 reset-gpu"),
// "" when none is: what a shutdown waits for. Safe to call from any
// goroutine.
func (r *Reconciler) InFlight() string {
	if what := r.inFlight.Load(); what != nil {
		return *what
	}
	return ""
}
