package e2e

import (
	"context"
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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	"github.com/carve-dev/carve/agent"
	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/dra"
	"github.com/carve-dev/carve/kubeclient"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/test/cluster"
	"github.com/carve-dev/carve/test/harness"
)

const draProfiles = `version: v1
defaultProfile: small
profiles:
  small:
    - gpus: [0]
      mig: {1g.10gb: 7}
    - gpus: [1]
      timeSlicing: {replicas: 2}
  whole:
    - gpus: all
drain:
  policy: evict
  timeout: 10m
`

// draClasses are the DeviceClasses the test needs: carve's two, and one
// that serves the extended resource nvidia.com/mig-1g.10gb through DRA.
func draClasses() []*resourceapi.DeviceClass {
	class := func(name, cel, ext string) *resourceapi.DeviceClass {
		c := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: cel}}}}}
		if ext != "" {
			c.Spec.ExtendedResourceName = new(ext)
		}
		return c
	}
	typ := `device.driver == "gpu.carve.dev" && device.attributes["gpu.carve.dev"].type == `
	return []*resourceapi.DeviceClass{
		class("gpu.carve.dev", typ+`"gpu"`, ""),
		class("mig.carve.dev", typ+`"mig"`, ""),
		class("mig-1g.10gb.carve.dev", typ+`"mig" && device.attributes["gpu.carve.dev"].profile == "1g.10gb"`, mig1g),
	}
}

// draClaim is a claim of n devices of a class, all on one GPU when
// sameGPU, with an optional CEL selector.
func draClaim(name, class, cel string, n int64, sameGPU bool) *resourceapi.ResourceClaim {
	req := resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: n}}
	if cel != "" {
		req.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: cel}}}
	}
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{req}}}}
	if sameGPU {
		c.Spec.Devices.Constraints = []resourceapi.DeviceConstraint{{MatchAttribute: new(resourceapi.FullyQualifiedName("gpu.carve.dev/parentUUID"))}}
	}
	return c
}

// claimPod is a pod whose container takes the claim and reports
// NVIDIA_VISIBLE_DEVICES, after hold.
func claimPod(name, claim string, hold time.Duration) *corev1.Pod {
	p := harness.ResourcePod(name, nil, hold)
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimName: new(claim)}}
	p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpus"}}
	return p
}

// draEnv holds what the DRA test's steps share.
type draEnv struct {
	t     *testing.T
	ctx   context.Context
	c     *cluster.Cluster
	cs    kubernetes.Interface
	m     *sim.Machine
	state string
	// agent is the agent's client: the carve-agent ServiceAccount's token
	// (agentClient).
	agent kubernetes.Interface
	// agentKube is the same identity through the client carve-agent
	// builds, for the agent the test runs.
	agentKube kubeclient.Interface
}

func (e *draEnv) create(objs ...any) {
	e.t.Helper()
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case *resourceapi.DeviceClass:
			_, err = e.cs.ResourceV1().DeviceClasses().Create(e.ctx, o, metav1.CreateOptions{})
			e.t.Cleanup(func() {
				_ = e.cs.ResourceV1().DeviceClasses().Delete(context.Background(), o.Name, metav1.DeleteOptions{})
			})
		case *resourceapi.ResourceClaim:
			_, err = e.cs.ResourceV1().ResourceClaims(o.Namespace).Create(e.ctx, o, metav1.CreateOptions{})
			e.t.Cleanup(func() {
				_ = e.cs.ResourceV1().ResourceClaims(o.Namespace).Delete(context.Background(), o.Name, metav1.DeleteOptions{})
			})
		case *corev1.Pod:
			_, err = e.cs.CoreV1().Pods(o.Namespace).Create(e.ctx, o, metav1.CreateOptions{})
			e.t.Cleanup(func() { _ = harness.DeletePod(context.Background(), e.cs, o.Namespace, o.Name) })
		}
		if err != nil {
			e.t.Fatal(err)
		}
	}
}

// slice returns the node's ResourceSlice of carve's driver (exactly one).
func (e *draEnv) slice() resourceapi.ResourceSlice {
	e.t.Helper()
	l, err := e.cs.ResourceV1().ResourceSlices().List(e.ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + dra.DriverName})
	if err != nil {
		e.t.Fatal(err)
	}
	if len(l.Items) != 1 {
		e.t.Fatalf("%d ResourceSlices of %s, want 1", len(l.Items), dra.DriverName)
	}
	return l.Items[0]
}

// simDevices returns the DRA devices of the simulator as it is, by name,
// with their UUIDs.
func (e *draEnv) simDevices() map[string]string {
	e.t.Helper()
	gpus, err := partition.ReadInventory(e.m)
	if err != nil {
		e.t.Fatal(err)
	}
	devs, err := dra.Devices(gpus)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range devs {
		out[d.Name] = *d.Attributes[dra.AttrUUID].StringValue
	}
	return out
}

// waitSlice waits until the slice lists exactly the simulator's devices,
// with a generation above after, and returns it.
func (e *draEnv) waitSlice(after int64) resourceapi.ResourceSlice {
	e.t.Helper()
	var got resourceapi.ResourceSlice
	var want []string
	err := harness.Poll(e.ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		l, err := e.cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + dra.DriverName})
		if err != nil || len(l.Items) != 1 {
			return false, nil //nolint:nilerr // the slice may be gone a while
		}
		got = l.Items[0]
		want = sortedKeys(e.simDevices())
		var names []string
		for _, d := range got.Spec.Devices {
			names = append(names, d.Name)
		}
		slices.Sort(names)
		return slices.Equal(want, names) && got.Spec.Pool.Generation > after, nil
	})
	if err != nil {
		e.t.Fatalf("slice %+v never listed exactly %v with a generation above %d: %v", got.Spec, want, after, err)
	}
	return got
}

func sortedKeys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// message waits for the pod to end and returns what it reported.
func (e *draEnv) message(pod string) string {
	e.t.Helper()
	msg, err := harness.PodMessage(e.ctx, e.cs, metav1.NamespaceDefault, pod, 2*time.Minute)
	if err != nil {
		e.t.Fatalf("pod %s: %v\nkubelet log:\n%s", pod, err, e.c.LogTail("kubelet", 30))
	}
	return msg
}

// specs returns the CDI spec files of carve's claims.
func (e *draEnv) specs() []string {
	e.t.Helper()
	got, err := filepath.Glob(filepath.Join(e.c.CDIDir(), dra.DriverName+"_claim_*.json"))
	if err != nil {
		e.t.Fatal(err)
	}
	return got
}

// waitNoSpecs waits until no CDI spec of carve's is left.
func (e *draEnv) waitNoSpecs() {
	e.t.Helper()
	if err := harness.Poll(e.ctx, time.Minute, func(context.Context) (bool, error) { return len(e.specs()) == 0, nil }); err != nil {
		e.t.Fatalf("CDI specs left: %v", e.specs())
	}
}

// agentClient creates the carve-agent ServiceAccount and everything that
// configs/deploy/dra grants it (Namespace, Role, ClusterRole, bindings and
// both admission policies; not the DaemonSet, Service or DeviceClasses),
// deleted when the test ends, and returns a client with a token of the
// ServiceAccount bound to a pod on the node, as the DaemonSet's pod has:
// the agent then runs with exactly the permissions carve ships.
func (e *draEnv) agentClient() kubernetes.Interface {
	e.t.Helper()
	var objs []*unstructured.Unstructured
	for _, o := range renderKustomize(e.t, draDeployDir) {
		switch o.GetKind() {
		case "DaemonSet", "Service", "DeviceClass": // the agent runs in this process; the test makes its classes
		default:
			objs = append(objs, o)
		}
	}
	createDeploy(e.ctx, e.t, e.c, objs)
	node := e.c.NodeName()
	waitAllowed(e.ctx, e.t, e.cs, agentNeeds(node)[3])
	waitAllowed(e.ctx, e.t, e.cs, draNeeds()[4])
	pod := createTokenPod(e.ctx, e.t, e.cs, node)
	token := requestToken(e.ctx, e.t, e.cs, pod)
	client := tokenClient(e.t, e.c, token)
	e.agentKube = tokenAgentClient(e.t, e.c, token)
	waitPolicyInForce(e.ctx, e.t, client, node)
	other := "other-node"
	waitSlicePolicyInForce(e.ctx, e.t, client, &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "carve-e2e-dra-x"},
		Spec: resourceapi.ResourceSliceSpec{Driver: dra.DriverName, NodeName: &other,
			Pool: resourceapi.ResourcePool{Name: other, Generation: 1, ResourceSliceCount: 1}, Devices: []resourceapi.Device{{Name: "gpu-0"}}},
	})
	return client
}

// startAgent starts the agent as the carve-agent ServiceAccount, reading
// its profiles from the ConfigMap in configs/deploy's namespace, where its
// Role lets it.
func (e *draEnv) startAgent() *agentRun {
	return startAgent(e.t, e.c, e.m, func(cfg *agent.Config) {
		cfg.Client, cfg.ConfigMapNamespace, cfg.ConfigMapName = e.agentKube, deployNS, profilesCM
		cfg.Advertise, cfg.KubeletRootDir, cfg.CDIDir, cfg.StateDir = agent.AdvertiseDRA, e.c.KubeletRootDir(), e.c.CDIDir(), e.state
	})
}

// TestDRA runs carve as a DRA driver on the local cluster, as the
// carve-agent ServiceAccount with the RBAC and admission policies of
// configs/deploy/dra (a token bound to a pod on the node): the slice lists
// exactly the simulator's devices; claims by profile, for two devices on
// one GPU, and through an extended resource name run and see their UUIDs;
// the CDI spec goes when the pod is done; an agent restart keeps a
// prepared claim; a profile change with an allocated claim evicts its pod,
// repartitions, republishes with a higher generation, and leaves no spec.
func TestDRA(t *testing.T) {
	c := suite.Cluster(t)
	freshNode(t, c)
	e := &draEnv{t: t, ctx: testCtx(t, 15*time.Minute), c: c, cs: c.Clientset(), m: newSim(t, "h100-80gb*2"), state: t.TempDir()}
	e.create(anySlice(draClasses())...)
	e.agent = e.agentClient()
	if err := harness.ApplyProfiles(e.ctx, e.cs, deployNS, profilesCM, draProfiles); err != nil {
		t.Fatal(err)
	}
	r := e.startAgent()
	waitState(e.ctx, t, c, carvev1.StateSuccess, "small")
	s := e.waitSlice(0)
	for _, d := range s.Spec.Devices {
		replicas := d.Capacity[dra.CapReplicas].Value
		if d.Name == "gpu-1" && (d.AllowMultipleAllocations == nil || replicas.Value() != 2) {
			t.Errorf("gpu-1 is not shared by 2: %+v", d)
		}
	}

	// A MIG device by profile.
	e.create(draClaim("one", "mig.carve.dev", `device.attributes["gpu.carve.dev"].profile == "1g.10gb"`, 1, false), claimPod("dra-one", "one", 0))
	// The claim is deallocated once its pod is done, so the pod's report
	// is checked against the node's MIG devices (all on GPU 0 here).
	migs := migUUIDs(t, e.m)
	if got := e.message("dra-one"); !slices.Contains(migs, got) {
		t.Errorf("pod dra-one saw %q, want one of the MIG devices %v", got, migs)
	}
	// Two MIG devices on one GPU.
	e.create(draClaim("pair", "mig.carve.dev", "", 2, true), claimPod("dra-pair", "pair", 0))
	if got := strings.Split(e.message("dra-pair"), ","); len(got) != 2 || got[0] == got[1] || !slices.Contains(migs, got[0]) || !slices.Contains(migs, got[1]) {
		t.Errorf("pod dra-pair saw %q, want two MIG devices of GPU 0", got)
	}
	// The extended resource name, served through DRA.
	e.create(harness.DevicePod("dra-ext", mig1g, 1, 0))
	if got := e.message("dra-ext"); !slices.Contains(migs, got) {
		t.Errorf("pod dra-ext asking %s saw %q, want one MIG device", mig1g, got)
	}
	for _, pod := range []string{"dra-one", "dra-pair", "dra-ext"} {
		if err := harness.DeletePod(e.ctx, e.cs, metav1.NamespaceDefault, pod); err != nil {
			t.Fatal(err)
		}
	}
	e.waitNoSpecs()

	// A claim held across an agent restart, then drained by a profile change.
	e.create(draClaim("held", "mig.carve.dev", "", 1, false), claimPod("dra-held", "held", 10*time.Minute))
	waitHolds(e.ctx, t, c, "dra-held")
	heldSpecs := e.specs()
	r.stop(t)
	data, err := os.ReadFile(filepath.Join(e.state, "dra-claims.json"))
	if err != nil || !strings.Contains(string(data), `"name": "held"`) {
		t.Fatalf("record of prepared claims after the agent stopped: %s, %v", data, err)
	}
	e.startAgent()
	waitState(e.ctx, t, c, carvev1.StateSuccess, "small")
	if diff := cmp.Diff(heldSpecs, e.specs()); diff != "" || harness.PodPhase(e.ctx, e.cs, metav1.NamespaceDefault, "dra-held") != corev1.PodRunning {
		t.Fatalf("after the restart: pod %s, CDI specs (-before +after):\n%s", harness.PodPhase(e.ctx, e.cs, metav1.NamespaceDefault, "dra-held"), diff)
	}
	// The kubelet deletes its node's slices when it starts; the agent
	// writes its slice again.
	if err := c.RestartKubelet(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.waitSlice(0)
	if phase := harness.PodPhase(e.ctx, e.cs, metav1.NamespaceDefault, "dra-held"); phase != corev1.PodRunning {
		t.Fatalf("pod dra-held is %s after the kubelet restarted", phase)
	}
	gen := e.slice().Spec.Pool.Generation
	setProfileLabel(e.ctx, t, c, "whole")
	if err := harness.WaitPodGone(e.ctx, e.cs, metav1.NamespaceDefault, "dra-held", 2*time.Minute); err != nil {
		n, _ := e.cs.CoreV1().Nodes().Get(e.ctx, c.NodeName(), metav1.GetOptions{})
		evs, _ := e.cs.CoreV1().Events("").List(e.ctx, metav1.ListOptions{})
		var msgs []string
		for _, ev := range evs.Items {
			msgs = append(msgs, ev.Reason+": "+ev.Message)
		}
		t.Fatalf("the claim's pod was not evicted: %v\nnode record: %s\nevents:\n%s", err, n.Annotations[carvev1.AnnotationRecord], strings.Join(msgs, "\n"))
	}
	waitState(e.ctx, t, c, carvev1.StateSuccess, "whole")
	s = e.waitSlice(gen)
	if diff := cmp.Diff([]string{"gpu-0", "gpu-1"}, sortedKeys(e.simDevices())); diff != "" {
		t.Errorf("devices after the change (-want +got):\n%s", diff)
	}
	e.waitNoSpecs()
	t.Logf("slice generation %d -> %d", gen, s.Spec.Pool.Generation)
}

func anySlice[T any](in []T) []any {
	out := make([]any, len(in))
	for i := range in {
		out[i] = in[i]
	}
	return out
}
