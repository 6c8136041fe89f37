package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/dra"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/test/harness"
)

// hybridProfiles: GPU 0 static (seven 1g.10gb), GPU 1 dynamic offering
// 1g.10gb and 3g.40gb; and the static profile to go back to.
const hybridProfiles = `version: v1
defaultProfile: hybrid
profiles:
  static:
    - gpus: all
      mig: {1g.10gb: 7}
  hybrid:
    - gpus: [0]
      mig: {1g.10gb: 7}
    - gpus: [1]
      dynamic: {profiles: [1g.10gb, 3g.40gb]}
drain:
  policy: evict
  timeout: 10m
`

// poolDevices lists the devices of the node's pool, over all its slices.
func (e *draEnv) poolDevices() []string {
	e.t.Helper()
	l, err := e.cs.ResourceV1().ResourceSlices().List(e.ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + dra.DriverName})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, s := range l.Items {
		for _, d := range s.Spec.Devices {
			out = append(out, d.Name)
		}
	}
	slices.Sort(out)
	return out
}

// gpuInstances lists a simulated GPU's complete instances as
// "profile@placement" with their MIG UUIDs.
func gpuInstances(t *testing.T, m partition.NVML, index int) map[string]string {
	t.Helper()
	gpus, err := partition.ReadInventory(m)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, in := range gpus[index].Instances {
		out[in.Profile+"@"+in.Placement.String()] = in.UUID()
	}
	return out
}

// TestDynamicClaims: on a hybrid node (GPU 0 static, GPU 1 dynamic) claims
// for a 3g.40gb and a 1g.10gb get MIG devices made on GPU 1 at
// non-overlapping placements, in the published order;
// each pod sees exactly its device through CDI, and the simulator holds
// exactly those instances; a claim that cannot fit stays pending; the
// static GPU is never touched; deleting the pods and claims destroys the
// devices; then a change back to the static profile while a claim's pod
// holds a dynamic device evicts it (drain policy evict) before GPU 1 is
// repartitioned.
func TestDynamicClaims(t *testing.T) {
	c := suite.Cluster(t)
	freshNode(t, c)
	e := &draEnv{t: t, ctx: testCtx(t, 12*time.Minute), c: c, cs: c.Clientset(), m: newSim(t, "h100-80gb*2"), state: t.TempDir()}
	e.create(anySlice(draClasses())...)
	e.agent = e.agentClient()
	if err := harness.ApplyProfiles(e.ctx, e.cs, deployNS, profilesCM, hybridProfiles); err != nil {
		t.Fatal(err)
	}
	e.startAgent()
	waitState(e.ctx, t, c, carvev1.StateSuccess, "hybrid")
	if err := harness.Poll(e.ctx, time.Minute, func(context.Context) (bool, error) {
		return slices.Contains(e.poolDevices(), "gpu-1-dyn-3g40gb-4"), nil
	}); err != nil {
		t.Fatalf("the pool never offered GPU 1's dynamic devices: %v", e.poolDevices())
	}
	e.m.ResetOpLog()

	onGPU1 := `device.attributes["gpu.carve.dev"].index == 1 && device.attributes["gpu.carve.dev"].profile == `
	e.create(draClaim("dyn-big", "mig.carve.dev", onGPU1+`"3g.40gb"`, 1, false), claimPod("dyn-big", "dyn-big", 20*time.Second),
		draClaim("dyn-small", "mig.carve.dev", onGPU1+`"1g.10gb"`, 1, false), claimPod("dyn-small", "dyn-small", 20*time.Second))
	waitHolds(e.ctx, t, c, "dyn-big")
	waitHolds(e.ctx, t, c, "dyn-small")
	// The 3g.40gb takes 4:4, first in the published order (0:4 is kept for
	// larger profiles where they are offered); the 1g.10gb a free slice of
	// the other half, whichever claim the scheduler took first.
	made := gpuInstances(t, e.m, 1)
	small := ""
	for k := range made {
		if strings.HasPrefix(k, "1g.10gb@") {
			small = k
		}
	}
	if len(made) != 2 || made["3g.40gb@4:4"] == "" || small == "" || small >= "1g.10gb@4" {
		t.Fatalf("GPU 1 holds %v, want exactly a 3g.40gb at 4:4 and a 1g.10gb beside it, in slices 0-3", made)
	}
	// Two more 3g.40gb cannot fit beside the one at 4:4: pending, not an error.
	e.create(draClaim("dyn-nofit", "mig.carve.dev", onGPU1+`"3g.40gb"`, 2, false), claimPod("dyn-nofit", "dyn-nofit", 0))
	e.waitUnschedulable("dyn-nofit")
	if got := e.message("dyn-big"); got != made["3g.40gb@4:4"] {
		t.Errorf("pod dyn-big saw %q, want its MIG device %s", got, made["3g.40gb@4:4"])
	}
	if got := e.message("dyn-small"); got != made[small] {
		t.Errorf("pod dyn-small saw %q, want its MIG device %s", got, made[small])
	}
	for _, name := range []string{"dyn-big", "dyn-small", "dyn-nofit"} {
		if err := harness.DeletePod(e.ctx, e.cs, metav1.NamespaceDefault, name); err != nil {
			t.Fatal(err)
		}
		if err := e.cs.ResourceV1().ResourceClaims(metav1.NamespaceDefault).Delete(e.ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := harness.Poll(e.ctx, 2*time.Minute, func(context.Context) (bool, error) { return len(gpuInstances(t, e.m, 1)) == 0, nil }); err != nil {
		t.Fatalf("GPU 1 still holds %v after the claims were deleted", gpuInstances(t, e.m, 1))
	}
	e.waitNoSpecs()
	for _, op := range e.m.OpLog() {
		if op.GPU != 1 {
			t.Errorf("claim activity touched the static GPU %d: %s", op.GPU, op)
		}
	}

	// Back to static while a claim holds a dynamic device: evicted first.
	e.create(draClaim("dyn-held", "mig.carve.dev", onGPU1+`"3g.40gb"`, 1, false), claimPod("dyn-held", "dyn-held", 10*time.Minute))
	waitHolds(e.ctx, t, c, "dyn-held")
	setProfileLabel(e.ctx, t, c, "static")
	if err := harness.WaitPodGone(e.ctx, e.cs, metav1.NamespaceDefault, "dyn-held", 2*time.Minute); err != nil {
		t.Fatalf("the pod holding a dynamic device of the GPU turning static was not evicted: %v", err)
	}
	waitState(e.ctx, t, c, carvev1.StateSuccess, "static")
	if got := gpuInstances(t, e.m, 1); len(got) != 7 || got["1g.10gb@0:1"] == "" {
		t.Errorf("GPU 1 after turning static holds %v, want seven 1g.10gb", got)
	}
	if devs := e.poolDevices(); slices.ContainsFunc(devs, func(n string) bool { return strings.Contains(n, "-dyn-") }) {
		t.Errorf("the pool still offers dynamic devices: %v", devs)
	}
	if phase := harness.PodPhase(e.ctx, e.cs, metav1.NamespaceDefault, "dyn-held"); phase == corev1.PodRunning {
		t.Errorf("pod dyn-held is %s", phase)
	}
}
