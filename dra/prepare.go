package dra

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	carvev1 "github.com/carve-dev/carve/api/v1"
)

// PrepareResourceClaims prepares each claim's devices on this node: it
// writes the claim's CDI spec and records the claim before answering, so a
// restarted agent still knows it. A claim already prepared gets the same
// answer again.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]PreparedDevices, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[types.UID]PreparedDevices, len(claims))
	var added []string
	var obs []observation // of the claims prepared by this call, in order
	for _, c := range claims {
		uid := string(c.UID)
		if pc, ok := d.claims.rec.Claims[uid]; ok {
			out[c.UID] = resultOf(pc, d.cfg.NodeName)
			continue
		}
		start := time.Now()
		pc, err := d.prepare(ctx, c)
		obs = append(obs, observation{dynamic: d.allocatedDynamic(c), took: time.Since(start), failure: failureOf(err, FailureMake)})
		if err != nil {
			out[c.UID] = PreparedDevices{Err: fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err)}
			continue
		}
		d.claims.rec.Claims[uid] = pc
		added = append(added, uid)
		out[c.UID] = resultOf(pc, d.cfg.NodeName)
	}
	if err := d.claims.save(); err != nil {
		for _, uid := range added {
			delete(d.claims.rec.Claims, uid)
			_ = d.cdi.Remove(uid)
		}
		for i := range obs {
			if obs[i].failure == "" {
				obs[i].failure = FailureRecord
			}
		}
		d.observePrepared(obs)
		return nil, err
	}
	d.observePrepared(obs)
	return out, nil
}

// prepare finds the claim's devices on this node and writes its CDI spec.
func (d *Driver) prepare(ctx context.Context, c *resourceapi.ResourceClaim) (carvev1.PreparedClaim, error) {
	if c.Status.Allocation == nil {
		return carvev1.PreparedClaim{}, failed(FailureNotAllocated, errors.New("not allocated"))
	}
	uid := string(c.UID)
	pc := carvev1.PreparedClaim{Namespace: c.Namespace, Name: c.Name}
	var uuids []string
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != DriverName || r.Pool != d.cfg.NodeName {
			continue
		}
		dev, err := d.preparedDevice(ctx, uid, r)
		if err != nil {
			return carvev1.PreparedClaim{}, err
		}
		pc.Devices = append(pc.Devices, dev)
		uuids = append(uuids, dev.UUID)
	}
	if len(pc.Devices) == 0 {
		return carvev1.PreparedClaim{}, failed(FailureNotAllocated, fmt.Errorf("no device of driver %s in pool %s is allocated", DriverName, d.cfg.NodeName))
	}
	path, err := d.cdi.Write(uid, uuids)
	if err != nil {
		return carvev1.PreparedClaim{}, failed(FailureCDI, err)
	}
	pc.CDISpec = path
	return pc, nil
}

// preparedDevice checks one allocated device: it must exist on the node,
// and no other prepared claim may hold it unless it is shared. The MIG
// device a dynamic device stands for is made here.
func (d *Driver) preparedDevice(ctx context.Context, uid string, r resourceapi.DeviceRequestAllocationResult) (carvev1.PreparedDevice, error) {
	if dd, dynamic := d.offer.Dynamic[r.Device]; dynamic {
		uuid, err := d.makeInstance(ctx, uid, r.Device, dd)
		if err != nil {
			return carvev1.PreparedDevice{}, failed(FailureMake, err)
		}
		return carvev1.PreparedDevice{Request: r.Request, Device: r.Device, UUID: uuid, CDIDevices: []string{d.cdi.DeviceID(uid)}}, nil
	}
	uuid, ok := d.offer.UUIDs[r.Device]
	if !ok {
		return carvev1.PreparedDevice{}, failed(FailureUnknownDevice, fmt.Errorf("device %s is not on node %s (gone in a repartition, or not yet published since the agent started)", r.Device, d.cfg.NodeName))
	}
	if other := d.claims.holderOf(r.Device, uid); other != "" && !d.shared(r.Device) {
		return carvev1.PreparedDevice{}, failed(FailureDeviceHeld, fmt.Errorf("device %s is already prepared for claim %s", r.Device, other))
	}
	dev := carvev1.PreparedDevice{Request: r.Request, Device: r.Device, UUID: uuid, CDIDevices: []string{d.cdi.DeviceID(uid)}}
	if r.ShareID != nil {
		dev.ShareID = string(*r.ShareID)
	}
	return dev, nil
}

// shared reports whether the device is offered to several allocations.
func (d *Driver) shared(name string) bool {
	i := slices.IndexFunc(d.offer.Devices, func(dev resourceapi.Device) bool { return dev.Name == name })
	return i >= 0 && d.offer.Devices[i].AllowMultipleAllocations != nil && *d.offer.Devices[i].AllowMultipleAllocations
}

// resultOf is the kubelet's answer for a prepared claim.
func resultOf(pc carvev1.PreparedClaim, pool string) PreparedDevices {
	res := PreparedDevices{Devices: []KubeletDevice{}}
	for _, dev := range pc.Devices {
		kd := KubeletDevice{Requests: []string{dev.Request}, PoolName: pool, DeviceName: dev.Device, CDIDeviceIDs: dev.CDIDevices}
		if dev.ShareID != "" {
			kd.ShareID = new(types.UID(dev.ShareID))
		}
		res.Devices = append(res.Devices, kd)
	}
	return res
}

// UnprepareResourceClaims destroys the MIG devices made for each claim,
// removes its CDI spec and forgets it; a claim not prepared here is not an
// error. A claim whose devices cannot be destroyed stays prepared, and its
// error tells the kubelet to ask again.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []ClaimRef) (map[types.UID]error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[types.UID]error, len(claims))
	var obs []observation // of the claims prepared here, in order
	for _, c := range claims {
		uid := string(c.UID)
		_, prepared := d.claims.rec.Claims[uid]
		dynamic := d.hasInstances(uid)
		start := time.Now()
		if err := d.removeInstancesOf(ctx, uid); err != nil {
			out[c.UID] = fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err)
			obs = append(obs, observation{dynamic: true, took: time.Since(start), failure: FailureDestroy})
			continue
		}
		out[c.UID] = d.cdi.Remove(uid)
		delete(d.claims.rec.Claims, uid)
		if prepared || dynamic {
			o := observation{dynamic: dynamic, took: time.Since(start)}
			if out[c.UID] != nil {
				o.failure = FailureCDI
			}
			obs = append(obs, o)
		}
	}
	if err := d.claims.save(); err != nil {
		for i := range obs {
			if obs[i].failure == "" {
				obs[i].failure = FailureRecord
			}
		}
		d.observeUnprepared(obs)
		return nil, err
	}
	d.observeUnprepared(obs)
	return out, nil
}
