package dra

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/carve-dev/carve/dra/partitionable"
	"github.com/carve-dev/carve/partition"
)

// DynamicGPU is a GPU whose MIG devices carve makes on demand: the GPU is
// in MIG mode, holds no instance but those made for claims, and each of its
// legal (profile, placement) pairs is published as a device that consumes
// the GPU's counters (see package partitionable).
type DynamicGPU struct {
	// Index and UUID identify the GPU.
	Index int
	UUID  string
	// Model is the GPU's geometry: its profiles and their placements (read
	// from the device, or the catalogue's). Its Product is the devices'
	// productName.
	Model partition.Model
	// Profiles limits the MIG profiles offered; nil offers every profile
	// of the model.
	Profiles []string
}

// DynamicDevice is what a dynamic device stands for: the GPU instance, with
// one compute instance filling it, that carve makes when a claim allocated
// the device is prepared.
type DynamicDevice struct {
	// GPUIndex and GPUUUID name the GPU.
	GPUIndex int
	GPUUUID  string
	// Profile is the GPU instance profile, At its placement.
	Profile partition.GIProfile
	At      partition.Placement
}

// CounterSetName names the counter set of GPU index: "gpu-0".
func CounterSetName(index int) string { return fmt.Sprintf("gpu-%d", index) }

// dynamicName names the device of a profile at a placement of GPU index:
// gpu-4-dyn-1g10gb-6 (profile as partitionable.ProfileLabel writes it,
// first memory slice). It depends on nothing but these, so it is the same
// on every publish and on every node of a model.
func dynamicName(index int, profile string, at partition.Placement) string {
	return fmt.Sprintf("gpu-%d-dyn-%s-%d", index, partitionable.ProfileLabel(profile), at.Start)
}

// describeDynamic returns the dynamic GPUs' counter sets, their devices in
// publishing order (the GPUs by index, each GPU's devices in its layout's
// order, so that a first-fit allocator fills one GPU before the next), and
// what each device stands for.
func describeDynamic(gpus []DynamicGPU) ([]resourceapi.CounterSet, []resourceapi.Device, map[string]DynamicDevice, error) {
	gpus = slices.Clone(gpus)
	slices.SortFunc(gpus, func(a, b DynamicGPU) int { return cmp.Compare(a.Index, b.Index) })
	var sets []resourceapi.CounterSet
	var devs []resourceapi.Device
	stands := map[string]DynamicDevice{}
	layouts := map[string]*partitionable.Layout{} // the GPUs of a node are mostly alike
	for i, g := range gpus {
		if g.UUID == "" {
			return nil, nil, nil, fmt.Errorf("dynamic GPU %d: no UUID", g.Index)
		}
		if i > 0 && gpus[i-1].Index == g.Index {
			return nil, nil, nil, fmt.Errorf("dynamic GPU %d listed twice", g.Index)
		}
		key := fmt.Sprintf("%s %d %d %v %t %q", g.Model.Key, g.Model.MemorySlices, g.Model.ComputeSlices, g.Model.Profiles, g.Profiles == nil, g.Profiles)
		l, ok := layouts[key]
		if !ok {
			var err error
			if l, err = partitionable.NewLayout(g.Model, g.Profiles); err != nil {
				return nil, nil, nil, fmt.Errorf("dynamic GPU %d: %w", g.Index, err)
			}
			layouts[key] = l
		}
		set := CounterSetName(g.Index)
		sets = append(sets, l.CounterSet(set))
		for _, pl := range l.Placements {
			d, err := dynamicDevice(g, set, pl)
			if err != nil {
				return nil, nil, nil, err
			}
			devs = append(devs, d)
			stands[d.Name] = DynamicDevice{GPUIndex: g.Index, GPUUUID: g.UUID, Profile: pl.Profile, At: pl.At}
		}
	}
	return sets, devs, stands, nil
}

// dynamicDevice describes one (profile, placement) of a dynamic GPU with
// the attributes a MIG device of a static GPU has, but no uuid: its MIG
// device does not exist until a claim is prepared.
func dynamicDevice(g DynamicGPU, set string, pl partitionable.Placement) (resourceapi.Device, error) {
	name := dynamicName(g.Index, pl.Profile.Name, pl.At)
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return resourceapi.Device{}, fmt.Errorf("dynamic GPU %d: %s at %s: no device name: %q %s", g.Index, pl.Profile.Name, pl.At, name, strings.Join(errs, "; "))
	}
	d := resourceapi.Device{
		Name: name,
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			AttrType:         {StringValue: new(TypeMIG)},
			AttrIndex:        {IntValue: new(int64(g.Index))},
			AttrProductName:  {StringValue: new(g.Model.Product)},
			AttrProfile:      {StringValue: new(pl.Profile.Name)},
			AttrParentUUID:   {StringValue: new(g.UUID)},
			AttrMIGPlacement: {StringValue: new(pl.At.String())},
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			CapMemory: {Value: *resource.NewQuantity(int64(pl.Profile.MemoryMiB)*mib, resource.BinarySI)},
		},
		ConsumesCounters: []resourceapi.DeviceCounterConsumption{pl.Consumption(set)},
	}
	if n := pl.Profile.Multiprocessors; n > 0 {
		d.Capacity[CapMultiprocessors] = resourceapi.DeviceCapacity{Value: *resource.NewQuantity(int64(n), resource.DecimalSI)}
	}
	return d, nil
}

// SetDynamic makes gpus the node's dynamic GPUs from the next Advertise
// (or Update) on: their inventory is no longer described, their counter
// sets and devices are. Nil makes every GPU static again.
func (d *Driver) SetDynamic(gpus []DynamicGPU) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dynamic = slices.Clone(gpus)
}

// Dynamic returns the dynamic GPUs SetDynamic last set.
func (d *Driver) Dynamic() []DynamicGPU {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.dynamic)
}
