package packing

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/carve-dev/carve/dra"
	"github.com/carve-dev/carve/dra/partitionable"
	"github.com/carve-dev/carve/partition"
)

// nodeName is the node every case runs on.
const nodeName = "node-a"

// carveNode returns the offer of a node of n dynamic GPUs of model m,
// every profile offered, and its slices as carve's driver publishes them.
func carveNode(m partition.Model, n int) (dra.Offer, []resourceapi.ResourceSlice, error) {
	var dyn []dra.DynamicGPU
	for i := range n {
		dyn = append(dyn, dra.DynamicGPU{Index: i, UUID: fmt.Sprintf("GPU-%d", i), Model: m})
	}
	off, err := dra.Describe(nil, nil, dyn...)
	if err != nil {
		return dra.Offer{}, nil, fmt.Errorf("%s x%d: %w", m.Key, n, err)
	}
	return off, dra.PoolSlices(nodeName, off.Devices, off.CounterSets), nil
}

// nvidiaName is the name NVIDIA's DRA driver gives the MIG device of a
// profile at a placement of GPU minor in its DynamicMIG mode:
// gpu-<minor>-mig-<profile>-<GI profile ID>-<first memory slice>, the
// profile lower case without dots and with any other character that is
// not a letter, digit or "-" as "-" ("1g.10gb+me" is "1g10gb-me").
func nvidiaName(minor int, p partition.GIProfile, at partition.Placement) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.ReplaceAll(p.Name, ".", "")) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	return fmt.Sprintf("gpu-%d-mig-%s-%d-%d", minor, strings.Trim(b.String(), "-"), p.InfoID, at.Start)
}

// nvidiaSlices lays the offer's devices and counter sets out as NVIDIA's
// DRA driver lays out its DynamicMIG devices for Kubernetes 1.35 and
// later: one slice of every GPU's counter set, then one slice per GPU in
// the GPUs' order, each holding the GPU's devices renamed as nvidiaName
// says and sorted by that name; the slices are named as the resourceslice
// controller of k8s.io/dynamic-resource-allocation names them
// (<index in hex, five digits>-<driver>-<node>-<suffix>), so that they sort
// in publishing order. Driver, pool, attributes and counters stay carve's:
// only the names and the order differ.
func nvidiaSlices(off dra.Offer) ([]resourceapi.ResourceSlice, error) {
	perGPU := map[int][]resourceapi.Device{}
	for _, d := range off.Devices {
		stands, ok := off.Dynamic[d.Name]
		if !ok {
			return nil, fmt.Errorf("device %s: not a dynamic device", d.Name)
		}
		d.Name = nvidiaName(stands.GPUIndex, stands.Profile, stands.At)
		perGPU[stands.GPUIndex] = append(perGPU[stands.GPUIndex], d)
	}
	gpus := slices.Sorted(func(yield func(int) bool) {
		for i := range perGPU {
			if !yield(i) {
				return
			}
		}
	})
	total := int64(len(gpus) + 1)
	slice := func() resourceapi.ResourceSlice {
		return resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{
			Driver: dra.DriverName, NodeName: new(nodeName),
			Pool: resourceapi.ResourcePool{Name: nodeName, Generation: 1, ResourceSliceCount: total},
		}}
	}
	counters := slice()
	counters.Spec.SharedCounters = off.CounterSets
	out := []resourceapi.ResourceSlice{counters}
	for _, g := range gpus {
		s := slice()
		devs := perGPU[g]
		slices.SortFunc(devs, func(a, b resourceapi.Device) int { return cmp.Compare(a.Name, b.Name) })
		s.Spec.Devices = devs
		out = append(out, s)
	}
	for i := range out {
		out[i].Name = fmt.Sprintf("%05x-%s-%s-%s", i, dra.DriverName, nodeName, "x7k2q")
	}
	return out, nil
}

// layout is the partitionable layout of one GPU of model m, every profile
// offered, as carve publishes it.
func layout(m partition.Model) (*partitionable.Layout, error) {
	l, err := partitionable.NewLayout(m, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.Key, err)
	}
	return l, nil
}
