package agent

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/dra"
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

// GPUResetter is told when the agent's own reset of a GPU succeeded: an
// Advertiser that tracks device health (carve's device plugin) makes the
// GPU's devices healthy again, since a reset clears what XIDs did.
type GPUResetter interface {
	GPUReset(gpuUUID string)
}

var (
	_ InUseSource = (*plugin.PodResourcesClient)(nil)
	_ Advertiser  = (*plugin.Manager)(nil)
	_ GPUResetter = (*plugin.Manager)(nil)
	_ GPUResetter = (*dra.Driver)(nil)
)

// Defaults of the Reconciler.
const (
	// DefaultDrainRetry is how often a reconcile blocked by devices in use
	// (or by a GPU reset that processes prevent) is retried.
	DefaultDrainRetry = 10 * time.Second
	// DefaultRetryInterval is when a reconcile that failed is retried.
	DefaultRetryInterval = 30 * time.Second
)

// Event is a Kubernetes Event the caller should emit on the Node.
type Event struct {
	// Warning selects type Warning; else Normal.
	Warning bool
	// Reason is one of carvev1's Reason constants.
	Reason string
	// Message says what happened.
	Message string
	// OnConfigMap emits the Event on the profile ConfigMap instead of the
	// Node: it concerns every node that reads the file.
	OnConfigMap bool
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
	// Previous is the node record the node carries, nil when none (or
	// unreadable).
	Previous *carvev1.NodeRecord
	// Revision names the profile file's content (rollout.Revision): the
	// failure budget of a rollout is per revision.
	Revision string
}

// Result is what one reconcile did and what the caller should record.
type Result struct {
	// State is one of carvev1's State constants.
	State string
	// Selection is the profile in force and why (Source configs.SourceNone
	// when the file was rejected or no profile selects the node).
	Selection configs.Selection
	// Labels are the node labels carve writes, all of them (see
	// MetadataPatch); Annotation.Labels lists their keys.
	Labels map[string]string
	// Annotation is the node record to write.
	Annotation carvev1.NodeRecord
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
	// Rollout is this node's part in the rollout after the pass.
	Rollout RolloutStatus
	// DrainDeadline is when the drain of the change that devices in use
	// block times out, or timed out (drain policy wait or evict; the
	// change is made once they are free); zero when no change is blocked.
	DrainDeadline time.Time
	// ReleaseSlot: the change is over; the caller gives the rollout slot
	// back (Reconciler.ReleaseSlot) once it has written Annotation, which
	// no longer says mid-change.
	ReleaseSlot bool
}

// RolloutStatus is a node's part in the rollout, as the pass left it.
type RolloutStatus struct {
	// Holding: the node holds a rollout slot it keeps after the pass (one
	// about to be released, ReleaseSlot, is not counted).
	Holding bool
	// Waiting: disruptive changes wait for a slot (none free, the rollout
	// halted, or the Leases unreadable).
	Waiting bool
	// Halted: the failure budget of the file's revision is spent, as this
	// node last learnt it (asking for a slot, or reporting its change).
	Halted bool
	// Stuck are the slots this node found stuck when it asked for one in
	// this pass: expired while their holders still record a change in
	// progress.
	Stuck []StuckSlot
}

// StuckSlot is a rollout slot whose holder stopped renewing it while
// mid-change.
type StuckSlot struct {
	// Slot is the slot's Lease, Holder the node that holds it.
	Slot, Holder string
	// For is how long ago it expired.
	For time.Duration
}

// Hooks are called by the Reconciler at points of an apply; they are given
// when it is built. Each may be nil.
type Hooks struct {
	// BeforeApply is called before the ops of a reconcile run, with the
	// profile and the plans about to run, so that the caller can record
	// the state applying while they do.
	BeforeApply func(ctx context.Context, profile string, plans []partition.GPUPlan)
	// AfterOp runs after each op is done and checkpointed; an error stops
	// the apply as a crash would (a fault-injection hook for tests).
	AfterOp func(gpu, step int, op partition.Op) error
	// RecordChange writes the node record rec, which says that the node
	// is mid-change (NodeRecord.Change), before the first disruptive step
	// of a change; the change does not start unless it returns nil. Nil
	// records nothing.
	RecordChange func(ctx context.Context, rec carvev1.NodeRecord) error
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
	// Advertise is how Devices reaches the kubelet (Config.Advertise; ""
	// is AdvertiseDevicePlugin). A profile with dynamic GPUs is realised
	// only under AdvertiseDRA; under another mode it is unrealisable and
	// no GPU is touched.
	Advertise string
	// Checkpoints keeps the intent of an apply; nil keeps none.
	Checkpoints *Checkpoints
	// Logger logs; default slog.Default().
	Logger *slog.Logger
	// DrainRetry and RetryInterval default to DefaultDrainRetry and
	// DefaultRetryInterval.
	DrainRetry, RetryInterval time.Duration
	// Clock times applies for Events and metrics; default time.Now.
	Clock func() time.Time
	// Hooks are called during applies.
	Hooks Hooks
	// Labels choose the optional node label keys.
	Labels LabelOptions
	// Operands pauses GPU Operator operands for disruptive changes; nil
	// pauses none.
	Operands Operands
	// OperandNames are the operands Operands pauses, where the node has
	// their deploy labels ("dcgm-exporter", ...).
	OperandNames []string
	// Rollout bounds how many nodes are in a disruptive change at once;
	// nil bounds nothing.
	Rollout Rollout
	// SlotRetry is how often a change waiting for a rollout slot asks
	// again; default DefaultSlotRetry.
	SlotRetry time.Duration
	// AgentVersion is the agent's version, recorded as the node record's
	// AgentVersion.
	AgentVersion string
	// ConfigMap is the profile ConfigMap, "namespace/name", recorded as
	// the node record's ConfigMap (what the rollout counts nodes by).
	ConfigMap string
	// Hold reports whether the node is held now (carve.dev/hold=true, as
	// the Node's labels say at this instant). It is asked at each
	// operation boundary of a change, so that a hold set while a change is
	// under way stops it there; nil leaves the hold to the labels each pass
	// starts from.
	Hold func() bool
	// Driver lets go of the GPU driver while it is replaced
	// (nvidia.com/gpu-driver-upgrade-state) and takes it back after; nil
	// never lets go.
	Driver DriverGate

	started bool
	// intent is true while a checkpoint may be on disk: one found at start
	// or written by an apply, removed once the node is as wanted.
	intent bool
	// applying is the record's account of that checkpoint, nil when there
	// is none.
	applying *carvev1.ApplyRecord
	applied  *appliedState
	// startup holds back GPUs that lost their partition until the
	// profile in force is realised on them (startup.go).
	startup startupState
	// paused are the operand labels this agent paused (or found paused in
	// the checkpoint of an interrupted apply) with the values to restore.
	paused     map[string]string
	drain      *drainState
	lastEvents map[string]bool
	// halted is what the rollout last told of the budget of a revision.
	halted haltedRevision
	// change is the disruptive change in progress, as the node's record
	// says (written by beginChange, or found at start), nil when none is.
	change *carvev1.ChangeRecord
	// inFlight names the NVML op running now, nil when none is
	// (InFlight); read by the shutdown from another goroutine.
	inFlight atomic.Pointer[string]
	// held: the last pass found the node held, so that the next one that
	// does not reports the hold lifted.
	held bool
	// driverRetry is the wait before the next try to open a driver that
	// is not back yet; driverBack is the Event of a driver opened again,
	// for the pass that follows.
	driverRetry time.Duration
	driverBack  *Event
}

// haltedRevision records whether the failure budget of a revision of the
// profile file was spent, as the rollout last said.
type haltedRevision struct {
	revision string
	halted   bool
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

// Reconcile does one reconcile pass, step by step: read the hold, select
// the profile in force (a held node stops there, recording what it would
// change, with its devices advertised as they are), plan it with the devices in use, order the GPUs' changes (a
// disruptive one waits for a maintenance window), make sure the state
// directory can take checkpoints, take a rollout slot for
// the disruptive ones (they wait without one), record that the node is
// mid-change before its first disruptive step, withdraw the devices that
// will go and plan again, apply the drain policy to changes that devices in
// use block, apply the rest with checkpoints, and advertise and record the
// result.
//
// A rejected file, an unknown profile or an unrealisable one never touches
// the GPUs. The file is rejected only when it is broken for every node
// (schema, or geometry that fits no known GPU model); a selected profile
// that does not fit this node's GPUs is unrealisable here (state failed,
// Event ProfileUnrealisable), and profiles not selected do not matter, so
// that one file can serve a fleet of mixed nodes. It returns an error, with
// nothing to record, only when the GPUs cannot be read, the in-use devices
// cannot be learnt or devices cannot be withdrawn; the caller retries with
// backoff.
func (r *Reconciler) Reconcile(ctx context.Context, in Input) (Result, error) {
	if res, done := r.driverAway(ctx, in); done {
		return res, nil
	}
	p, err := r.begin(ctx, in)
	if err != nil {
		return Result{}, err
	}
	for _, step := range []func() (more bool, err error){
		p.checkHold, p.selectProfile, p.observeHeld, p.plan, p.order, p.checkStateDir, p.takeSlot, p.beginChange, p.withdrawAndReplan, p.drain, p.apply,
	} {
		more, err := step()
		if err != nil {
			return Result{}, err
		}
		if !more {
			break
		}
	}
	return p.advertiseAndRecord()
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

// isAction reports whether the event tells of something the pass did,
// rather than of a state the node is in.
func isAction(e Event) bool {
	return !e.Warning && (e.Reason == carvev1.ReasonOperandsPaused || e.Reason == carvev1.ReasonOperandsRestored)
}

func (r *Reconciler) appliedSharing() map[int]timeslice.Sharing {
	if r.applied == nil {
		return nil
	}
	return r.applied.sharing
}

// dedupe drops the events the previous reconcile emitted already: a state
// that lasts (pending, draining, blocked) is told once, not every pass.
// Events of something done in this pass (operands paused or put back) are
// kept even when the previous pass did the same: two restores are two.
func (r *Reconciler) dedupe(evs []Event) []Event {
	seen := make(map[string]bool, len(evs))
	var out []Event
	for _, e := range evs {
		k := e.Reason + "\x00" + e.Message
		seen[k] = true
		if !r.lastEvents[k] || isAction(e) {
			out = append(out, e)
		}
	}
	r.lastEvents = seen
	return out
}
