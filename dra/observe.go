package dra

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/dra/partitionable"
	"github.com/carve-dev/carve/partition"
)

// Metrics is told how the driver's prepares and unprepares go
// (Config.Metrics), so that the agent can count them without the driver
// depending on a metrics library. Its methods are called with the driver's
// lock held: they must be quick and must not call the driver.
type Metrics interface {
	// ClaimPrepared is called for each claim a NodePrepareResources call
	// prepares, or fails to: dynamic says whether the claim is allocated a
	// dynamic device of the node, took is how long its prepare took,
	// failure is "" when it succeeded, else one of PrepareFailures. A
	// claim already prepared, answered again, is not counted.
	ClaimPrepared(dynamic bool, took time.Duration, failure string)
	// ClaimUnprepared is called for each claim prepared on the node that a
	// NodeUnprepareResources call unprepares, or fails to: dynamic says
	// whether MIG devices were made for it, failure is "" or one of
	// UnprepareFailures. A claim not prepared here is not counted.
	ClaimUnprepared(dynamic bool, took time.Duration, failure string)
}

// Why a claim could not be prepared or unprepared (Metrics).
const (
	// FailureNotAllocated: the claim is not allocated a device of the
	// node's pool.
	FailureNotAllocated = "not-allocated"
	// FailureUnknownDevice: a device allocated to the claim is not on the
	// node (gone in a repartition, or not yet published).
	FailureUnknownDevice = "unknown-device"
	// FailureDeviceHeld: a device allocated to the claim is prepared, or
	// made, for another claim.
	FailureDeviceHeld = "device-held"
	// FailureMake: the MIG device a dynamic device stands for could not be
	// made (the GPU refused, or its record could not be written).
	FailureMake = "make"
	// FailureDestroy: a MIG device made for the claim could not be
	// destroyed.
	FailureDestroy = "destroy"
	// FailureCDI: the claim's CDI spec could not be written or removed.
	FailureCDI = "cdi"
	// FailureRecord: the record of prepared claims could not be written.
	FailureRecord = "record"
)

// PrepareFailures returns every failure a prepare is counted with.
func PrepareFailures() []string {
	return []string{FailureNotAllocated, FailureUnknownDevice, FailureDeviceHeld, FailureMake, FailureCDI, FailureRecord}
}

// UnprepareFailures returns every failure an unprepare is counted with.
func UnprepareFailures() []string {
	return []string{FailureDestroy, FailureCDI, FailureRecord}
}

// failure is an error with the reason it is counted under.
type failure struct {
	reason string
	err    error
}

func (f *failure) Error() string { return f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

// failed tags err with reason, unless it already has one; nil stays nil.
func failed(reason string, err error) error {
	if _, tagged := errors.AsType[*failure](err); err == nil || tagged {
		return err
	}
	return &failure{reason: reason, err: err}
}

// failureOf returns the reason err was tagged with; "" for nil, and
// fallback for an error without one.
func failureOf(err error, fallback string) string {
	if err == nil {
		return ""
	}
	if f, ok := errors.AsType[*failure](err); ok {
		return f.reason
	}
	return fallback
}

// observation is one claim's prepare or unprepare, for Metrics.
type observation struct {
	dynamic bool
	took    time.Duration
	failure string
}

// observePrepared tells Metrics about the prepares in obs.
func (d *Driver) observePrepared(obs []observation) {
	if d.cfg.Metrics == nil {
		return
	}
	for _, o := range obs {
		d.cfg.Metrics.ClaimPrepared(o.dynamic, o.took, o.failure)
	}
}

// observeUnprepared tells Metrics about the unprepares in obs.
func (d *Driver) observeUnprepared(obs []observation) {
	if d.cfg.Metrics == nil {
		return
	}
	for _, o := range obs {
		d.cfg.Metrics.ClaimUnprepared(o.dynamic, o.took, o.failure)
	}
}

// allocatedDynamic reports whether c is allocated a dynamic device of the
// node's pool.
func (d *Driver) allocatedDynamic(c *resourceapi.ResourceClaim) bool {
	if c.Status.Allocation == nil {
		return false
	}
	for _, r := range c.Status.Allocation.Devices.Results {
		if _, dynamic := d.offer.Dynamic[r.Device]; dynamic && r.Driver == DriverName && r.Pool == d.cfg.NodeName {
			return true
		}
	}
	return false
}

// hasInstances reports whether MIG devices are recorded as made for the
// claim uid.
func (d *Driver) hasInstances(uid string) bool {
	for _, rec := range d.claims.rec.Instances {
		if rec.Claim == uid {
			return true
		}
	}
	return false
}

// MadeInstance is a MIG device made, or being made or removed, for a
// claim on a dynamic GPU.
type MadeInstance struct {
	// Device is the dynamic device's name in the node's pool.
	Device string
	// Instance is the driver's record of it: claim UID, GPU, profile,
	// placement, state, MIG UUID.
	Instance carvev1.ClaimInstance
	// Namespace and Name are the claim's, "" while its prepare has not
	// finished (or after the claim went: the next sweep destroys the
	// device).
	Namespace, Name string
}

// MadeInstances returns the MIG devices made for claims, by GPU index and
// placement.
func (d *Driver) MadeInstances() []MadeInstance {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]MadeInstance, 0, len(d.claims.rec.Instances))
	for _, name := range slices.Sorted(maps.Keys(d.claims.rec.Instances)) {
		rec := d.claims.rec.Instances[name]
		mi := MadeInstance{Device: name, Instance: rec}
		if pc, ok := d.claims.rec.Claims[rec.Claim]; ok {
			mi.Namespace, mi.Name = pc.Namespace, pc.Name
		}
		out = append(out, mi)
	}
	slices.SortStableFunc(out, func(a, b MadeInstance) int {
		return cmp.Or(cmp.Compare(a.Instance.GPUIndex, b.Instance.GPUIndex), cmp.Compare(a.Instance.Placement.Start, b.Instance.Placement.Start))
	})
	return out
}

// Placeable is, for a dynamic GPU, the largest offered profile that can
// still be placed beside the MIG devices made there for claims: the one
// with the most memory slices, then the most compute slices.
type Placeable struct {
	// GPUIndex and GPUUUID name the GPU.
	GPUIndex int
	GPUUUID  string
	// Profile is that profile, "" when none can be placed; MemorySlices
	// is its memory slices (0 when none).
	Profile      string
	MemorySlices int
}

// LargestPlaceable returns, for each GPU offered as dynamic, the largest
// offered profile still placeable, by GPU index.
func (d *Driver) LargestPlaceable() ([]Placeable, error) {
	d.mu.Lock()
	gpus := slices.Clone(d.dynamic)
	made := map[string][]carvev1.ClaimInstance{}
	for _, rec := range d.claims.rec.Instances {
		made[rec.GPU] = append(made[rec.GPU], rec)
	}
	d.mu.Unlock()
	slices.SortFunc(gpus, func(a, b DynamicGPU) int { return cmp.Compare(a.Index, b.Index) })
	out := make([]Placeable, 0, len(gpus))
	for _, g := range gpus {
		l, err := d.layouts.of(g)
		if err != nil {
			return nil, fmt.Errorf("dynamic GPU %d: %w", g.Index, err)
		}
		p := Placeable{GPUIndex: g.Index, GPUUUID: g.UUID}
		if best, ok := largestPlaceable(l, made[g.UUID]); ok {
			p.Profile, p.MemorySlices = best.Name, best.MemorySlices
		}
		out = append(out, p)
	}
	return out, nil
}

// largestPlaceable returns the largest profile of l with a placement the
// counters allow beside the instances made. A made instance l does not
// offer (its profile no longer offered) blocks the placements it overlaps.
func largestPlaceable(l *partitionable.Layout, made []carvev1.ClaimInstance) (partition.GIProfile, bool) {
	var taken []int
	var foreign []partition.Placement
	for _, rec := range made {
		at := partition.Placement{Start: rec.Placement.Start, Size: rec.Placement.Size}
		i := slices.IndexFunc(l.Placements, func(pl partitionable.Placement) bool { return pl.Profile.ID == rec.ProfileID && pl.At == at })
		if i < 0 {
			foreign = append(foreign, at)
			continue
		}
		taken = append(taken, i)
	}
	var best partition.GIProfile
	found := false
	for j, pl := range l.Placements {
		if found && !larger(pl.Profile, best) {
			continue
		}
		if slices.ContainsFunc(foreign, pl.At.Overlaps) || !l.Allows(append(slices.Clone(taken), j)) {
			continue
		}
		best, found = pl.Profile, true
	}
	return best, found
}

// larger reports whether a is larger than b: more memory slices, then
// more compute slices.
func larger(a, b partition.GIProfile) bool {
	if a.MemorySlices != b.MemorySlices {
		return a.MemorySlices > b.MemorySlices
	}
	return a.ComputeSlices > b.ComputeSlices
}

// layoutCache keeps the layouts of the dynamic GPUs' models: building one
// takes milliseconds, and a scrape asks for them all.
type layoutCache struct {
	mu sync.Mutex
	m  map[string]*partitionable.Layout
}

// of returns g's layout.
func (c *layoutCache) of(g DynamicGPU) (*partitionable.Layout, error) {
	key := fmt.Sprintf("%s %d %d %v %t %q", g.Model.Key, g.Model.MemorySlices, g.Model.ComputeSlices, g.Model.Profiles, g.Profiles == nil, g.Profiles)
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.m[key]; ok {
		return l, nil
	}
	l, err := partitionable.NewLayout(g.Model, g.Profiles)
	if err != nil {
		return nil, err
	}
	if c.m == nil {
		c.m = map[string]*partitionable.Layout{}
	}
	c.m[key] = l
	return l, nil
}
