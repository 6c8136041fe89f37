package agent

import (
	"fmt"
	"maps"
	"slices"
	"time"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/internal/textfmt"
	"github.com/carve-dev/carve/partition"
)

// apply runs the ready changes, with a checkpoint after each op, reads the
// GPUs again, and settles what is in force: the selected profile when
// nothing is pending, draining or failed; a GPU whose change waits keeps
// the sharing it had, since its replicas change with its partition.
func (p *pass) apply() (bool, error) {
	if len(p.ready) > 0 {
		p.runReady()
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
	profile := p.sel.Profile
	switch {
	case isFenced(err):
		p.fence(err)
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

// applyPlans runs the plans with checkpoints and returns the ops done and
// how long they took.
func (r *Reconciler) applyPlans(p *pass, plans []partition.GPUPlan) (int, time.Duration, error) {
	cp := carvev1.Checkpoint{Profile: p.want.Profile, ProfileHash: p.want.Hash, Started: r.now(), Plan: partition.NodePlanToV1(partition.NodePlan{GPUs: plans}), Done: map[int]int{}}
	save := func() error {
		if r.Checkpoints == nil {
			return nil
		}
		r.intent = true
		return r.Checkpoints.Save(cp)
	}
	if err := save(); err != nil {
		return 0, 0, fmt.Errorf("checkpoint before applying: %w", err)
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
	app := partition.Applier{Lib: r.Lib, BeforeOp: r.fencedOp, AfterOp: func(gpu, step int, op partition.Op) error {
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
	r.intent = false
}
