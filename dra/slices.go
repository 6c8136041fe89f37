package dra

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// DevicesPerSlice is the most devices PoolSlices puts in one slice: the
// API's limit for a slice whose devices consume counters or carry taints
// (resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures), which carve's
// devices may do at any time.
const DevicesPerSlice = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures

// PoolSlices lays a node's pool out in ResourceSlices, as the API requires
// and as the scheduler reads them, generation 1 (Publisher sets the
// generation):
//
//   - the counter sets in slices that hold nothing else, at most
//     resourceapi.ResourceSliceMaxCounterSets each, named
//     <node>-gpu.carve.dev-counters-00, -01, ...;
//   - the devices, in the order given, DevicesPerSlice per slice, named
//     <node>-gpu.carve.dev-devices-00, -01, ...; a pool without devices
//     still has one, empty, so that the pool is published.
//
// The numbers have as many digits as the largest needs (at least two), so
// that the names sort in the slices' order. The scheduler's allocator
// (the "incubating" one of Kubernetes 1.37) sorts a pool's slices by name
// and takes the first device that fits in slice order, so the device order
// given is the order claims are served in: Describe puts the devices made
// already first, then the dynamic GPUs one after the other, each in its
// packing order.
func PoolSlices(node string, devices []resourceapi.Device, counters []resourceapi.CounterSet) []resourceapi.ResourceSlice {
	nCounters := (len(counters) + resourceapi.ResourceSliceMaxCounterSets - 1) / resourceapi.ResourceSliceMaxCounterSets
	nDevices := max(1, (len(devices)+DevicesPerSlice-1)/DevicesPerSlice)
	total := int64(nCounters + nDevices)
	slice := func(name string) resourceapi.ResourceSlice {
		return resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: sliceName(node, name)},
			Spec: resourceapi.ResourceSliceSpec{
				Driver:   DriverName,
				Pool:     resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: total},
				NodeName: new(node),
			},
		}
	}
	var out []resourceapi.ResourceSlice
	for i := range nCounters {
		s := slice("counters-" + number(i, nCounters))
		from := i * resourceapi.ResourceSliceMaxCounterSets
		s.Spec.SharedCounters = counters[from:min(len(counters), from+resourceapi.ResourceSliceMaxCounterSets)]
		out = append(out, s)
	}
	for i := range nDevices {
		s := slice("devices-" + number(i, nDevices))
		from := i * DevicesPerSlice
		if from < len(devices) {
			s.Spec.Devices = devices[from:min(len(devices), from+DevicesPerSlice)]
		}
		out = append(out, s)
	}
	return out
}

// number writes i with the digits n-1 needs, at least two.
func number(i, n int) string {
	width := max(2, len(strconv.Itoa(n-1)))
	return fmt.Sprintf("%0*d", width, i)
}

// sliceName is <node>-gpu.carve.dev-<suffix>; where that is longer than
// an object name may be, the node's name is cut and a hash of it keeps
// the name unique.
func sliceName(node, suffix string) string {
	name := node + "-" + DriverName + "-" + suffix
	if len(name) <= validation.DNS1123SubdomainMaxLength {
		return name
	}
	sum := sha256.Sum256([]byte(node))
	tail := "-" + hex.EncodeToString(sum[:])[:10] + "-" + DriverName + "-" + suffix
	return strings.TrimRight(node[:validation.DNS1123SubdomainMaxLength-len(tail)], ".-") + tail
}

// countersKept reports whether the server kept the counter sets and every
// device's consumption of them.
func countersKept(sent []resourceapi.Device, counters []resourceapi.CounterSet, got []resourceapi.ResourceSlice) bool {
	sets := 0
	consumes := map[string]bool{}
	for _, s := range got {
		sets += len(s.Spec.SharedCounters)
		for _, d := range s.Spec.Devices {
			consumes[d.Name] = len(d.ConsumesCounters) > 0
		}
	}
	if sets != len(counters) {
		return false
	}
	for _, d := range sent {
		if len(d.ConsumesCounters) > 0 && !consumes[d.Name] {
			return false
		}
	}
	return true
}

// unpartitioned returns the devices that consume no counters.
func unpartitioned(devices []resourceapi.Device) []resourceapi.Device {
	var out []resourceapi.Device
	for _, d := range devices {
		if len(d.ConsumesCounters) == 0 {
			out = append(out, d)
		}
	}
	return out
}
