// Package dra checks the ResourceSlices carve's DRA driver publishes
// against the real Kubernetes code that reads them: the API server's
// validation of a ResourceSlice (handwritten and declarative) and the
// scheduler's allocator library, with Kubernetes 1.37's default features.
package dra

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/operation"
	resourceinternal "k8s.io/kubernetes/pkg/apis/resource"
	resourcev1 "k8s.io/kubernetes/pkg/apis/resource/v1"
	"k8s.io/kubernetes/pkg/apis/resource/validation"

	"github.com/carve-dev/carve/dra"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/test/dra/alloc"
)

const node = "node-a"

// pool describes a node with one static GPU and n dynamic GPUs of model
// m, and lays it out as the driver publishes it.
func pool(t *testing.T, m partition.Model, n int) []resourceapi.ResourceSlice {
	t.Helper()
	gpus := []partition.GPU{{Index: 0, UUID: "GPU-static", Product: m.Product, MemoryMiB: m.MemoryMiB, MIGCapable: true}}
	var dyn []dra.DynamicGPU
	for i := 1; i <= n; i++ {
		dyn = append(dyn, dra.DynamicGPU{Index: i, UUID: fmt.Sprintf("GPU-%d", i), Model: m})
	}
	off, err := dra.Describe(gpus, nil, dyn...)
	if err != nil {
		t.Fatal(err)
	}
	return dra.PoolSlices(node, off.Devices, off.CounterSets)
}

// TestSlicesPassAPIValidation: the slices of nodes with up to 17 dynamic
// GPUs of every model pass the API server's validation of a
// ResourceSlice, handwritten and declarative.
func TestSlicesPassAPIValidation(t *testing.T) {
	for _, m := range partition.Catalogue() {
		for _, n := range []int{1, 8, 17} {
			for _, s := range pool(t, m, n) {
				var internal resourceinternal.ResourceSlice
				if err := resourcev1.Convert_v1_ResourceSlice_To_resource_ResourceSlice(&s, &internal, nil); err != nil {
					t.Fatal(err)
				}
				errs := validation.ValidateResourceSlice(&internal)
				errs = append(errs, resourcev1.Validate_ResourceSlice(context.Background(), operation.Operation{Type: operation.Create, Options: map[string]bool{"DRAPartitionableDevicesType": false}}, nil, &s, nil)...)
				for _, e := range errs {
					t.Errorf("%s x%d: slice %s: %v", m.Key, n, s.Name, e)
				}
			}
		}
	}
}

// TestSlicesFailAPIValidationOverLimits: the validation above refuses a
// slice with one device more than carve puts in one, so passing it means
// something.
func TestSlicesFailAPIValidationOverLimits(t *testing.T) {
	m, _ := partition.LookupModel("H100-80GB")
	ss := pool(t, m, 8)
	s := ss[len(ss)-2] // a full slice of devices
	if len(s.Spec.Devices) != dra.DevicesPerSlice {
		t.Fatalf("slice %s has %d devices, want a full one", s.Name, len(s.Spec.Devices))
	}
	s.Spec.Devices = append(s.Spec.Devices, ss[len(ss)-1].Spec.Devices[0])
	var internal resourceinternal.ResourceSlice
	if err := resourcev1.Convert_v1_ResourceSlice_To_resource_ResourceSlice(&s, &internal, nil); err != nil {
		t.Fatal(err)
	}
	if errs := validation.ValidateResourceSlice(&internal); len(errs) == 0 {
		t.Errorf("a slice of %d devices that consume counters passed", len(s.Spec.Devices))
	}
}

// TestAllocatorPacks: the scheduler's own allocator, reading carve's
// slices, fills one dynamic GPU before the next and places small
// profiles where they leave the large ones room: a 3g.40gb and then a
// 4g.40gb share a GPU, seven 1g.10gb fill GPU 1 from its high end and the
// eighth starts GPU 2, two 1g.10gb leave a 3g.40gb its place at 0, and
// what no GPU can hold is refused, not overcommitted.
func TestAllocatorPacks(t *testing.T) {
	m, _ := partition.LookupModel("H100-80GB")
	for _, c := range []struct {
		name     string
		profiles []string
		want     []string
	}{
		{"3g then 4g", []string{"3g.40gb", "4g.40gb", "7g.80gb", "7g.80gb"},
			[]string{"gpu-1-dyn-3g40gb-4", "gpu-1-dyn-4g40gb-0", "gpu-2-dyn-7g80gb-0", ""}},
		{"1g fill", strings.Split(strings.Repeat("1g.10gb ", 8), " ")[:8],
			[]string{"gpu-1-dyn-1g10gb-6", "gpu-1-dyn-1g10gb-5", "gpu-1-dyn-1g10gb-4", "gpu-1-dyn-1g10gb-3",
				"gpu-1-dyn-1g10gb-2", "gpu-1-dyn-1g10gb-1", "gpu-1-dyn-1g10gb-0", "gpu-2-dyn-1g10gb-6"}},
		{"1g then 3g", []string{"1g.10gb", "1g.10gb", "3g.40gb", "2g.20gb", "1g.10gb+me", "1g.10gb+me"},
			[]string{"gpu-1-dyn-1g10gb-6", "gpu-1-dyn-1g10gb-5", "gpu-1-dyn-3g40gb-0", "gpu-2-dyn-2g20gb-4", "gpu-1-dyn-1g10gb-me-4", "gpu-2-dyn-1g10gb-me-6"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := alloc.New(node, pool(t, m, 2), alloc.MIGClass())
			var got []string
			for _, p := range c.profiles {
				d, err := s.Allocate(context.Background(), p)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, d)
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("allocated (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAllocatorIsIncubating: with the scheduler's default features the
// allocator library picks its "incubating" implementation, the one whose
// order (slices by name, then devices in slice order) carve's slices are
// laid out for.
func TestAllocatorIsIncubating(t *testing.T) {
	m, _ := partition.LookupModel("H100-80GB")
	got, err := alloc.New(node, pool(t, m, 1), alloc.MIGClass()).Implementation(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got != "incubating" {
		t.Errorf("allocator picked: %q, want incubating", got)
	}
	if f := alloc.DefaultFeatures(); !f.PartitionableDevices || !f.DeviceTaints || !f.ConsumableCapacity {
		t.Errorf("default features lack partitionable devices, device taints or consumable capacity: %+v", f)
	}
}
