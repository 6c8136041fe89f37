package dra

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/partition"
)

// TaintUnavailable is the taint key of a dynamic device whose MIG device
// the GPU refused to make, and of the devices of a GPU that changes between
// static and dynamic: NoSchedule, so that nothing new is allocated there.
const TaintUnavailable = "gpu.carve.dev/unavailable"

// MIG devices on dynamic GPUs are made when a claim allocated one is
// prepared, and destroyed when it is unprepared, by the applier that runs
// the reconciler's plans, each from a fresh read of the GPU
// (partition.InstancePlan, RemovalPlan). The record of prepared claims
// holds each device from before its first operation to after its last
// (carvev1.ClaimInstance), so that a restarted agent finishes what a crash
// interrupted and never makes a device twice, nor touches an instance it
// did not make for a claim.

// makeInstance makes the MIG device a dynamic device stands for, for the
// claim uid, and returns its MIG UUID. A device the record holds for this
// claim is finished (or found made); one it holds for another claim is an
// error. A device the GPU refuses to make is undone, forgotten and marked
// unavailable (tainted) until a fresh read says it can be made.
func (d *Driver) makeInstance(ctx context.Context, uid, name string, dd DynamicDevice) (string, error) {
	rec, ok := d.claims.rec.Instances[name]
	switch {
	case ok && rec.Claim != uid:
		return "", failed(FailureDeviceHeld, fmt.Errorf("device %s is already made for claim %s", name, rec.Claim))
	case ok && rec.State == carvev1.InstanceMade:
		return rec.UUID, nil
	case !ok:
		rec = carvev1.ClaimInstance{Claim: uid, GPU: dd.GPUUUID, GPUIndex: dd.GPUIndex, Profile: dd.Profile.Name,
			ProfileID: dd.Profile.ID, Placement: carvev1.Placement{Start: dd.At.Start, Size: dd.At.Size}}
		if err := d.placementFree(dd.GPUIndex, dd.GPUUUID, dd.At); err != nil {
			d.markUnavailable(ctx, name, err)
			return "", fmt.Errorf("make %s %s at %s on GPU %d: %w", name, rec.Profile, dd.At, rec.GPUIndex, err)
		}
	}
	rec.State = carvev1.InstanceMaking
	if err := d.saveInstance(name, &rec); err != nil {
		return "", err
	}
	uuid, err := d.runInstancePlan(ctx, rec, partition.InstancePlan)
	if err != nil {
		d.failedToMake(ctx, name, rec, err)
		return "", fmt.Errorf("make %s %s at %s on GPU %d: %w", name, rec.Profile, dd.At, rec.GPUIndex, err)
	}
	rec.State, rec.UUID = carvev1.InstanceMade, uuid
	if err := d.saveInstance(name, &rec); err != nil {
		return "", err
	}
	d.log.Info("made a MIG device for a claim", "device", name, "claim", uid, "uuid", uuid)
	return uuid, nil
}

// removeInstance destroys the MIG device made as name and forgets it.
func (d *Driver) removeInstance(ctx context.Context, name string) error {
	rec, ok := d.claims.rec.Instances[name]
	if !ok {
		return nil
	}
	rec.State = carvev1.InstanceRemoving
	if err := d.saveInstance(name, &rec); err != nil {
		return err
	}
	if _, err := d.runInstancePlan(ctx, rec, partition.RemovalPlan); err != nil {
		return fmt.Errorf("destroy %s %s at %d:%d on GPU %d: %w", name, rec.Profile, rec.Placement.Start, rec.Placement.Size, rec.GPUIndex, err)
	}
	delete(d.claims.rec.Instances, name)
	if err := d.claims.save(); err != nil {
		return err
	}
	d.log.Info("destroyed the MIG device of a claim", "device", name, "claim", rec.Claim, "uuid", rec.UUID)
	return nil
}

// removeInstancesOf destroys every MIG device made for the claim uid.
func (d *Driver) removeInstancesOf(ctx context.Context, uid string) error {
	for _, name := range slices.Sorted(maps.Keys(d.claims.rec.Instances)) {
		if d.claims.rec.Instances[name].Claim != uid {
			continue
		}
		if err := d.removeInstance(ctx, name); err != nil {
			return err
		}
	}
	return nil
}

// failedToMake undoes what a failed make left and marks the device
// unavailable. What cannot be undone stays recorded as being made, for
// the next sweep to finish undoing.
func (d *Driver) failedToMake(ctx context.Context, name string, rec carvev1.ClaimInstance, cause error) {
	if _, err := d.runInstancePlan(ctx, rec, partition.RemovalPlan); err != nil {
		d.log.Error("could not undo a MIG device the GPU refused to make", "device", name, "error", err)
	} else {
		delete(d.claims.rec.Instances, name)
		if err := d.claims.save(); err != nil {
			d.log.Error("forget a MIG device not made", "device", name, "error", err)
		}
	}
	d.markUnavailable(ctx, name, cause)
}

// unavailableHold is how long a device the GPU refused to make stays
// tainted at least, before a fresh read that finds its placement free
// lets the scheduler try it again.
const unavailableHold = time.Minute

// unavailableMark is why and since when a dynamic device is tainted
// not-made.
type unavailableMark struct {
	why   string
	since time.Time
}

// markUnavailable taints the device not-made and publishes at once, so
// that the scheduler stops allocating it.
func (d *Driver) markUnavailable(ctx context.Context, name string, cause error) {
	if d.unavailable == nil {
		d.unavailable = map[string]unavailableMark{}
	}
	d.unavailable[name] = unavailableMark{why: cause.Error(), since: time.Now()}
	if d.offer.UUIDs == nil {
		return
	}
	if err := d.publishLocked(ctx); err != nil {
		d.log.Warn("publish the taint of a device the GPU refused to make", "device", name, "error", err)
	}
}

// placementFree checks, from a fresh read, that the GPU is in MIG mode
// and that nothing sits where a new device at placement at would go: an
// instance there that carve did not make for a claim is never taken over
// nor destroyed.
func (d *Driver) placementFree(index int, uuid string, at partition.Placement) error {
	g, err := d.readGPU(index, uuid)
	if err != nil {
		return err
	}
	if g.MIGMode != partition.MIGEnabled {
		return fmt.Errorf("%w: GPU %d: MIG mode is %s, not enabled", partition.ErrStateChanged, index, g.MIGMode)
	}
	for _, in := range g.Instances {
		if in.Placement.Overlaps(at) {
			return fmt.Errorf("%w: a %s GPU instance at %s, not made for a claim, is in the way", partition.ErrStateChanged, in.Profile, in.Placement)
		}
	}
	return nil
}

// readGPU reads GPU index afresh; it must be the GPU uuid.
func (d *Driver) readGPU(index int, uuid string) (partition.GPU, error) {
	if d.cfg.GPUs == nil {
		return partition.GPU{}, errors.New("no GPUs to make MIG devices on")
	}
	dev, err := d.cfg.GPUs.Device(index)
	if err != nil {
		return partition.GPU{}, err
	}
	g, err := partition.ReadGPU(dev)
	if err != nil {
		return partition.GPU{}, err
	}
	if g.UUID != uuid {
		return partition.GPU{}, fmt.Errorf("%w: GPU %d is %s, not %s", partition.ErrStateChanged, index, g.UUID, uuid)
	}
	return g, nil
}

// saveInstance records rec as name's and writes the record.
func (d *Driver) saveInstance(name string, rec *carvev1.ClaimInstance) error {
	if d.claims.rec.Instances == nil {
		d.claims.rec.Instances = map[string]carvev1.ClaimInstance{}
	}
	d.claims.rec.Instances[name] = *rec
	return d.claims.save()
}

// instancePlanner is partition.InstancePlan or partition.RemovalPlan.
type instancePlanner func(partition.GPU, partition.GIProfile, partition.Placement) (partition.GPUPlan, error)

// runInstancePlan reads rec's GPU, plans with planner and applies the
// plan; it returns the MIG UUID at rec's placement afterwards ("" when
// none is there).
func (d *Driver) runInstancePlan(ctx context.Context, rec carvev1.ClaimInstance, planner instancePlanner) (string, error) {
	g, err := d.readGPU(rec.GPUIndex, rec.GPU)
	if err != nil {
		return "", err
	}
	at := partition.Placement{Start: rec.Placement.Start, Size: rec.Placement.Size}
	profile := partition.GIProfile{ID: rec.ProfileID, Name: rec.Profile}
	plan, err := planner(g, profile, at)
	if err != nil {
		return "", err
	}
	if err := (&partition.Applier{Lib: d.cfg.GPUs, AfterOp: d.cfg.AfterOp}).Apply(ctx, plan); err != nil {
		return "", err
	}
	if g, err = d.readGPU(rec.GPUIndex, rec.GPU); err != nil {
		return "", err
	}
	for _, in := range g.Instances {
		if in.Placement == at {
			return in.UUID(), nil
		}
	}
	return "", nil
}

// ClaimInstances returns the placements of the MIG devices made, or being
// made or removed, for claims, by GPU UUID: the reconciler leaves them out
// of what it plans on a dynamic GPU. Read it after the GPUs: a device's
// record is written before its first operation.
func (d *Driver) ClaimInstances() map[string][]partition.Placement {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string][]partition.Placement{}
	for _, rec := range d.claims.rec.Instances {
		out[rec.GPU] = append(out[rec.GPU], partition.Placement{Start: rec.Placement.Start, Size: rec.Placement.Size})
	}
	return out
}

// sweepInstances destroys the devices made for claims that are neither
// prepared here nor allocated the device by the API server (a prepare a
// crash or an error cut short, whose claim was deleted or deallocated
// since), and finishes removals a crash cut short.
// It gives up quietly when the claims cannot be listed: forgetting a
// device is worse than keeping it a while.
func (d *Driver) sweepInstances(ctx context.Context) {
	if !d.sweepNeeded() {
		d.mu.Lock()
		d.recheckUnavailableLocked()
		d.mu.Unlock()
		return
	}
	claims, err := d.listClaims(ctx)
	if err != nil {
		return
	}
	// allocated: the devices of this pool each existing claim is allocated.
	allocated := map[string]bool{}
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver == DriverName && r.Pool == d.cfg.NodeName {
				allocated[string(c.UID)+"/"+r.Device] = true
			}
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(d.claims.rec.Instances)) {
		rec := d.claims.rec.Instances[name]
		_, prepared := d.claims.rec.Claims[rec.Claim]
		if rec.State != carvev1.InstanceRemoving && (prepared || allocated[rec.Claim+"/"+name]) {
			continue // in use, or a prepare the kubelet will ask again
		}
		if err := d.removeInstance(ctx, name); err != nil {
			d.log.Error("could not destroy a MIG device no claim holds", "device", name, "claim", rec.Claim, "error", err)
		}
	}
	d.recheckUnavailableLocked()
}

// sweepNeeded reports whether some device is recorded for a claim not
// prepared here, or as being removed: only then does the sweep ask the API
// server for the claims (a node at rest asks nothing).
func (d *Driver) sweepNeeded() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, rec := range d.claims.rec.Instances {
		if _, prepared := d.claims.rec.Claims[rec.Claim]; !prepared || rec.State != carvev1.InstanceMade {
			return true
		}
	}
	return false
}

// recheckUnavailableLocked clears the mark of each unavailable device,
// marked at least unavailableHold ago, whose placement a fresh read finds
// free on a GPU in MIG mode.
func (d *Driver) recheckUnavailableLocked() {
	if len(d.unavailable) == 0 || d.cfg.GPUs == nil {
		return
	}
	for name, mark := range d.unavailable {
		dd, ok := d.offer.Dynamic[name]
		if !ok {
			delete(d.unavailable, name)
			continue
		}
		if time.Since(mark.since) >= unavailableHold && d.placementFree(dd.GPUIndex, dd.GPUUUID, dd.At) == nil {
			delete(d.unavailable, name)
		}
	}
}

// taintUnavailableLocked taints the dynamic devices the GPU refused to
// make, and every device of a GPU changing between static and dynamic.
func (d *Driver) taintUnavailableLocked(devs []resourceapi.Device) []resourceapi.Device {
	if len(d.unavailable) == 0 && len(d.changing) == 0 {
		return devs
	}
	now := metav1.NewTime(time.Now().UTC().Truncate(time.Second))
	out := slices.Clone(devs)
	for i, dev := range out {
		var value string
		switch _, refused := d.unavailable[dev.Name]; {
		case refused:
			value = "not-made"
		case d.isChanging(dev):
			value = "changing"
		default:
			continue
		}
		out[i].Taints = append(slices.Clone(dev.Taints), resourceapi.DeviceTaint{
			Key: TaintUnavailable, Value: value, Effect: resourceapi.DeviceTaintEffectNoSchedule, TimeAdded: &now,
		})
	}
	return out
}

// isChanging reports whether the device belongs to a GPU changing mode.
func (d *Driver) isChanging(dev resourceapi.Device) bool {
	for _, attr := range []resourceapi.QualifiedName{AttrUUID, AttrParentUUID} {
		if v := dev.Attributes[attr].StringValue; v != nil && d.changing[*v] {
			return true
		}
	}
	return false
}

// SetChanging marks the GPUs (by UUID) whose mode changes between static
// and dynamic: their devices carry the TaintUnavailable taint (NoSchedule)
// from the next publish until the mark is cleared (nil).
func (d *Driver) SetChanging(uuids []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.changing = map[string]bool{}
	for _, u := range uuids {
		d.changing[u] = true
	}
}
