package agent

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/desired"
	"github.com/carve-dev/carve/internal/textfmt"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/plugin"
	"github.com/carve-dev/carve/timeslice"
)

// pass is one reconcile: what it starts from, what each step finds, and
// the outcome it records. Each step is a method that returns whether the
// next step should run, or an error that ends the pass with nothing to
// record.
type pass struct {
	r   *Reconciler
	ctx context.Context
	in  Input
	log *slog.Logger

	// node is the GPUs as they are (read again after an apply).
	node partition.Node
	// file is the profile file, once accepted.
	file *configs.File
	// sel is the profile in force and why.
	sel configs.Selection
	// want is the selected profile resolved on the node.
	want desired.State
	// nodePlan is the plan with the devices in use.
	nodePlan partition.NodePlan
	// inUse is the kubelet's latest answer on the devices pods hold.
	inUse *plugin.InUse
	// ready can run now; blocked wait for devices in use; waiting (GPU
	// indices) wait for a maintenance window.
	ready, blocked []partition.GPUPlan
	waiting        []int
	// queued are the GPU indices whose disruptive changes wait for a
	// rollout slot; waitReason says what the pending node waits for.
	queued     []int
	waitReason string

	// state is the worst state found so far ("" until one is found).
	state   string
	err     error
	events  []Event
	requeue time.Time
	// sharing is what the advertised devices are shared by; hide are
	// devices not to advertise, since a blocked change removes them.
	sharing map[int]timeslice.Sharing
	hide    timeslice.IDSet
	// done is the profile realised in full by this pass, nil when none is.
	done          *appliedState
	opsApplied    int
	applyDuration time.Duration
	// drainDeadline is when the drain of the blocked changes times out
	// (zero when none drains).
	drainDeadline time.Time
	// fenced is why the rollout's fence stopped the change at an
	// operation boundary, nil while it did not.
	fenced error
	// stopped is the cancelled context's error when the agent is shutting
	// down and the apply stopped at an operation boundary, nil otherwise.
	stopped error
	// held: an operator holds the node (carve.dev/hold=true), found at
	// the start of the pass or at an operation boundary.
	held bool
	// stuck are the slots found stuck when asking for one.
	stuck []StuckSlot
	// release: the change is over and the node holds a slot, to be
	// released once the record is written (Result.ReleaseSlot).
	release bool
}

// begin starts a pass: on the first one it reports an apply a previous run
// left unfinished, then it reads the GPUs.
func (r *Reconciler) begin(ctx context.Context, in Input) (*pass, error) {
	p := &pass{r: r, ctx: ctx, in: in, log: r.logger(), sel: noSelection()}
	if r.driverBack != nil {
		p.events = append(p.events, *r.driverBack)
		r.driverBack = nil
	}
	if !r.started {
		r.started = true
		p.resume()
	}
	node, err := partition.ReadNode(r.Lib)
	if err != nil {
		return nil, fmt.Errorf("reconcile: read GPUs: %w", err)
	}
	p.node = node
	p.findLost()
	p.sharing = r.appliedSharing()
	return p, nil
}

// noSelection is the selection of a pass that has none.
func noSelection() configs.Selection { return configs.Selection{Source: configs.SourceNone, Rule: -1} }

// resume reports an apply that a previous run of the agent left unfinished.
func (p *pass) resume() {
	r := p.r
	if prev := p.in.Previous; prev != nil && prev.Profile != "" {
		r.applied = &appliedState{profile: prev.Profile, hash: prev.ProfileHash, sharing: SharingFromRecords(prev.GPUs)}
	}
	if prev := p.in.Previous; prev != nil && prev.Change != nil {
		// A change the previous run began is still under way.
		r.change = prev.Change
	}
	if r.Checkpoints == nil {
		return
	}
	intent, err := r.Checkpoints.Load()
	if err != nil {
		p.log.Warn("checkpoint unreadable; re-planning from the GPUs as they are", "err", err)
		return
	}
	if intent == nil {
		return
	}
	r.intent, r.applying = true, ApplyRecordOf(*intent)
	r.paused = intent.Paused
	p.event(false, carvev1.ReasonResumingApply, "an apply of profile %s started %s was interrupted after %d ops; re-planning from the GPUs as they are",
		intent.Profile, intent.Started.UTC().Format(time.RFC3339), intent.OpsDone())
	p.log.Info("resuming an interrupted apply", "profile", intent.Profile, "opsDone", intent.OpsDone())
}

func (p *pass) event(warning bool, reason, format string, args ...any) {
	p.events = append(p.events, Event{Warning: warning, Reason: reason, Message: fmt.Sprintf(format, args...)})
}

// wakeAt asks for the next reconcile at t at the latest.
func (p *pass) wakeAt(t time.Time) {
	if !t.IsZero() && (p.requeue.IsZero() || t.Before(p.requeue)) {
		p.requeue = t
	}
}

// raise sets the state unless a worse one is set already.
func (p *pass) raise(state string) {
	if carvev1.StateRank(state) > carvev1.StateRank(p.state) {
		p.state = state
	}
}

// unrealisable records that the selected profile cannot be realised here;
// the GPUs are left as they are.
func (p *pass) unrealisable(err error) {
	p.raise(carvev1.StateFailed)
	p.err = fmt.Errorf("profile %s cannot be realised: %w", p.sel.Profile, err)
	p.event(true, carvev1.ReasonUnrealisable, "profile %s cannot be realised on this node, GPUs left as they are: %s",
		p.sel.Profile, textfmt.OneLine(err.Error()))
}

// target is what the node is once the selected profile is realised.
func (p *pass) target() *appliedState {
	return &appliedState{profile: p.want.Profile, hash: p.want.Hash, sharing: p.want.Sharing}
}
