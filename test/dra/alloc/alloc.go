// Package alloc allocates single-device claims against a node's
// ResourceSlices with the scheduler's own allocator library
// (structured.NewAllocator of k8s.io/dynamic-resource-allocation), given
// the feature set the Kubernetes scheduler derives from its feature gates'
// defaults, as the scheduler does for one node: the devices it allocated
// before are passed as allocated, and a device is freed when its claim
// goes.
package alloc

import (
	"context"
	"fmt"
	"path"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
)

// MIGClass is carve's DeviceClass of MIG devices, as configs/deploy and
// the chart create it.
func MIGClass() *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "mig.carve.dev"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: `device.driver == "gpu.carve.dev" && device.attributes["gpu.carve.dev"].type == "mig"`}}}}}
}

// DefaultFeatures returns the allocator features the scheduler turns on
// with the default feature gates of the Kubernetes it is built from
// (k8s.io/kubernetes in this module's go.mod), derived by the scheduler's
// own code.
func DefaultFeatures() structured.Features {
	return dynamicresources.AllocatorFeatures(feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate))
}

// Scheduler allocates claims one by one against one node's slices, and
// remembers what it allocated.
type Scheduler struct {
	node      *corev1.Node
	slices    []*resourceapi.ResourceSlice
	class     *resourceapi.DeviceClass
	features  structured.Features
	cache     *cel.Cache
	allocated map[string]structured.DeviceID // device name -> ID
	n         int
}

// New returns a Scheduler for node's slices, serving requests of the
// DeviceClass class with the scheduler's default features.
func New(node string, ss []resourceapi.ResourceSlice, class *resourceapi.DeviceClass) *Scheduler {
	f := DefaultFeatures()
	s := &Scheduler{
		node:      &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}},
		class:     class,
		features:  f,
		cache:     cel.NewCache(10, cel.Features{EnableConsumableCapacity: f.ConsumableCapacity, EnableListTypeAttributes: f.ListTypeAttributes}),
		allocated: map[string]structured.DeviceID{},
	}
	for i := range ss {
		s.slices = append(s.slices, &ss[i])
	}
	return s
}

// Implementation names the allocator NewAllocator picks for the
// Scheduler's features: "stable", "incubating" or "experimental" (the
// package of the implementation it returns).
func (s *Scheduler) Implementation(ctx context.Context) (string, error) {
	a, err := s.allocator(ctx)
	if err != nil {
		return "", err
	}
	t := reflect.TypeOf(a)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return path.Base(t.PkgPath()), nil
}

func (s *Scheduler) allocator(ctx context.Context) (structured.Allocator, error) {
	ids := sets.New[structured.DeviceID]()
	for _, id := range s.allocated {
		ids.Insert(id)
	}
	state := structured.AllocatedState{
		AllocatedDevices:         ids,
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	a, err := structured.NewAllocator(ctx, s.features, state, classList{s.class}, s.slices, s.cache)
	if err != nil {
		return nil, fmt.Errorf("new allocator: %w", err)
	}
	return a, nil
}

// Allocate asks for one device of the class whose profile attribute
// (gpu.carve.dev/profile) is profile, as a ResourceClaim of carve's
// examples does, and returns the device allocated, or "" when none fits.
func (s *Scheduler) Allocate(ctx context.Context, profile string) (string, error) {
	s.n++
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("c%d", s.n), UID: types.UID(fmt.Sprintf("uid-%d", s.n))},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "mig", Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: s.class.Name, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf(`device.attributes["gpu.carve.dev"].profile == %q`, profile)}}},
		}}}}},
	}
	a, err := s.allocator(ctx)
	if err != nil {
		return "", err
	}
	res, err := a.Allocate(ctx, s.node, []*resourceapi.ResourceClaim{claim})
	if err != nil {
		return "", fmt.Errorf("allocate %s: %w", profile, err)
	}
	if len(res) == 0 {
		return "", nil
	}
	r := res[0].Devices.Results[0]
	if _, dup := s.allocated[r.Device]; dup {
		return "", fmt.Errorf("allocate %s: device %s allocated twice", profile, r.Device)
	}
	s.allocated[r.Device] = structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
	return r.Device, nil
}

// Free releases a device Allocate returned, as when its claim is deleted.
func (s *Scheduler) Free(device string) error {
	if _, ok := s.allocated[device]; !ok {
		return fmt.Errorf("free %s: not allocated", device)
	}
	delete(s.allocated, device)
	return nil
}

// classList is a DeviceClassLister over a fixed list.
type classList []*resourceapi.DeviceClass

func (c classList) List() ([]*resourceapi.DeviceClass, error) { return c, nil }

func (c classList) Get(name string) (*resourceapi.DeviceClass, error) {
	for _, dc := range c {
		if dc.Name == name {
			return dc, nil
		}
	}
	return nil, fmt.Errorf("no DeviceClass %s", name)
}
