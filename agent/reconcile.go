package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/plugin"
	"github.com/carve-dev/carve/timeslice"
)

// InUseSource says which devices pods hold; *plugin.PodResourcesClient is
// one.
type InUseSource interface {
	InUse(ctx context.Context) (*plugin.InUse, error)
}

// Advertiser serves devices to the kubelet; *plugin.Manager is one.
type Advertiser interface {
	// Update advertises exactly res and ends every withdrawal.
	Update(ctx context.Context, res timeslice.Resources) error
	// Withdraw stops advertising devices (device IDs, device UUIDs or GPU
	// UUIDs) and returns once the kubelet has been sent the reduced lists.
	Withdraw(ctx context.Context, ids []string) error
}

// Defaults of the Reconciler.
const (
	// DefaultDrainRetry is how often a reconcile blocked by devices in use
	// (or by a GPU reset that processes prevent) is retried.
	DefaultDrainRetry = 10 * time.Second
	// DefaultRetryInterval is when a reconcile that failed is retried.
	DefaultRetryInterval = 30 * time.Second
)

// Event reasons.
const (
	ReasonConfigRejected   = "ConfigRejected"
	ReasonUnrealisable     = "ProfileUnrealisable"
	ReasonRepartitioned    = "Repartitioned"
	ReasonSharingChanged   = "SharingChanged"
	ReasonDraining         = "Draining"
	ReasonEvicting         = "Evicting"
	ReasonBlocked          = "Blocked"
	ReasonDrainTimeout     = "DrainTimeout"
	ReasonPending          = "WaitingForMaintenance"
	ReasonRebootRequired   = "RebootRequired"
	ReasonApplyFailed      = "ApplyFailed"
	ReasonAdvertiseFailed  = "AdvertiseFailed"
	ReasonResumingApply    = "ResumingApply"
	ReasonCheckpointFailed = "CheckpointFailed"
)

// Event is a Kubernetes Event the caller should emit on the Node.
type Event struct {
	// Warning selects type Warning; else Normal.
	Warning bool
	// Reason is one of the Reason constants.
	Reason string
	// Message says what happened.
	Message string
}

// Input is what one reconcile works from.
type Input struct {
	// Config is the parsed profile file; nil when ConfigErr is set.
	Config *configs.File
	// ConfigErr is the parse error of the file (or why it is missing).
	ConfigErr error
	// Labels are the node's labels now.
	Labels map[string]string
	// Now is the instant the reconcile selects the profile for.
	Now time.Time
	// Previous is the carve.dev/partition annotation the node carries, nil
	// when none (or unreadable).
	Previous *Partition
}

// Result is what one reconcile did and what the caller should record.
type Result struct {
	// State is one of the State constants.
	State string
	// Selection is the profile in force and why (Source configs.SourceNone
	// when the file was rejected or no profile selects the node).
	Selection configs.Selection
	// Labels are the owned node labels, all of them (see MetadataPatch).
	Labels map[string]string
	// Annotation is the carve.dev/partition record to write.
	Annotation Partition
	// Events are the Events to emit; an Event already emitted by the
	// previous reconcile is not repeated.
	Events []Event
	// Requeue is when to reconcile again at the latest (zero: only on
	// change of the inputs).
	Requeue time.Time
	// Resources are the devices advertised.
	Resources timeslice.Resources
	// Evict lists the containers holding devices a change removes, when
	// the drain policy is evict; the caller evicts their pods.
	Evict []plugin.Assignment
	// Err is the problem recorded as the annotation's last error.
	Err error
	// OpsApplied counts the NVML ops this reconcile ran.
	OpsApplied int
	// ApplyDuration is how long the ops took (zero when none ran).
	ApplyDuration time.Duration
}

// Reconciler realises the profile in force on the node's GPUs and
// advertises the result. It is Kubernetes-free: the caller feeds it the
// profile file and node labels, and records its Result. One goroutine calls
// Reconcile at a time.
type Reconciler struct {
	// Lib is the NVML (real or simulated), initialised.
	Lib partition.NVML
	// InUse says which devices pods hold.
	InUse InUseSource
	// Devices advertises devices to the kubelet.
	Devices Advertiser
	// Checkpoints keeps the intent of an apply; nil keeps none.
	Checkpoints *Checkpoints
	// Logger logs; default slog.Default().
	Logger *slog.Logger
	// DrainRetry and RetryInterval default to DefaultDrainRetry and
	// DefaultRetryInterval.
	DrainRetry, RetryInterval time.Duration
	// Clock times applies for Events and metrics; default time.Now.
	Clock func() time.Time
	// AfterOp, when set, runs after each op is done and checkpointed; an
	// error stops the apply as a crash would (a test hook).
	AfterOp func(gpu, step int, op partition.Op) error
	// OnApply, when set, is called before the ops of a reconcile run, with
	// the profile and the plans about to run, so the caller can record the
	// state applying while they do.
	OnApply func(ctx context.Context, profile string, plans []partition.GPUPlan)

	started bool
	// intent is true while a checkpoint may be on disk: one found at start
	// or written by an apply, removed once the node is as wanted.
	intent     bool
	applied    *appliedState
	drain      *drainState
	lastEvents map[string]bool
}

// appliedState is the profile last realised in full.
type appliedState struct {
	profile, hash string
	sharing       map[int]timeslice.Sharing
}

// drainState tracks a change blocked by devices in use.
type drainState struct {
	target string
	since  time.Time
}

// outcome collects a reconcile's findings.
type outcome struct {
	state   string
	err     error
	events  []Event
	requeue time.Time
}

func (o *outcome) event(warning bool, reason, format string, args ...any) {
	o.events = append(o.events, Event{Warning: warning, Reason: reason, Message: fmt.Sprintf(format, args...)})
}

func (o *outcome) wakeAt(t time.Time) {
	if !t.IsZero() && (o.requeue.IsZero() || t.Before(o.requeue)) {
		o.requeue = t
	}
}

// raise sets the state unless a worse one is set already.
func (o *outcome) raise(state string) {
	if stateRank(state) > stateRank(o.state) {
		o.state = state
	}
}

func stateRank(s string) int {
	switch s {
	case StateRebootRequired:
		return 5
	case StateFailed:
		return 4
	case StateDraining:
		return 3
	case StatePending:
		return 2
	case StateApplying:
		return 1
	}
	return 0
}

func (r *Reconciler) logger() *slog.Logger {
	if r.Logger == nil {
		return slog.Default()
	}
	return r.Logger
}

func (r *Reconciler) now() time.Time {
	if r.Clock == nil {
		return time.Now()
	}
	return r.Clock()
}

func (r *Reconciler) drainRetry() time.Duration {
	if r.DrainRetry <= 0 {
		return DefaultDrainRetry
	}
	return r.DrainRetry
}

func (r *Reconciler) retryInterval() time.Duration {
	if r.RetryInterval <= 0 {
		return DefaultRetryInterval
	}
	return r.RetryInterval
}

// Reconcile does one reconcile: select the profile, resolve it onto the
// GPUs, plan with the devices in use, withdraw what will go and re-check
// it is free, apply with checkpoints, advertise, and say what to record.
// A rejected file, an unknown profile or an unrealisable one never touches
// the GPUs. The file is rejected only when it is broken for every node
// (schema, or geometry that fits no known GPU model); a selected profile
// that does not fit this node's GPUs is unrealisable here (state failed,
// Event ProfileUnrealisable), and profiles not selected do not matter, so
// that one file can serve a fleet of mixed nodes. It returns an error, with
// nothing to record, only when the GPUs cannot be read or the in-use
// devices cannot be learnt; the caller retries with backoff.
func (r *Reconciler) Reconcile(ctx context.Context, in Input) (Result, error) {
	log := r.logger()
	var o outcome
	if !r.started {
		r.started = true
		r.resume(&o, in.Previous)
	}
	node, err := partition.ReadNode(r.Lib)
	if err != nil {
		return Result{}, fmt.Errorf("reconcile: read GPUs: %w", err)
	}

	f := in.Config
	var sel configs.Selection
	var reject error
	var rejectReason string
	switch {
	case in.ConfigErr != nil || f == nil:
		reject, rejectReason = in.ConfigErr, ReasonConfigRejected
		if reject == nil {
			reject = errors.New("no profile file")
		}
	default:
		// The file is checked as a whole without this node's GPUs: on a
		// mixed fleet it holds profiles meant for other nodes. Only the
		// profile selected is checked on the GPUs, below.
		if err := f.Validate(node.FleetGeometry(), nil); err != nil {
			reject, rejectReason = err, ReasonConfigRejected
		} else if sel, err = f.Select(in.Labels, in.Now); err != nil {
			reject, rejectReason = err, ReasonConfigRejected
		}
	}
	if reject != nil {
		o.raise(StateFailed)
		o.err = fmt.Errorf("profile file rejected: %w", reject)
		o.event(true, rejectReason, "profile file rejected, GPUs left as they are: %s", oneLine(reject.Error()))
		log.Warn("profile file rejected; GPUs left as they are", "err", reject)
		return r.finish(ctx, &o, in, node, configs.Selection{Source: configs.SourceNone, Rule: -1}, r.appliedSharing(), nil)
	}
	o.wakeAt(f.NextChange(in.Labels, in.Now))
	if sel.Source == configs.SourceNone {
		log.Info("no profile selects this node; GPUs left as they are")
		return r.finish(ctx, &o, in, node, sel, r.appliedSharing(), nil)
	}

	if err := f.ValidateProfile(sel.Profile, node.Geometry(), node.ConfigGPUs()); err != nil {
		return r.unrealisable(ctx, &o, in, node, sel, err)
	}
	assignments, err := f.Resolve(sel.Profile, node.ConfigGPUs())
	if err != nil {
		return r.unrealisable(ctx, &o, in, node, sel, err)
	}
	hash := f.ProfileHash(sel.Profile)
	sharing := timeslice.SharingFrom(assignments)
	targets := partition.Targets(assignments)
	plan, err := partition.PlanNode(node.GPUs, node.Models, targets, nil)
	if err != nil {
		return r.unrealisable(ctx, &o, in, node, sel, err)
	}
	done := &appliedState{profile: sel.Profile, hash: hash, sharing: sharing}
	if plan.NoOp() {
		r.drain = nil
		return r.finish(ctx, &o, in, node, sel, sharing, done)
	}

	inUse, err := r.InUse.InUse(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("reconcile: devices in use: %w", err)
	}
	if plan, err = partition.PlanNode(node.GPUs, node.Models, targets, inUseSet(inUse)); err != nil {
		return r.unrealisable(ctx, &o, in, node, sel, err)
	}

	inMaint, maintNext := f.InMaintenance(in.Now)
	var ready, blocked []partition.GPUPlan
	var waiting []int
	for _, gp := range plan.GPUs {
		switch {
		case gp.NoOp():
		case disruptive(gp) && !inMaint:
			waiting = append(waiting, gp.Index)
		case gp.IsBlocked():
			blocked = append(blocked, gp)
		default:
			ready = append(ready, gp)
		}
	}
	if len(waiting) > 0 {
		o.raise(StatePending)
		o.wakeAt(maintNext)
		when := "no maintenance window is scheduled"
		if !maintNext.IsZero() {
			when = "the next maintenance window starts at " + maintNext.UTC().Format(time.RFC3339)
		}
		o.event(false, ReasonPending, "profile %s: disruptive changes on GPUs %s wait for a maintenance window; %s",
			sel.Profile, intsWord(waiting), when)
	}

	byIndex := make(map[int]partition.GPU, len(node.GPUs))
	for _, g := range node.GPUs {
		byIndex[g.Index] = g
	}

	if len(ready) > 0 {
		if ids := goingAway(ready, byIndex); len(ids) > 0 {
			if err := r.Devices.Withdraw(ctx, ids); err != nil {
				return Result{}, fmt.Errorf("reconcile: withdraw devices before destroying them: %w", err)
			}
			// Pods may have been given the devices between the plan and
			// the withdrawal: ask again, and plan again with the answer.
			if inUse, err = r.InUse.InUse(ctx); err != nil {
				return Result{}, fmt.Errorf("reconcile: devices in use after withdrawing: %w", err)
			}
			busy := inUseSet(inUse)
			var still []partition.GPUPlan
			for _, gp := range ready {
				g := byIndex[gp.Index]
				np, err := partition.PlanGPU(g, node.Models[g.Index], targets[g.Index], busy)
				if err != nil {
					return r.unrealisable(ctx, &o, in, node, sel, err)
				}
				if np.IsBlocked() {
					blocked = append(blocked, np)
					continue
				}
				still = append(still, np)
			}
			ready = still
		}
	}

	if len(blocked) > 0 {
		r.handleBlocked(&o, f, sel, hash, blocked, inUse, in.Now)
	} else {
		r.drain = nil
	}

	var res Result
	if len(ready) > 0 {
		n, d, err := r.apply(ctx, &o, sel, hash, ready)
		res.OpsApplied, res.ApplyDuration = n, d
		if err != nil {
			if partition.RebootRequired(err) {
				o.raise(StateRebootRequired)
				o.wakeAt(in.Now.Add(r.drainRetry()))
				o.event(true, ReasonRebootRequired, "profile %s: a GPU must be reset to change its MIG mode but cannot be now (processes hold it, or the platform needs a reboot): %s", sel.Profile, err)
			} else {
				o.raise(StateFailed)
				o.wakeAt(in.Now.Add(r.retryInterval()))
				o.event(true, ReasonApplyFailed, "profile %s: apply failed after %d ops: %s", sel.Profile, n, err)
			}
			o.err = err
			log.Error("apply failed", "profile", sel.Profile, "opsDone", n, "err", err)
		} else {
			o.event(false, ReasonRepartitioned, "profile %s (%s) applied in %s: %d ops on GPUs %s",
				sel.Profile, sel.Source, d.Round(time.Millisecond), n, intsWord(plansIndices(ready)))
			log.Info("repartitioned", "profile", sel.Profile, "ops", n, "duration", d)
		}
		if node, err = partition.ReadNode(r.Lib); err != nil {
			return Result{}, fmt.Errorf("reconcile: read GPUs after apply: %w", err)
		}
	}

	var finished *appliedState
	if o.state == "" {
		finished = done
	}
	// While draining, the devices the change removes are no longer
	// advertised, so that no new pod lands on them; with policy fail the
	// change is not made and they stay.
	var hide []string
	if len(blocked) > 0 && f.Drain.Policy != configs.DrainFail {
		hide = goingAway(blocked, byIndex)
	}
	// A GPU whose change waits keeps the sharing it had: its replicas
	// change with its partition.
	eff := sharing
	if r.applied != nil && len(blocked)+len(waiting) > 0 {
		eff = maps.Clone(sharing)
		for _, gp := range blocked {
			eff[gp.Index] = r.applied.sharing[gp.Index]
		}
		for _, i := range waiting {
			eff[i] = r.applied.sharing[i]
		}
	}
	out, err := r.finishHiding(ctx, &o, in, node, sel, eff, finished, hide)
	out.OpsApplied, out.ApplyDuration = res.OpsApplied, res.ApplyDuration
	if len(blocked) > 0 && f.Drain.Policy == configs.DrainEvict && out.State == StateDraining {
		out.Evict = holders(inUse, blocked)
	}
	return out, err
}

// resume reports an apply that a previous run of the agent left unfinished.
func (r *Reconciler) resume(o *outcome, prev *Partition) {
	if prev != nil && prev.Profile != "" {
		r.applied = &appliedState{profile: prev.Profile, hash: prev.ProfileHash, sharing: SharingFromRecords(prev.GPUs)}
	}
	if r.Checkpoints == nil {
		return
	}
	intent, err := r.Checkpoints.Load()
	if err != nil {
		r.logger().Warn("checkpoint unreadable; re-planning from the GPUs as they are", "err", err)
		return
	}
	if intent == nil {
		return
	}
	r.intent = true
	o.event(false, ReasonResumingApply, "an apply of profile %s started %s was interrupted after %d ops; re-planning from the GPUs as they are",
		intent.Profile, intent.Started.UTC().Format(time.RFC3339), intent.OpsDone())
	r.logger().Info("resuming an interrupted apply", "profile", intent.Profile, "opsDone", intent.OpsDone())
}

// handleBlocked applies the drain policy to GPUs whose change devices in
// use block.
func (r *Reconciler) handleBlocked(o *outcome, f *configs.File, sel configs.Selection, hash string, blocked []partition.GPUPlan, inUse *plugin.InUse, now time.Time) {
	target := sel.Profile + "/" + hash
	if r.drain == nil || r.drain.target != target {
		r.drain = &drainState{target: target, since: now}
	}
	var busy []string
	for _, gp := range blocked {
		for _, b := range gp.Blocked {
			busy = append(busy, b.UUID)
		}
	}
	slices.Sort(busy)
	busy = slices.Compact(busy)
	what := fmt.Sprintf("profile %s: devices in use block the change of GPUs %s: %s", sel.Profile, intsWord(plansIndices(blocked)), strings.Join(busy, ", "))
	switch {
	case f.Drain.Policy == configs.DrainFail:
		o.raise(StateFailed)
		o.err = fmt.Errorf("%s: %w", what, partition.ErrBlocked)
		o.event(true, ReasonBlocked, "%s; drain policy fail: the change is not made", what)
	case now.Sub(r.drain.since) >= f.Drain.Timeout:
		o.raise(StateFailed)
		o.err = fmt.Errorf("%s: drain timeout %s passed: %w", what, f.Drain.Timeout, partition.ErrBlocked)
		o.event(true, ReasonDrainTimeout, "%s; still in use after the drain timeout of %s, nothing was killed", what, f.Drain.Timeout)
		o.wakeAt(now.Add(r.drainRetry()))
	default:
		o.raise(StateDraining)
		o.wakeAt(now.Add(r.drainRetry()))
		o.wakeAt(r.drain.since.Add(f.Drain.Timeout))
		if f.Drain.Policy == configs.DrainEvict {
			o.event(false, ReasonEvicting, "%s; evicting the pods that hold them", what)
		} else {
			o.event(false, ReasonDraining, "%s; waiting for them to be released (timeout %s)", what, f.Drain.Timeout)
		}
	}
}

// apply runs the plans with checkpoints and returns the ops done and how
// long they took.
func (r *Reconciler) apply(ctx context.Context, o *outcome, sel configs.Selection, hash string, plans []partition.GPUPlan) (int, time.Duration, error) {
	intent := Intent{Profile: sel.Profile, ProfileHash: hash, Started: r.now(), Plan: partition.NodePlan{GPUs: plans}, Done: map[int]int{}}
	save := func() error {
		if r.Checkpoints == nil {
			return nil
		}
		return r.Checkpoints.Save(intent)
	}
	if r.Checkpoints != nil {
		r.intent = true
	}
	if err := save(); err != nil {
		return 0, 0, fmt.Errorf("checkpoint before applying: %w", err)
	}
	n := 0
	app := partition.Applier{Lib: r.Lib, AfterOp: func(gpu, step int, op partition.Op) error {
		n++
		intent.Done[gpu] = step
		if err := save(); err != nil {
			return err
		}
		if r.AfterOp != nil {
			return r.AfterOp(gpu, step, op)
		}
		return nil
	}}
	if r.OnApply != nil {
		r.OnApply(ctx, sel.Profile, plans)
	}
	start := r.now()
	for _, gp := range plans {
		r.logger().Info("applying", "gpu", gp.Index, "uuid", gp.UUID, "ops", len(gp.Ops))
		if err := app.Apply(ctx, gp); err != nil {
			return n, r.now().Sub(start), err
		}
	}
	return n, r.now().Sub(start), nil
}

// clearIntent removes the checkpoint once the node is as wanted.
func (r *Reconciler) clearIntent(o *outcome) {
	if !r.intent || r.Checkpoints == nil {
		return
	}
	if err := r.Checkpoints.Clear(); err != nil {
		o.event(true, ReasonCheckpointFailed, "the node is as wanted, but the apply checkpoint could not be removed: %s", err)
		return
	}
	r.intent = false
}

func (r *Reconciler) unrealisable(ctx context.Context, o *outcome, in Input, node partition.Node, sel configs.Selection, err error) (Result, error) {
	o.raise(StateFailed)
	o.err = fmt.Errorf("profile %s cannot be realised: %w", sel.Profile, err)
	o.event(true, ReasonUnrealisable, "profile %s cannot be realised on this node, GPUs left as they are: %s", sel.Profile, oneLine(err.Error()))
	return r.finish(ctx, o, in, node, sel, r.appliedSharing(), nil)
}

func (r *Reconciler) appliedSharing() map[int]timeslice.Sharing {
	if r.applied == nil {
		return nil
	}
	return r.applied.sharing
}

func (r *Reconciler) finish(ctx context.Context, o *outcome, in Input, node partition.Node, sel configs.Selection, sharing map[int]timeslice.Sharing, done *appliedState) (Result, error) {
	return r.finishHiding(ctx, o, in, node, sel, sharing, done, nil)
}

// finishHiding advertises the GPUs as they are (less the devices in hide,
// which a blocked change will remove) and builds the Result. done, when
// set, is the profile now realised in full.
func (r *Reconciler) finishHiding(ctx context.Context, o *outcome, in Input, node partition.Node, sel configs.Selection, sharing map[int]timeslice.Sharing, done *appliedState, hide []string) (Result, error) {
	res, err := timeslice.Expand(node.GPUs, sharing)
	if err != nil {
		return Result{}, fmt.Errorf("reconcile: resources: %w", err)
	}
	res = without(res, hide)
	if err := r.Devices.Update(ctx, res); err != nil {
		o.raise(StateFailed)
		o.err = errors.Join(o.err, fmt.Errorf("advertise devices: %w", err))
		o.wakeAt(in.Now.Add(r.retryInterval()))
		o.event(true, ReasonAdvertiseFailed, "advertising devices failed: %s", oneLine(err.Error()))
		done = nil
	}
	if done != nil {
		if r.applied == nil || r.applied.hash != done.hash || r.applied.profile != done.profile || !sameSharing(r.applied.sharing, done.sharing) {
			if o.state == "" && !hasReason(o.events, ReasonRepartitioned) && r.applied != nil {
				o.event(false, ReasonSharingChanged, "profile %s (%s) in force; no MIG change needed", done.profile, sel.Source)
			}
		}
		r.applied = done
		r.clearIntent(o)
	}
	if o.state == "" {
		o.state = StateSuccess
	}
	var applied, hash string
	if r.applied != nil {
		applied, hash = r.applied.profile, r.applied.hash
	}
	lastErr := ""
	if o.err != nil {
		lastErr = oneLine(o.err.Error())
	}
	rec := Partition{Profile: applied, ProfileHash: hash, Selected: SelectedFrom(sel), State: o.state, LastError: lastErr, GPUs: GPURecords(node.GPUs, res, sharing)}
	out := Result{
		State:      o.state,
		Selection:  sel,
		Labels:     Labels(LabelInput{Applied: applied, Source: sel.Source, Window: sel.Window, State: o.state, GPUs: node.GPUs, Resources: res}),
		Annotation: Next(in.Previous, rec, in.Now),
		Events:     r.dedupe(o.events),
		Requeue:    o.requeue,
		Resources:  res,
		Err:        o.err,
	}
	if sel.Source == configs.SourceNone {
		delete(out.Labels, LabelSource)
	}
	return out, nil
}

// dedupe drops the events the previous reconcile emitted already.
func (r *Reconciler) dedupe(evs []Event) []Event {
	seen := make(map[string]bool, len(evs))
	var out []Event
	for _, e := range evs {
		k := e.Reason + "\x00" + e.Message
		seen[k] = true
		if !r.lastEvents[k] {
			out = append(out, e)
		}
	}
	r.lastEvents = seen
	return out
}

func hasReason(evs []Event, reason string) bool {
	for _, e := range evs {
		if e.Reason == reason {
			return true
		}
	}
	return false
}

func sameSharing(a, b map[int]timeslice.Sharing) bool {
	return maps.EqualFunc(a, b, func(x, y timeslice.Sharing) bool {
		return x.Replicas == y.Replicas && x.RenameShared == y.RenameShared &&
			x.FailRequestsGreaterThanOne == y.FailRequestsGreaterThanOne && maps.Equal(x.MIGReplicas, y.MIGReplicas)
	})
}

// inUseSet turns the kubelet's answer into the planner's in-use set.
func inUseSet(u *plugin.InUse) map[string]bool {
	if u == nil {
		return nil
	}
	set := make(map[string]bool, len(u.UUIDs))
	for _, id := range u.UUIDs {
		set[id] = true
	}
	return set
}

// disruptive reports whether a GPU's change destroys or resets anything:
// only adding instances into free space is not.
func disruptive(gp partition.GPUPlan) bool {
	ops := gp.Ops
	if gp.IsBlocked() {
		ops = gp.WouldDo
	}
	for _, op := range ops {
		if op.Kind != partition.OpCreateGI && op.Kind != partition.OpCreateCI {
			return true
		}
	}
	return false
}

// goingAway lists the devices the plans remove: destroyed MIG devices, and
// every device of a GPU whose MIG mode changes (by GPU UUID).
func goingAway(plans []partition.GPUPlan, gpus map[int]partition.GPU) []string {
	var ids []string
	for _, gp := range plans {
		ops := gp.Ops
		if gp.IsBlocked() {
			ops = gp.WouldDo
		}
		g := gpus[gp.Index]
		for _, op := range ops {
			switch op.Kind {
			case partition.OpEnableMIG, partition.OpDisableMIG, partition.OpResetGPU:
				ids = append(ids, g.UUID)
			case partition.OpDestroyCI, partition.OpDestroyGI:
				if op.UUID != "" {
					ids = append(ids, op.UUID)
				}
				for _, in := range g.Instances {
					if in.GIID == op.GIID && in.Placement == op.Placement && in.UUID() != "" {
						ids = append(ids, in.UUID())
					}
				}
			}
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// without drops the devices whose ID, UUID or GPU UUID is in ids.
func without(res timeslice.Resources, ids []string) timeslice.Resources {
	if len(ids) == 0 {
		return res
	}
	drop := make(map[string]bool, len(ids))
	for _, id := range ids {
		drop[id] = true
	}
	out := timeslice.Resources{}
	for name, devs := range res {
		var keep []timeslice.Device
		for _, d := range devs {
			if !drop[d.ID] && !drop[d.UUID] && !drop[d.GPUUUID] {
				keep = append(keep, d)
			}
		}
		if len(keep) > 0 {
			out[name] = keep
		}
	}
	return out
}

// holders returns the containers holding devices that block the plans.
func holders(u *plugin.InUse, blocked []partition.GPUPlan) []plugin.Assignment {
	if u == nil {
		return nil
	}
	busy := map[string]bool{}
	for _, gp := range blocked {
		for _, b := range gp.Blocked {
			busy[b.UUID] = true
		}
	}
	var out []plugin.Assignment
	for _, a := range u.Assignments {
		for _, id := range a.UUIDs {
			if busy[id] {
				out = append(out, a)
				break
			}
		}
	}
	return out
}

func plansIndices(plans []partition.GPUPlan) []int {
	out := make([]int, len(plans))
	for i, p := range plans {
		out[i] = p.Index
	}
	return out
}

// intsWord writes GPU indices as "0, 1, 3".
func intsWord(idx []int) string {
	s := slices.Clone(idx)
	sort.Ints(s)
	parts := make([]string, len(s))
	for i, n := range s {
		parts[i] = fmt.Sprint(n)
	}
	return strings.Join(parts, ", ")
}

// oneLine joins a multi-line error message into one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}
