package xidhealth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/xidpolicy"
)

// Defaults of Options.
const (
	// DefaultPoll bounds one wait for XID events; it is also how quickly
	// the watch notices cancellation.
	DefaultPoll = 500 * time.Millisecond
	// DefaultMinBackoff and DefaultMaxBackoff bound the wait before the
	// watch retries after an NVML error.
	DefaultMinBackoff = 500 * time.Millisecond
	DefaultMaxBackoff = 30 * time.Second
)

// Options configures a Tracker.
type Options struct {
	// Disabled turns the watch off; every device stays healthy.
	Disabled bool
	// Policy says which XIDs are ignored, which make a device unhealthy
	// for a quiet period, and which (the critical ones) until its GPU is
	// reset or the node reboots. A zero Policy (nil Ignored) means
	// xidpolicy.Default().
	Policy xidpolicy.Policy
	// StateFile keeps the devices critical XIDs made unhealthy across
	// restarts of the agent (carvev1.XIDHealth); "" keeps none (for tests:
	// a restarted Tracker then forgets them).
	StateFile string
	// BootID returns the node's boot ID; a StateFile of another boot is
	// stale (the reboot reset every GPU). Default: ReadBootID.
	BootID func() (string, error)
	// Poll bounds one EventSet.Wait (default DefaultPoll).
	Poll time.Duration
	// MinBackoff and MaxBackoff bound the exponential backoff after NVML
	// errors (defaults DefaultMinBackoff, DefaultMaxBackoff).
	MinBackoff, MaxBackoff time.Duration
	// Now is the watch's clock: when a critical XID hit a device, and
	// whether its quiet period has passed; default time.Now. Tests move it
	// to cross the quiet period at a moment of their choosing.
	Now func() time.Time
}

// WithDefaults fills in the defaults and checks the options.
func (o Options) WithDefaults() (Options, error) {
	if o.Policy.Ignored == nil {
		o.Policy = xidpolicy.Default()
	}
	if o.BootID == nil {
		o.BootID = ReadBootID
	}
	if o.Poll <= 0 {
		o.Poll = DefaultPoll
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = DefaultMinBackoff
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxBackoff < o.MinBackoff {
		return o, fmt.Errorf("XID health: max backoff %v below min backoff %v", o.MaxBackoff, o.MinBackoff)
	}
	return o, nil
}

// Sick is a device an XID keeps unhealthy now.
type Sick struct {
	// UUID is the GPU or MIG device UUID; GPU is the UUID of its GPU.
	UUID, GPU string
	// XID is the last XID that hit it, At when.
	XID uint64
	At  time.Time
	// Class is xidpolicy.Recoverable or xidpolicy.Critical; a critical XID
	// is never downgraded by a later recoverable one.
	Class xidpolicy.Class
}

// Tracker watches XID events and keeps the devices they hit unhealthy, as
// its policy says. Its methods are safe for concurrent use.
type Tracker struct {
	opts  Options
	lib   partition.NVML
	log   *slog.Logger
	hooks Hooks

	mu     sync.Mutex
	sick   map[string]Sick
	bootID string
}

// Hooks are told what the Tracker sees; either may be nil.
type Hooks struct {
	// Changed is called whenever the set of unhealthy devices changes,
	// without the Tracker's lock held (it may call the Tracker).
	Changed func()
	// XID is called for every XID event, ignored reports whether the
	// policy ignored it.
	XID func(ignored bool)
}

// New returns a Tracker of lib's GPUs, with the devices a critical XID made
// unhealthy before a restart (opts.StateFile) unhealthy again unless the
// node rebooted since. A state file that cannot be read is an error:
// carve cannot tell which devices are unhealthy, and does not guess that
// none are.
func New(lib partition.NVML, opts Options, hooks Hooks, log *slog.Logger) (*Tracker, error) {
	o, err := opts.WithDefaults()
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	t := &Tracker{opts: o, lib: lib, log: log, hooks: hooks, sick: map[string]Sick{}}
	if err := t.load(); err != nil {
		return nil, err
	}
	return t, nil
}

// changed calls the Changed hook; the lock must not be held.
func (t *Tracker) changed() {
	if t.hooks.Changed != nil {
		t.hooks.Changed()
	}
}

// Healthy reports whether neither the device nor its GPU is unhealthy.
func (t *Tracker) Healthy(gpuUUID, uuid string) bool {
	if t == nil {
		return true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	_, gpu := t.sick[gpuUUID]
	_, dev := t.sick[uuid]
	return !gpu && !dev
}

// Unhealthy returns the GPU and MIG device UUIDs an XID keeps unhealthy
// now, with the last such XID.
func (t *Tracker) Unhealthy() map[string]uint64 {
	out := map[string]uint64{}
	for _, s := range t.Sick() {
		out[s.UUID] = s.XID
	}
	return out
}

// Sick returns the devices an XID keeps unhealthy now, in no order.
func (t *Tracker) Sick() []Sick {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Sick, 0, len(t.sick))
	for _, s := range t.sick {
		out = append(out, s)
	}
	return out
}

// Policy returns the XID policy in force (the default one for a nil
// Tracker).
func (t *Tracker) Policy() xidpolicy.Policy {
	if t == nil {
		return xidpolicy.Default()
	}
	return t.opts.Policy
}

// Run watches XID events until ctx ends. NVML errors are logged and the
// watch is set up again after an exponential backoff. With the Disabled
// option, no NVML or a nil Tracker it returns at once.
func (t *Tracker) Run(ctx context.Context) {
	if t == nil || t.opts.Disabled || t.lib == nil {
		return
	}
	backoff := t.opts.MinBackoff
	for ctx.Err() == nil {
		worked, err := t.watch(ctx)
		if ctx.Err() != nil {
			return
		}
		if worked {
			backoff = t.opts.MinBackoff
		}
		if errors.Is(err, partition.ErrReleased) {
			t.log.Info("XID health watch paused: the GPU driver is being replaced", "retryIn", backoff)
		} else {
			t.log.Error("XID health watch failed; retrying", "err", err, "backoff", backoff)
		}
		timer := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		backoff = min(2*backoff, t.opts.MaxBackoff)
	}
}

// watch sets up an event set for every GPU and handles its events until
// ctx ends (nil error) or NVML fails. worked says an event set was set up
// and waited on successfully at least once.
func (t *Tracker) watch(ctx context.Context) (worked bool, err error) {
	n, err := t.lib.DeviceCount()
	if err != nil {
		return false, fmt.Errorf("count GPUs: %w", err)
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	es, err := t.lib.WatchXIDs(idx)
	if err != nil {
		return false, fmt.Errorf("watch XIDs of GPUs %v: %w", idx, err)
	}
	defer func() {
		if cerr := es.Close(); cerr != nil {
			t.log.Warn("close XID event set", "err", cerr)
		}
	}()
	for {
		if ctx.Err() != nil {
			return worked, nil
		}
		wait := t.recover(t.opts.Now())
		ev, err := es.Wait(wait)
		switch {
		case errors.Is(err, partition.ErrTimeout):
			worked = true
		case err != nil:
			return worked, fmt.Errorf("wait for XID events: %w", err)
		default:
			worked = true
			t.handle(ev)
		}
	}
}

// handle classifies an XID by the policy and marks the devices it hit
// unhealthy, unless it is ignored.
func (t *Tracker) handle(ev partition.XIDEvent) {
	class := t.opts.Policy.Classify(ev.XID)
	if t.hooks.XID != nil {
		t.hooks.XID(class == xidpolicy.Ignored)
	}
	if class == xidpolicy.Ignored {
		t.log.Info("ignoring XID (the XID policy ignores it)", "gpu", ev.UUID, "xid", ev.XID, "gi", ev.GIID, "ci", ev.CIID)
		return
	}
	targets := []string{ev.UUID}
	if ev.GIID >= 0 {
		migs, err := t.migUUIDs(ev.UUID, ev.GIID, ev.CIID)
		if err != nil || len(migs) == 0 {
			t.log.Warn("cannot resolve the MIG device of an XID; marking the whole GPU unhealthy",
				"gpu", ev.UUID, "xid", ev.XID, "gi", ev.GIID, "ci", ev.CIID, "err", err)
		} else {
			targets = migs
		}
	}
	t.log.Warn(class.String()+" XID; devices unhealthy", "gpu", ev.UUID, "xid", ev.XID, "gi", ev.GIID, "ci", ev.CIID, "devices", targets)
	now := t.opts.Now()
	t.mu.Lock()
	newCritical := false
	for _, u := range targets {
		old, was := t.sick[u]
		c := class
		if was && old.Class == xidpolicy.Critical {
			c = xidpolicy.Critical // a recoverable XID does not lift a critical one
		}
		newCritical = newCritical || (c == xidpolicy.Critical && (!was || old.Class != xidpolicy.Critical))
		t.sick[u] = Sick{UUID: u, GPU: ev.UUID, XID: ev.XID, At: now, Class: c}
	}
	if newCritical {
		t.saveLocked()
	}
	t.mu.Unlock()
	t.changed()
}

// GPUReset makes every device of the GPU with the given UUID healthy
// again: a GPU reset clears what XIDs, critical ones too, did to it. The
// agent calls it after its own reset of the GPU succeeded.
func (t *Tracker) GPUReset(gpuUUID string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	var healed []string
	critical := false
	for u, s := range t.sick {
		if s.GPU == gpuUUID || u == gpuUUID {
			healed = append(healed, u)
			critical = critical || s.Class == xidpolicy.Critical
			delete(t.sick, u)
		}
	}
	if critical {
		t.saveLocked()
	}
	t.mu.Unlock()
	if len(healed) == 0 {
		return
	}
	t.log.Info("GPU reset; its devices are healthy again", "gpu", gpuUUID, "devices", healed)
	t.changed()
}

// migUUIDs finds the MIG device UUIDs of GPU instance gi (compute instance
// ci, or all of them when ci < 0) on the GPU with the given UUID.
func (t *Tracker) migUUIDs(gpuUUID string, gi, ci int) ([]string, error) {
	n, err := t.lib.DeviceCount()
	if err != nil {
		return nil, fmt.Errorf("count GPUs: %w", err)
	}
	for i := range n {
		d, err := t.lib.Device(i)
		if err != nil {
			return nil, fmt.Errorf("GPU %d: %w", i, err)
		}
		u, err := d.UUID()
		if err != nil {
			return nil, fmt.Errorf("GPU %d UUID: %w", i, err)
		}
		if u != gpuUUID {
			continue
		}
		cis, err := d.ComputeInstances(gi)
		if err != nil {
			return nil, fmt.Errorf("GPU %d compute instances of GI %d: %w", i, gi, err)
		}
		var out []string
		for _, c := range cis {
			if ci < 0 || c.ID == ci {
				out = append(out, c.UUID)
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("no GPU with UUID %s", gpuUUID)
}

// recover turns devices healthy whose last recoverable XID is at least
// the quiet period old, and returns how long the next wait for events may
// be. Devices a critical XID hit stay unhealthy.
func (t *Tracker) recover(now time.Time) time.Duration {
	quiet := t.opts.Policy.Quiet
	wait := t.opts.Poll
	t.mu.Lock()
	healed := false
	for u, s := range t.sick {
		if s.Class != xidpolicy.Recoverable {
			continue
		}
		left := quiet - now.Sub(s.At)
		if left <= 0 {
			delete(t.sick, u)
			healed = true
			t.log.Info("device healthy again after quiet period", "device", u, "lastXID", strconv.FormatUint(s.XID, 10), "quiet", quiet)
			continue
		}
		wait = min(wait, left)
	}
	t.mu.Unlock()
	if healed {
		t.changed()
	}
	return max(wait, time.Millisecond)
}
