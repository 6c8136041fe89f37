package dra

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	k8stesting "k8s.io/client-go/testing"

	"github.com/carve-dev/carve/internal/apitest"
	"github.com/carve-dev/carve/kubeclient/clientset"
	"github.com/carve-dev/carve/partition"
)

func model(t *testing.T, key string) partition.Model {
	t.Helper()
	m, ok := partition.LookupModel(key)
	if !ok {
		t.Fatalf("no model %s", key)
	}
	return m
}

// dynamicH100s are n dynamic H100 GPUs from index first on, all profiles.
func dynamicH100s(t *testing.T, first, n int) []DynamicGPU {
	t.Helper()
	var out []DynamicGPU
	for i := first; i < first+n; i++ {
		out = append(out, DynamicGPU{Index: i, UUID: fmt.Sprintf("GPU-d%d", i), Model: model(t, "H100-80GB")})
	}
	return out
}

// TestDescribeDynamic: a dynamic GPU is not described from its inventory
// (the instance made for a claim is no static device); it offers a counter
// set and one device per placement of the profiles it allows, after the
// static devices, each with the static MIG devices' attributes but no
// uuid, consuming its placement's counters.
func TestDescribeDynamic(t *testing.T) {
	gpus := testGPUs()
	gpus[1].MIGMode = partition.MIGEnabled
	gpus[1].Instances = []partition.Instance{migInstance("3g.40gb", 9, 4, 4, 40192, 60, "MIG-claim")}
	dyn := []DynamicGPU{{Index: 1, UUID: "GPU-b", Model: model(t, "H100-80GB"), Profiles: []string{"3g.40gb", "7g.80gb"}}}
	off, err := Describe(gpus, expand(t, gpus, nil), dyn...)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"gpu-0-mig-1g10gb-19-2", "gpu-0-mig-1g10gb-19-3", "gpu-1-dyn-3g40gb-4", "gpu-1-dyn-3g40gb-0", "gpu-1-dyn-7g80gb-0"}
	if diff := cmp.Diff(want, names(off.Devices)); diff != "" {
		t.Errorf("devices (-want +got):\n%s", diff)
	}
	if _, ok := off.UUIDs["gpu-1-mig-3g40gb-9-4"]; ok {
		t.Errorf("the dynamic GPU's instance is described as a static device")
	}
	q := func(n int64) resourceapi.Counter {
		return resourceapi.Counter{Value: *resource.NewQuantity(n, resource.DecimalSI)}
	}
	wantDev := resourceapi.Device{
		Name: "gpu-1-dyn-3g40gb-4",
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			AttrType: str(TypeMIG), AttrIndex: num(1), AttrProductName: str(h100), AttrProfile: str("3g.40gb"),
			AttrParentUUID: str("GPU-b"), AttrMIGPlacement: str("4:4"),
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			CapMemory:          bytesCap(40448 * mib),
			CapMultiprocessors: {Value: *resource.NewQuantity(60, resource.DecimalSI)},
		},
		// Offering only 3g and 7g, the slices go by fours.
		ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: "gpu-1", Counters: map[string]resourceapi.Counter{"memory-slice-4": q(1)}}},
	}
	if diff := cmp.Diff(wantDev, off.Devices[2]); diff != "" {
		t.Errorf("device (-want +got):\n%s", diff)
	}
	wantSets := []resourceapi.CounterSet{{Name: "gpu-1", Counters: map[string]resourceapi.Counter{"memory-slice-0": q(1), "memory-slice-4": q(1)}}}
	if diff := cmp.Diff(wantSets, off.CounterSets); diff != "" {
		t.Errorf("counter sets (-want +got):\n%s", diff)
	}
	if got := off.Dynamic["gpu-1-dyn-7g80gb-0"]; got.GPUUUID != "GPU-b" || got.Profile.Name != "7g.80gb" || got.At != (partition.Placement{Start: 0, Size: 8}) {
		t.Errorf("gpu-1-dyn-7g80gb-0 stands for %+v", got)
	}
}

// TestDescribeDynamicErrors: bad dynamic GPUs are refused, naming the GPU.
func TestDescribeDynamicErrors(t *testing.T) {
	h := model(t, "H100-80GB")
	for _, c := range []struct {
		dyn  []DynamicGPU
		want string
	}{
		{[]DynamicGPU{{Index: 3, UUID: "GPU-x", Model: h, Profiles: []string{"1g.5gb"}}}, `dynamic GPU 3: unknown MIG profile "1g.5gb" for H100-80GB`},
		{[]DynamicGPU{{Index: 3, UUID: "GPU-x", Model: h}, {Index: 3, UUID: "GPU-y", Model: h}}, "dynamic GPU 3 listed twice"},
		{[]DynamicGPU{{Index: 2, Model: h}}, "dynamic GPU 2: no UUID"},
		{[]DynamicGPU{{Index: 1, UUID: "GPU-x", Model: h}}, "dynamic GPU 1 is GPU-x, but GPU 1 of the node is GPU-b"},
		{[]DynamicGPU{{Index: 5, UUID: "GPU-x", Model: partition.Model{Key: "L4-24GB"}}}, "dynamic GPU 5: L4-24GB has no MIG profiles"},
	} {
		_, err := Describe(testGPUs(), nil, c.dyn...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Describe(%+v) = %v, want %q", c.dyn, err, c.want)
		}
	}
}

// checkPool fails unless the slices are a valid, complete pool that the
// API accepts: each slice holds devices or counter sets, within the
// limits; names are unique and valid, sorted as given; every consumed
// counter exists; every slice has the same generation and the count.
func checkPool(t *testing.T, ss []resourceapi.ResourceSlice) {
	t.Helper()
	sets := map[string]resourceapi.CounterSet{}
	devices := map[string]bool{}
	var sliceNames []string
	for _, s := range ss {
		sliceNames = append(sliceNames, s.Name)
		if errs := validation.IsDNS1123Subdomain(s.Name); len(errs) > 0 {
			t.Errorf("slice name %q: %v", s.Name, errs)
		}
		if s.Spec.Pool.ResourceSliceCount != int64(len(ss)) || s.Spec.Pool.Generation != ss[0].Spec.Pool.Generation {
			t.Errorf("slice %s: pool %+v, want %d slices at generation %d", s.Name, s.Spec.Pool, len(ss), ss[0].Spec.Pool.Generation)
		}
		if s.Spec.Devices != nil && s.Spec.SharedCounters != nil {
			t.Errorf("slice %s holds devices and counter sets", s.Name)
		}
		if n := len(s.Spec.SharedCounters); n > resourceapi.ResourceSliceMaxCounterSets {
			t.Errorf("slice %s: %d counter sets", s.Name, n)
		}
		if n := len(s.Spec.Devices); n > resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures {
			t.Errorf("slice %s: %d devices", s.Name, n)
		}
		for _, cs := range s.Spec.SharedCounters {
			if _, dup := sets[cs.Name]; dup {
				t.Errorf("counter set %s twice", cs.Name)
			}
			sets[cs.Name] = cs
			if n := len(cs.Counters); n == 0 || n > resourceapi.ResourceSliceMaxCountersPerCounterSet {
				t.Errorf("counter set %s: %d counters", cs.Name, n)
			}
		}
		for _, d := range s.Spec.Devices {
			if devices[d.Name] {
				t.Errorf("device %s twice", d.Name)
			}
			devices[d.Name] = true
			if errs := validation.IsDNS1123Label(d.Name); len(errs) > 0 {
				t.Errorf("device name %q: %v", d.Name, errs)
			}
			if n := len(d.Attributes) + len(d.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
				t.Errorf("device %s: %d attributes and capacities", d.Name, n)
			}
			if n := len(d.ConsumesCounters); n > resourceapi.ResourceSliceMaxDeviceCounterConsumptionsPerDevice {
				t.Errorf("device %s: %d counter consumptions", d.Name, n)
			}
		}
	}
	for _, s := range ss {
		for _, d := range s.Spec.Devices {
			for _, c := range d.ConsumesCounters {
				for name := range c.Counters {
					if _, ok := sets[c.CounterSet].Counters[name]; !ok {
						t.Errorf("device %s consumes %s/%s, which the pool lacks", d.Name, c.CounterSet, name)
					}
				}
			}
		}
	}
	if !sort.StringsAreSorted(sliceNames) {
		t.Errorf("slice names not in order: %v", sliceNames)
	}
}

// TestPoolSlicesLimits: a node with static devices and many dynamic GPUs
// of every model is laid out within the API's limits, in slices whose
// names sort in device order.
func TestPoolSlicesLimits(t *testing.T) {
	static := testGPUs()
	for _, m := range partition.Catalogue() {
		for _, n := range []int{0, 1, 8, 17} {
			var dyn []DynamicGPU
			for i := 2; i < 2+n; i++ {
				dyn = append(dyn, DynamicGPU{Index: i, UUID: fmt.Sprintf("GPU-%d", i), Model: m})
			}
			off, err := Describe(static, expand(t, static, nil), dyn...)
			if err != nil {
				t.Fatalf("%s x%d: %v", m.Key, n, err)
			}
			ss := PoolSlices(node, off.Devices, off.CounterSets)
			checkPool(t, ss)
			var got []string
			for _, s := range ss {
				got = append(got, names(s.Spec.Devices)...)
			}
			if diff := cmp.Diff(names(off.Devices), got); diff != "" {
				t.Errorf("%s x%d: devices out of order (-want +got):\n%s", m.Key, n, diff)
			}
		}
	}
}

// TestPoolSlicesNames: counter slices, then device slices, numbered with
// as many digits as the count needs; a long node name is cut and hashed.
func TestPoolSlicesNames(t *testing.T) {
	var sets []resourceapi.CounterSet
	for i := range 9 {
		sets = append(sets, resourceapi.CounterSet{Name: CounterSetName(i)})
	}
	devs := make([]resourceapi.Device, 130)
	var got []string
	for _, s := range PoolSlices("n1", devs, sets) {
		got = append(got, fmt.Sprintf("%s %d %d", s.Name, len(s.Spec.SharedCounters), len(s.Spec.Devices)))
	}
	want := []string{
		"n1-gpu.carve.dev-counters-00 8 0", "n1-gpu.carve.dev-counters-01 1 0",
		"n1-gpu.carve.dev-devices-00 0 64", "n1-gpu.carve.dev-devices-01 0 64", "n1-gpu.carve.dev-devices-02 0 2",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("slices (-want +got):\n%s", diff)
	}
	long := strings.Repeat("a", 62) + "." + strings.Repeat("b", 62) + "." + strings.Repeat("c", 62) + "." + strings.Repeat("d", 62)
	a, b := sliceName(long, "devices-00"), sliceName(long[:len(long)-1]+"e", "devices-00")
	if a == b || len(a) > validation.DNS1123SubdomainMaxLength || len(validation.IsDNS1123Subdomain(a)) > 0 {
		t.Errorf("long node names give %q and %q", a, b)
	}
}

// TestPublishPool: static and dynamic devices are published in several
// slices of one pool, all at one generation raised together on a change;
// a shrinking pool deletes its stale slices; an unchanged one is not
// written; the slice of an older agent (a generated name) goes.
func TestPublishPool(t *testing.T) {
	old := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "node-a-gpu.carve.dev-x7k2p"},
		Spec: resourceapi.ResourceSliceSpec{Driver: DriverName, NodeName: new(node), Pool: resourceapi.ResourcePool{Name: node, Generation: 7, ResourceSliceCount: 1}}}
	cs := newFake(old)
	p := &Publisher{Client: clientset.Wrap(cs), Node: node}
	ctx := context.Background()
	gpus := testGPUs()
	steps := []struct {
		dyn        []DynamicGPU
		wantGen    int64
		wantSlices []string
	}{
		// 2 static devices and 3 x 25 dynamic ones: two device slices.
		{dynamicH100s(t, 2, 3), 8, []string{"counters-00", "devices-00", "devices-01"}},
		{dynamicH100s(t, 2, 3), 8, []string{"counters-00", "devices-00", "devices-01"}},
		{dynamicH100s(t, 2, 1), 9, []string{"counters-00", "devices-00"}},
		{nil, 10, []string{"devices-00"}},
	}
	for i, st := range steps {
		off, err := Describe(gpus, expand(t, gpus, nil), st.dyn...)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Publish(ctx, off.Devices, off.CounterSets...); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		ss := slicesOf(t, cs)
		sort.Slice(ss, func(a, b int) bool { return ss[a].Name < ss[b].Name })
		checkPool(t, ss)
		var got []string
		var devs []string
		for _, s := range ss {
			got = append(got, strings.TrimPrefix(s.Name, node+"-"+DriverName+"-"))
			devs = append(devs, names(s.Spec.Devices)...)
		}
		if diff := cmp.Diff(st.wantSlices, got); diff != "" {
			t.Errorf("step %d: slices (-want +got):\n%s", i, diff)
		}
		if diff := cmp.Diff(names(off.Devices), devs); diff != "" {
			t.Errorf("step %d: devices (-want +got):\n%s", i, diff)
		}
		if g := ss[0].Spec.Pool.Generation; g != st.wantGen {
			t.Errorf("step %d: generation %d, want %d", i, g, st.wantGen)
		}
	}
}

// TestPublishCountersDropped: a server without partitionable devices
// drops the counters; the devices that would consume them are then not
// published at all (the scheduler would allocate overlapping placements),
// and the error says why.
func TestPublishCountersDropped(t *testing.T) {
	cs := newFake()
	drop := func(a k8stesting.Action) (bool, runtime.Object, error) {
		s := a.(interface{ GetObject() runtime.Object }).GetObject().(*resourceapi.ResourceSlice)
		s.Spec.SharedCounters = nil
		for i := range s.Spec.Devices {
			s.Spec.Devices[i].ConsumesCounters = nil
		}
		return false, nil, nil
	}
	cs.PrependReactor("create", "resourceslices", drop)
	cs.PrependReactor("update", "resourceslices", drop)
	gpus := testGPUs()
	off, err := Describe(gpus, expand(t, gpus, nil), dynamicH100s(t, 2, 1)...)
	if err != nil {
		t.Fatal(err)
	}
	p := &Publisher{Client: clientset.Wrap(cs), Node: node}
	if err := p.Publish(context.Background(), off.Devices, off.CounterSets...); !errors.Is(err, ErrCountersDropped) {
		t.Fatalf("Publish = %v, want ErrCountersDropped", err)
	}
	var got []string
	for _, s := range slicesOf(t, cs) {
		got = append(got, names(s.Spec.Devices)...)
	}
	if diff := cmp.Diff([]string{"gpu-0-mig-1g10gb-19-2", "gpu-0-mig-1g10gb-19-3", "gpu-1"}, got); diff != "" {
		t.Errorf("published (-want +got):\n%s", diff)
	}
}

// TestDriverPublishesDynamic: SetDynamic takes effect at the next
// Advertise, and Update keeps it; a driver without GPUs refuses clearly a
// claim allocated a dynamic device.
func TestDriverPublishesDynamic(t *testing.T) {
	cs := newFake()
	d := newDriver(t, cs, t.TempDir(), t.TempDir())
	ctx := context.Background()
	gpus := testGPUs()
	d.SetDynamic([]DynamicGPU{{Index: 1, UUID: "GPU-b", Model: model(t, "H100-80GB")}})
	if err := d.Advertise(ctx, gpus, expand(t, gpus, nil)); err != nil {
		t.Fatal(err)
	}
	if err := d.Update(ctx, expand(t, gpus, nil)); err != nil {
		t.Fatal(err)
	}
	var devs []string
	sets := 0
	for _, s := range slicesOf(t, cs) {
		devs = append(devs, names(s.Spec.Devices)...)
		sets += len(s.Spec.SharedCounters)
	}
	if sets != 1 || !slices.Contains(devs, "gpu-1-dyn-7g80gb-0") || slices.Contains(devs, "gpu-1") {
		t.Errorf("published %d counter sets and devices %v; want GPU 1 dynamic", sets, devs)
	}
	res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim("c1", "c1", "gpu-1-dyn-7g80gb-0")})
	if err != nil {
		t.Fatal(err)
	}
	if err := res["c1"].Err; err == nil || !strings.Contains(err.Error(), "no GPUs to make MIG devices on") {
		t.Errorf("prepare of a dynamic device = %v, want a refusal that says so", err)
	}
}

// TestPublishStrict: on a fake that enforces what the API server does
// (field selectors, resourceVersions), every write of a changing pool
// names the version it replaces, another node's slice is left alone, and
// a stale slice of the node is deleted.
func TestPublishStrict(t *testing.T) {
	slice := func(name, node string) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.ResourceSliceSpec{Driver: DriverName, NodeName: new(node), Pool: resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1}}}
	}
	cs, strict := apitest.NewStrict(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, UID: "node-uid"}},
		slice("node-b-gpu.carve.dev-devices-00", "node-b"), slice("node-a-gpu.carve.dev-old", node))
	p := &Publisher{Client: clientset.Wrap(cs), Node: node}
	gpus := testGPUs()
	for i, n := range []int{3, 3, 1, 3} {
		off, err := Describe(gpus, expand(t, gpus, nil), dynamicH100s(t, 2, n)...)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Publish(context.Background(), off.Devices, off.CounterSets...); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	var got []string
	for _, s := range slicesOf(t, cs) {
		got = append(got, fmt.Sprintf("%s %d", s.Name, s.Spec.Pool.Generation))
	}
	sort.Strings(got)
	want := []string{"node-a-gpu.carve.dev-counters-00 4", "node-a-gpu.carve.dev-devices-00 4", "node-a-gpu.carve.dev-devices-01 4", "node-b-gpu.carve.dev-devices-00 1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("slices (-want +got):\n%s", diff)
	}
	if u := strict.Unconditional(); len(u) > 0 {
		t.Errorf("unconditional writes: %v", u)
	}
}

// TestHoldersDynamic: a claim allocated a device of a dynamic GPU holds
// that GPU, whose MIG device may not exist yet: a change of the GPU must
// wait for it.
func TestHoldersDynamic(t *testing.T) {
	cs := newFake(claim("u1", "dyn", "gpu-1-dyn-3g40gb-4"))
	d := newDriver(t, cs, "", t.TempDir())
	d.SetDynamic([]DynamicGPU{{Index: 1, UUID: "GPU-b", Model: model(t, "H100-80GB")}})
	gpus := testGPUs()
	if err := d.Advertise(context.Background(), gpus, expand(t, gpus, nil)); err != nil {
		t.Fatal(err)
	}
	got, err := d.Holders(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []Holder{{Namespace: "ns", Claim: "dyn", Devices: []string{"gpu-1-dyn-3g40gb-4"}, UUIDs: []string{"GPU-b"}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("holders (-want +got):\n%s", diff)
	}
}
