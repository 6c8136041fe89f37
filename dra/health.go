package dra

import (
	"context"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/carve-dev/carve/xidhealth"
)

// TaintXID is the key of the taint a device carries while an XID keeps it
// unhealthy; its value is the last such XID.
const TaintXID = DriverName + "/xid"

// taintLocked returns devs with the XID taint on every device that an XID
// keeps unhealthy (the device itself, or its whole GPU), with the effect
// the XID policy gives its class. A class whose effect is none still
// carries the taint, informational.
func (d *Driver) taintLocked(devs []resourceapi.Device) []resourceapi.Device {
	if d.health == nil {
		return devs
	}
	sick := map[string]xidhealth.Sick{}
	for _, s := range d.health.Sick() {
		sick[s.UUID] = s
	}
	if len(sick) == 0 {
		return devs
	}
	policy := d.health.Policy()
	out := make([]resourceapi.Device, len(devs))
	for i, dev := range devs {
		out[i] = dev
		s, ok := sickOf(dev, sick, d.madeUUIDLocked(dev.Name))
		if !ok {
			continue
		}
		effect, ok := policy.Taint(s.Class)
		if !ok {
			continue
		}
		at := metav1.NewTime(s.At.UTC().Truncate(1e9))
		out[i].Taints = append(append([]resourceapi.DeviceTaint(nil), dev.Taints...), resourceapi.DeviceTaint{
			Key: TaintXID, Value: strconv.FormatUint(s.XID, 10), Effect: resourceapi.DeviceTaintEffect(effect), TimeAdded: &at,
		})
	}
	return out
}

// sickOf finds what keeps a device unhealthy: an XID on the device, on
// its GPU, or on the MIG device made for it (made: a dynamic device's,
// which has no uuid attribute); the latest one when several.
func sickOf(dev resourceapi.Device, sick map[string]xidhealth.Sick, made string) (xidhealth.Sick, bool) {
	uuids := []string{made}
	for _, attr := range []resourceapi.QualifiedName{AttrUUID, AttrParentUUID} {
		if v := dev.Attributes[attr].StringValue; v != nil {
			uuids = append(uuids, *v)
		}
	}
	var found xidhealth.Sick
	ok := false
	for _, u := range uuids {
		if s, hit := sick[u]; u != "" && hit && (!ok || s.At.After(found.At)) {
			found, ok = s, true
		}
	}
	return found, ok
}

// madeUUIDLocked is the MIG UUID of the device made for a claim as the
// dynamic device name, or "".
func (d *Driver) madeUUIDLocked(name string) string {
	return d.claims.rec.Instances[name].UUID
}

// healthChanged republishes the slice with the taints of the devices XIDs
// keep unhealthy now, and sends their health to the kubelet; the XID watch
// calls it on every change.
func (d *Driver) healthChanged() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.offer.UUIDs == nil {
		return
	}
	if err := d.publishLocked(context.Background()); err != nil {
		d.log.Warn("republishing the ResourceSlice with the devices' health failed; the next publish writes it", "err", err)
	}
}

// GPUReset makes every device of the GPU with the given UUID healthy
// again, as after the agent's own reset of the GPU, and lifts their taints.
func (d *Driver) GPUReset(gpuUUID string) { d.health.GPUReset(gpuUUID) }

// Unhealthy returns the GPU and MIG device UUIDs an XID keeps unhealthy
// now, with the last such XID.
func (d *Driver) Unhealthy() map[string]uint64 { return d.health.Unhealthy() }
