package dra

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/carve-dev/carve/kubeclient/clientset"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/timeslice"
)

const node = "node-a"

// testGPUs: GPU 0 in MIG mode with two 1g.10gb devices, GPU 1 whole.
func testGPUs() []partition.GPU {
	return []partition.GPU{
		{Index: 0, UUID: "GPU-a", Product: h100, MemoryMiB: 81559, MIGCapable: true, MIGMode: partition.MIGEnabled, Instances: []partition.Instance{
			migInstance("1g.10gb", 19, 2, 1, 9856, 16, "MIG-1"),
			migInstance("1g.10gb", 19, 3, 1, 9856, 16, "MIG-2"),
		}},
		{Index: 1, UUID: "GPU-b", Product: h100, MemoryMiB: 81559, MIGCapable: true},
	}
}

func expand(t *testing.T, gpus []partition.GPU, sharing map[int]timeslice.Sharing) timeslice.Resources {
	t.Helper()
	res, err := timeslice.Expand(gpus, sharing)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// newFake returns a clientset holding the Node, which names the slices it
// creates from their generateName, as the API server does.
func newFake(objs ...runtime.Object) *fake.Clientset {
	objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, UID: "node-uid"}})
	cs := fake.NewClientset(objs...)
	n := 0
	cs.PrependReactor("create", "resourceslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		s := a.(k8stesting.CreateAction).GetObject().(*resourceapi.ResourceSlice)
		if s.Name == "" {
			n++
			s.Name = s.GenerateName + strings.Repeat("x", n)
		}
		return false, nil, nil
	})
	return cs
}

func slicesOf(t *testing.T, cs *fake.Clientset) []resourceapi.ResourceSlice {
	t.Helper()
	l, err := cs.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

func names(devs []resourceapi.Device) []string {
	var out []string
	for _, d := range devs {
		out = append(out, d.Name)
	}
	return out
}

// TestDescribeShares: a withheld device is not offered but still known; a
// time-sliced GPU is one device shared by up to its replica count.
func TestDescribeShares(t *testing.T) {
	gpus := testGPUs()
	res := expand(t, gpus, map[int]timeslice.Sharing{1: {Replicas: 4}})
	res = res.Without(timeslice.NewIDSet([]string{"MIG-2"}))
	off, err := Describe(gpus, res)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"gpu-0-mig-1g10gb-19-2", "gpu-1"}, names(off.Devices)); diff != "" {
		t.Errorf("offered (-want +got):\n%s", diff)
	}
	wantUUIDs := map[string]string{"gpu-0-mig-1g10gb-19-2": "MIG-1", "gpu-0-mig-1g10gb-19-3": "MIG-2", "gpu-1": "GPU-b"}
	if diff := cmp.Diff(wantUUIDs, off.UUIDs); diff != "" {
		t.Errorf("known (-want +got):\n%s", diff)
	}
	if shared := slices.DeleteFunc(slices.Clone(off.Devices), func(d resourceapi.Device) bool { return d.AllowMultipleAllocations == nil }); len(shared) != 1 {
		t.Errorf("%d shared devices, want 1", len(shared))
	}
	g := off.Devices[1]
	if g.AllowMultipleAllocations == nil || !*g.AllowMultipleAllocations {
		t.Fatalf("gpu-1 is not shared: %+v", g)
	}
	rep := g.Capacity[CapReplicas]
	if rep.Value.Value() != 4 || rep.RequestPolicy.Default.Value() != 1 || rep.RequestPolicy.ValidRange.Max.Value() != 4 {
		t.Errorf("replicas capacity = %+v, want 4, one per allocation", rep)
	}
	if mem := g.Capacity[CapMemory]; mem.RequestPolicy == nil || mem.RequestPolicy.Default.Value() != 0 {
		t.Errorf("memory of a shared GPU = %+v, want a request policy taking none by default", mem)
	}
	if off.Devices[0].AllowMultipleAllocations != nil {
		t.Errorf("an unshared MIG device allows multiple allocations")
	}
}

// TestPublish: one slice per node, its pool generation raised on every
// change and only then; extra slices of the node removed; another node's
// slice left alone.
func TestPublish(t *testing.T) {
	other := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "other"},
		Spec: resourceapi.ResourceSliceSpec{Driver: DriverName, NodeName: new("node-b"), Pool: resourceapi.ResourcePool{Name: "node-b", Generation: 1, ResourceSliceCount: 1}}}
	extra := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "extra"},
		Spec: resourceapi.ResourceSliceSpec{Driver: DriverName, NodeName: new(node), Pool: resourceapi.ResourcePool{Name: node, Generation: 3, ResourceSliceCount: 1}}}
	cs := newFake(other, extra)
	p := &Publisher{Client: clientset.Wrap(cs), Node: node}
	ctx := context.Background()
	off, err := Describe(testGPUs(), expand(t, testGPUs(), nil))
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		devices []resourceapi.Device
		wantGen int64
	}{
		{off.Devices, 4},
		{off.Devices, 4},     // unchanged: no new generation
		{off.Devices[1:], 5}, // one withdrawn
		{nil, 6},             // all gone: an empty pool, still published
	}
	for i, st := range steps {
		if err := p.Publish(ctx, st.devices); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		var mine []resourceapi.ResourceSlice
		for _, s := range slicesOf(t, cs) {
			if s.Name == "other" {
				continue
			}
			mine = append(mine, s)
		}
		if len(mine) != 1 {
			t.Fatalf("step %d: %d slices of the node, want 1", i, len(mine))
		}
		s := mine[0]
		if s.Spec.Pool.Generation != st.wantGen || s.Spec.Pool.Name != node || *s.Spec.NodeName != node {
			t.Errorf("step %d: pool %+v on %s, want generation %d", i, s.Spec.Pool, *s.Spec.NodeName, st.wantGen)
		}
		if diff := cmp.Diff(names(st.devices), names(s.Spec.Devices)); diff != "" {
			t.Errorf("step %d: devices (-want +got):\n%s", i, diff)
		}
	}
	if !slices.ContainsFunc(slicesOf(t, cs), func(s resourceapi.ResourceSlice) bool { return s.Name == "other" }) {
		t.Errorf("another node's slice was deleted")
	}
}

// TestPublishNewSliceOwnedByNode: a node without a slice gets one, owned by
// its Node.
func TestPublishNewSliceOwnedByNode(t *testing.T) {
	cs := newFake()
	p := &Publisher{Client: clientset.Wrap(cs), Node: node}
	if err := p.Publish(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	got := slicesOf(t, cs)
	if len(got) != 1 {
		t.Fatalf("%d slices, want 1", len(got))
	}
	want := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node, UID: "node-uid"}}
	if diff := cmp.Diff(want, got[0].OwnerReferences); diff != "" {
		t.Errorf("owner (-want +got):\n%s", diff)
	}
	if got[0].Spec.Pool.Generation != 1 {
		t.Errorf("generation %d, want 1", got[0].Spec.Pool.Generation)
	}
}

// TestPublishSharingDropped: a server without consumable capacity drops
// allowMultipleAllocations; the shared device is then not published at
// all, and the error says why.
func TestPublishSharingDropped(t *testing.T) {
	cs := newFake()
	drop := func(a k8stesting.Action) (bool, runtime.Object, error) {
		s := a.(interface{ GetObject() runtime.Object }).GetObject().(*resourceapi.ResourceSlice)
		for i := range s.Spec.Devices {
			s.Spec.Devices[i].AllowMultipleAllocations = nil
		}
		return false, nil, nil
	}
	cs.PrependReactor("create", "resourceslices", drop)
	cs.PrependReactor("update", "resourceslices", drop)
	gpus := testGPUs()
	off, err := Describe(gpus, expand(t, gpus, map[int]timeslice.Sharing{1: {Replicas: 2}}))
	if err != nil {
		t.Fatal(err)
	}
	p := &Publisher{Client: clientset.Wrap(cs), Node: node}
	err = p.Publish(context.Background(), off.Devices)
	if !errors.Is(err, ErrSharingDropped) {
		t.Fatalf("Publish = %v, want ErrSharingDropped", err)
	}
	got := slicesOf(t, cs)
	if diff := cmp.Diff([]string{"gpu-0-mig-1g10gb-19-2", "gpu-0-mig-1g10gb-19-3"}, names(got[0].Spec.Devices)); diff != "" {
		t.Errorf("published (-want +got):\n%s", diff)
	}
}

// newDriver returns a driver on a fake API server with its own state and
// CDI directories, the test GPUs advertised.
func newDriver(t *testing.T, cs *fake.Clientset, state, cdi string) *Driver {
	t.Helper()
	d, err := New(Config{Client: clientset.Wrap(cs), NodeName: node, StateDir: state, CDIDir: cdi})
	if err != nil {
		t.Fatal(err)
	}
	gpus := testGPUs()
	if err := d.Advertise(context.Background(), gpus, expand(t, gpus, map[int]timeslice.Sharing{1: {Replicas: 2}})); err != nil {
		t.Fatal(err)
	}
	return d
}

func claim(uid, name string, devices ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid)}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for _, d := range devices {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: DriverName, Pool: node, Device: d})
	}
	return c
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestPrepareUnprepare: a claim gets one CDI device that makes its UUIDs
// visible; preparing again answers the same; an unshared device cannot go
// to two claims, a shared one can; a device not on the node is refused;
// the record outlives a restart; unprepare removes the spec and the record
// and may be repeated.
func TestPrepareUnprepare(t *testing.T) {
	state, cdi := t.TempDir(), t.TempDir()
	cs := newFake()
	d := newDriver(t, cs, state, cdi)
	ctx := context.Background()
	two := claim("uid-1", "two", "gpu-0-mig-1g10gb-19-2", "gpu-0-mig-1g10gb-19-3")
	res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{two})
	if err != nil {
		t.Fatal(err)
	}
	want := PreparedDevices{Devices: []KubeletDevice{
		{Requests: []string{"gpu"}, PoolName: node, DeviceName: "gpu-0-mig-1g10gb-19-2", CDIDeviceIDs: []string{"gpu.carve.dev/claim=uid-1"}},
		{Requests: []string{"gpu"}, PoolName: node, DeviceName: "gpu-0-mig-1g10gb-19-3", CDIDeviceIDs: []string{"gpu.carve.dev/claim=uid-1"}},
	}}
	if diff := cmp.Diff(want, res["uid-1"], cmp.Comparer(func(a, b error) bool { return errText(a) == errText(b) })); diff != "" {
		t.Errorf("prepare (-want +got):\n%s", diff)
	}
	spec, err := os.ReadFile(filepath.Join(cdi, "gpu.carve.dev_claim_uid-1.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(spec), `"NVIDIA_VISIBLE_DEVICES=MIG-1,MIG-2"`) || !strings.Contains(string(spec), `"kind": "gpu.carve.dev/claim"`) {
		t.Errorf("CDI spec:\n%s", spec)
	}

	again, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{two})
	if err != nil || !cmp.Equal(res["uid-1"], again["uid-1"], cmp.Comparer(func(a, b error) bool { return errText(a) == errText(b) })) {
		t.Errorf("second prepare = %+v, %v; want the first answer", again["uid-1"], err)
	}

	others := []*resourceapi.ResourceClaim{
		claim("uid-2", "same-mig", "gpu-0-mig-1g10gb-19-2"),
		claim("uid-3", "share-a", "gpu-1"),
		claim("uid-4", "share-b", "gpu-1"),
		claim("uid-5", "gone", "gpu-0-mig-3g40gb-9-4"),
	}
	res, err = d.PrepareResourceClaims(ctx, others)
	if err != nil {
		t.Fatal(err)
	}
	wantErrs := map[types.UID]string{
		"uid-2": "claim ns/same-mig: device gpu-0-mig-1g10gb-19-2 is already prepared for claim uid-1",
		"uid-3": "",
		"uid-4": "",
		"uid-5": "claim ns/gone: device gpu-0-mig-3g40gb-9-4 is not on node node-a (gone in a repartition, or not yet published since the agent started)",
	}
	for uid, w := range wantErrs {
		if got := errText(res[uid].Err); got != w {
			t.Errorf("claim %s: error %q, want %q", uid, got, w)
		}
	}

	// A restarted driver knows the prepared claims: they hold devices even
	// with no claim on the API server, and unprepare removes their specs.
	d2 := newDriver(t, cs, state, cdi)
	holders, err := d2.Holders(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantHolders := []Holder{
		{Namespace: "ns", Claim: "share-a", Devices: []string{"gpu-1"}, UUIDs: []string{"GPU-b"}},
		{Namespace: "ns", Claim: "share-b", Devices: []string{"gpu-1"}, UUIDs: []string{"GPU-b"}},
		{Namespace: "ns", Claim: "two", Devices: []string{"gpu-0-mig-1g10gb-19-2", "gpu-0-mig-1g10gb-19-3"}, UUIDs: []string{"MIG-1", "MIG-2"}},
	}
	if diff := cmp.Diff(wantHolders, holders); diff != "" {
		t.Errorf("holders after a restart (-want +got):\n%s", diff)
	}
	for range 2 {
		un, err := d2.UnprepareResourceClaims(ctx, []ClaimRef{{UID: "uid-1"}, {UID: "uid-3"}, {UID: "never"}})
		if err != nil {
			t.Fatal(err)
		}
		for uid, e := range un {
			if e != nil {
				t.Errorf("unprepare %s: %v", uid, e)
			}
		}
	}
	left, err := filepath.Glob(filepath.Join(cdi, "*"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{filepath.Join(cdi, "gpu.carve.dev_claim_uid-4.json")}, left); diff != "" {
		t.Errorf("CDI specs left (-want +got):\n%s", diff)
	}
}

// TestHoldersFromAPI: a claim the API server says is allocated a device
// of this node holds it, with the pods it is reserved for; claims of other
// nodes or drivers, and unallocated ones, hold nothing here.
func TestHoldersFromAPI(t *testing.T) {
	held := claim("u1", "held", "gpu-1")
	held.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p1", UID: "pu1"}}
	otherNode := claim("u2", "elsewhere", "gpu-1")
	otherNode.Status.Allocation.Devices.Results[0].Pool = "node-b"
	pending := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pending", UID: "u3"}}
	cs := newFake(held, otherNode, pending)
	d := newDriver(t, cs, "", t.TempDir())
	got, err := d.Holders(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []Holder{{Namespace: "ns", Claim: "held", Pods: []string{"p1"}, Devices: []string{"gpu-1"}, UUIDs: []string{"GPU-b"}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("holders (-want +got):\n%s", diff)
	}
}

// TestWithdraw: withdrawing by GPU UUID takes all its devices off the
// slice; Advertise brings them back.
func TestWithdraw(t *testing.T) {
	cs := newFake()
	d := newDriver(t, cs, "", t.TempDir())
	ctx := context.Background()
	if err := d.Withdraw(ctx, []string{"GPU-a"}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"gpu-1"}, names(slicesOf(t, cs)[0].Spec.Devices)); diff != "" {
		t.Errorf("after withdrawing GPU-a (-want +got):\n%s", diff)
	}
	if err := d.Update(ctx, expand(t, testGPUs(), nil)); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"gpu-0-mig-1g10gb-19-2", "gpu-0-mig-1g10gb-19-3", "gpu-1"}, names(slicesOf(t, cs)[0].Spec.Devices)); diff != "" {
		t.Errorf("after Update (-want +got):\n%s", diff)
	}
}

// TestSweepAtStart: a CDI spec no prepared claim owns is removed when the
// driver starts; other files in the directory are left.
func TestSweepAtStart(t *testing.T) {
	cdi := t.TempDir()
	for _, f := range []string{"gpu.carve.dev_claim_stale.json", "nvidia.yaml"} {
		if err := os.WriteFile(filepath.Join(cdi, f), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := New(Config{Client: clientset.Wrap(newFake()), NodeName: node, CDIDir: cdi}); err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(filepath.Join(cdi, "*"))
	if diff := cmp.Diff([]string{filepath.Join(cdi, "nvidia.yaml")}, left); diff != "" {
		t.Errorf("left (-want +got):\n%s", diff)
	}
}

// simGPUs opens a simulated machine and reads its GPUs.
func simGPUs(t *testing.T, spec string) (*sim.Machine, []partition.GPU) {
	t.Helper()
	m, err := sim.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Init(); err != nil {
		t.Fatal(err)
	}
	gpus, err := partition.ReadInventory(m)
	if err != nil {
		t.Fatal(err)
	}
	return m, gpus
}

// TestHoldersBeforeAdvertise: a restarted agent checks claims before it
// first advertises; the driver reads the GPUs to know the devices claims
// name, so a held device is not taken for free.
func TestHoldersBeforeAdvertise(t *testing.T) {
	m, gpus := simGPUs(t, "h100-80gb")
	held := claim("u1", "held", "gpu-0")
	for _, lib := range []partition.NVML{nil, m} {
		d, err := New(Config{Client: clientset.Wrap(newFake(held)), NodeName: node, CDIDir: t.TempDir(), GPUs: lib})
		if err != nil {
			t.Fatal(err)
		}
		got, err := d.Holders(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var want []Holder
		if lib != nil {
			want = []Holder{{Namespace: "ns", Claim: "held", Devices: []string{"gpu-0"}, UUIDs: []string{gpus[0].UUID}}}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("GPUs %v: holders (-want +got):\n%s", lib != nil, diff)
		}
	}
}

// TestKeepPublished: a slice someone deleted (the kubelet does at its
// start) is written again within the republish interval.
func TestKeepPublished(t *testing.T) {
	cs := newFake()
	d := newDriver(t, cs, "", t.TempDir())
	d.cfg.RepublishInterval = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	name := slicesOf(t, cs)[0].Name
	if err := cs.ResourceV1().ResourceSlices().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { d.keepPublished(ctx); close(done) }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if got := slicesOf(t, cs); len(got) == 1 && len(got[0].Spec.Devices) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the deleted slice was not published again")
		}
	}
	cancel()
	<-done
}
