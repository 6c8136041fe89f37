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
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/operation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	resourceinternal "k8s.io/kubernetes/pkg/apis/resource"
	resourcev1 "k8s.io/kubernetes/pkg/apis/resource/v1"
	"k8s.io/kubernetes/pkg/apis/resource/validation"

	"github.com/carve-dev/carve/dra"
	"github.com/carve-dev/carve/partition"
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

// classes is a DeviceClassLister over a fixed list.
type classes []*resourceapi.DeviceClass

func (c classes) List() ([]*resourceapi.DeviceClass, error) { return c, nil }

func (c classes) Get(name string) (*resourceapi.DeviceClass, error) {
	for _, dc := range c {
		if dc.Name == name {
			return dc, nil
		}
	}
	return nil, fmt.Errorf("no DeviceClass %s", name)
}

// scheduler allocates claims one by one against a node's slices as the
// scheduler does with Kubernetes 1.37's default DRA features (which pick
// the "incubating" allocator: the only one that supports consumable
// capacity), remembering what it allocated.
type scheduler struct {
	slices    []*resourceapi.ResourceSlice
	allocated sets.Set[structured.DeviceID]
	n         int
}

// defaultFeatures are the allocator features that the DRA feature gates
// on by default in Kubernetes 1.37 turn on.
var defaultFeatures = structured.Features{
	AdminAccess: true, PrioritizedList: true, PartitionableDevices: true, DeviceTaints: true,
	DeviceBindingAndStatus: true, ConsumableCapacity: true, FractionalCapacityRange: true,
}

func newScheduler(ss []resourceapi.ResourceSlice) *scheduler {
	s := &scheduler{allocated: sets.New[structured.DeviceID]()}
	for i := range ss {
		s.slices = append(s.slices, &ss[i])
	}
	return s
}

// allocate asks for one MIG device of the profile and returns the device
// allocated, or "" when none fits.
func (s *scheduler) allocate(t *testing.T, profile string) string {
	t.Helper()
	mig := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "mig.carve.dev"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: `device.driver == "gpu.carve.dev" && device.attributes["gpu.carve.dev"].type == "mig"`}}}}}
	s.n++
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("c%d", s.n), UID: types.UID(fmt.Sprintf("uid-%d", s.n))},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "mig", Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: "mig.carve.dev", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf(`device.attributes["gpu.carve.dev"].profile == %q`, profile)}}},
		}}}}}}
	state := structured.AllocatedState{
		AllocatedDevices:         s.allocated,
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	alloc, err := structured.NewAllocator(context.Background(), defaultFeatures, state, classes{mig}, s.slices,
		cel.NewCache(10, cel.Features{EnableConsumableCapacity: true}))
	if err != nil {
		t.Fatal(err)
	}
	res, err := alloc.Allocate(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, []*resourceapi.ResourceClaim{claim})
	if err != nil {
		t.Fatalf("allocate %s: %v", profile, err)
	}
	if len(res) == 0 {
		return ""
	}
	r := res[0].Devices.Results[0]
	s.allocated.Insert(structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
	return r.Device
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
			s := newScheduler(pool(t, m, 2))
			var got []string
			for _, p := range c.profiles {
				got = append(got, s.allocate(t, p))
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("allocated (-want +got):\n%s", diff)
			}
		})
	}
}
