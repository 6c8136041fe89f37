package dra

import (
	"fmt"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/timeslice"
)

// CapReplicas is the capacity of a time-sliced device that bounds how many
// allocations share it: its value is the replica count, and an allocation
// takes one replica unless its request asks for more.
const CapReplicas = "replicas"

// Offer is what one node publishes: its devices, and what the driver needs
// to know of them to prepare claims.
type Offer struct {
	// Devices in publishing order: those of the inventory in its order,
	// then those of the dynamic GPUs.
	Devices []resourceapi.Device
	// UUIDs maps the name of each device of the inventory, offered or
	// withheld, to the physical device's UUID.
	UUIDs map[string]string
	// CounterSets are the dynamic GPUs' counter sets, one per GPU.
	CounterSets []resourceapi.CounterSet
	// Dynamic maps the name of each dynamic GPU's device to what it
	// stands for; such a device has no UUID until it is made.
	Dynamic map[string]DynamicDevice
}

// Describe returns the Offer of the GPUs as res advertises them: a device
// of the inventory that res lacks (withheld by the reconciler) is left
// out, and a device res replicates is one device that several allocations
// may share (Share). The dynamic GPUs (matched to gpus by UUID) are not
// described from the inventory: each offers its counter set and a device
// per legal (profile, placement), after the other devices.
func Describe(gpus []partition.GPU, res timeslice.Resources, dynamic ...DynamicGPU) (Offer, error) {
	sets, dyn, stands, err := describeDynamic(dynamic)
	if err != nil {
		return Offer{}, err
	}
	for _, d := range dynamic {
		i := slices.IndexFunc(gpus, func(g partition.GPU) bool { return g.Index == d.Index })
		if i >= 0 && gpus[i].UUID != d.UUID {
			return Offer{}, fmt.Errorf("dynamic GPU %d is %s, but GPU %d of the node is %s", d.Index, d.UUID, d.Index, gpus[i].UUID)
		}
	}
	gpus = slices.DeleteFunc(slices.Clone(gpus), func(g partition.GPU) bool {
		return slices.ContainsFunc(dynamic, func(d DynamicGPU) bool { return d.UUID == g.UUID })
	})
	all, err := Devices(gpus)
	if err != nil {
		return Offer{}, err
	}
	replicas := map[string]int{}
	for _, devs := range res {
		for _, d := range devs {
			replicas[d.UUID] = d.Replicas
		}
	}
	off := Offer{UUIDs: make(map[string]string, len(all))}
	for _, d := range all {
		uuid := *d.Attributes[AttrUUID].StringValue
		off.UUIDs[d.Name] = uuid
		n, ok := replicas[uuid]
		if !ok {
			continue
		}
		if n > 1 {
			Share(&d, n)
		}
		off.Devices = append(off.Devices, d)
	}
	for _, d := range dyn {
		if _, dup := off.UUIDs[d.Name]; dup {
			return Offer{}, fmt.Errorf("two devices named %s", d.Name)
		}
	}
	off.Devices = append(off.Devices, dyn...)
	off.CounterSets, off.Dynamic = sets, stands
	return off, nil
}

// Share makes d a device that up to replicas allocations share, as
// time-slicing does: it allows multiple allocations, and its capacity
// CapReplicas holds the replica count, of which an allocation takes one by
// default. Memory and multiprocessors are not divided by time-slicing: an
// allocation takes none of them unless its request asks.
func Share(d *resourceapi.Device, replicas int) {
	d.AllowMultipleAllocations = new(true)
	for name, c := range d.Capacity {
		c.RequestPolicy = &resourceapi.CapacityRequestPolicy{
			Default:    resource.NewQuantity(0, c.Value.Format),
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: resource.NewQuantity(0, c.Value.Format)},
		}
		d.Capacity[name] = c
	}
	n := resource.NewQuantity(int64(replicas), resource.DecimalSI)
	d.Capacity[CapReplicas] = resourceapi.DeviceCapacity{
		Value: *n,
		RequestPolicy: &resourceapi.CapacityRequestPolicy{
			Default:    resource.NewQuantity(1, resource.DecimalSI),
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: resource.NewQuantity(1, resource.DecimalSI), Max: n, Step: resource.NewQuantity(1, resource.DecimalSI)},
		},
	}
}
