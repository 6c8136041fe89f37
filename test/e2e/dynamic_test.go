package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/test/harness"
)

// dynamicProfiles has a static profile and a hybrid one whose GPU 1 is
// dynamic (on-demand MIG).
const dynamicProfiles = `version: v1
defaultProfile: static
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

// TestDynamicNeedsDRA: an agent serving the device plugin, given a profile
// with a dynamic GPU, reports it unrealisable (state failed, an Event that
// names the GPU and the flag) and touches no GPU: the MIG devices stay
// allocatable.
func TestDynamicNeedsDRA(t *testing.T) {
	c := suite.Cluster(t)
	cs := c.Clientset()
	ctx := testCtx(t, 8*time.Minute)
	freshNode(t, c)
	m := newSim(t, "h100-80gb*2")
	applyProfiles(ctx, t, c, dynamicProfiles)
	startAgent(t, c, m, nil)
	waitState(ctx, t, c, carvev1.StateSuccess, "static")
	waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{mig1g: 14})
	m.ResetOpLog()

	since := time.Now()
	setProfileLabel(ctx, t, c, "hybrid")
	waitState(ctx, t, c, carvev1.StateFailed, "static")
	waitEvent(ctx, t, c, carvev1.ReasonUnrealisable,
		"profile hybrid cannot be realised on this node, GPUs left as they are: GPU 1 is dynamic (MIG devices made on demand for DRA claims), which needs carve-agent --advertise dra; this agent runs --advertise device-plugin", since)
	if ops := m.OpLog(); len(ops) != 0 {
		t.Errorf("MIG operations %v, want none", ops)
	}
	waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{mig1g: 14})
}

// TestDynamicUnderDRA: with --advertise dra, a GPU turning dynamic while a
// claim's pod holds one of its MIG devices has the pod evicted (drain
// policy evict), then its instances destroyed: it is left in MIG mode
// with no instances, and the pool offers the other GPU's MIG devices and
// the dynamic GPU's devices made on demand.
func TestDynamicUnderDRA(t *testing.T) {
	c := suite.Cluster(t)
	freshNode(t, c)
	e := &draEnv{t: t, ctx: testCtx(t, 10*time.Minute), c: c, cs: c.Clientset(), m: newSim(t, "h100-80gb*2"), state: t.TempDir()}
	e.create(anySlice(draClasses())...)
	e.agent = e.agentClient()
	if err := harness.ApplyProfiles(e.ctx, e.cs, deployNS, profilesCM, dynamicProfiles); err != nil {
		t.Fatal(err)
	}
	e.startAgent()
	waitState(e.ctx, t, c, carvev1.StateSuccess, "static")
	e.waitSlice(0)

	e.create(draClaim("on-gpu1", "mig.carve.dev", `device.attributes["gpu.carve.dev"].index == 1`, 1, false), claimPod("dyn-held", "on-gpu1", 10*time.Minute))
	waitHolds(e.ctx, t, c, "dyn-held")
	setProfileLabel(e.ctx, t, c, "hybrid")
	if err := harness.WaitPodGone(e.ctx, e.cs, metav1.NamespaceDefault, "dyn-held", 2*time.Minute); err != nil {
		t.Fatalf("the claim's pod on the GPU turning dynamic was not evicted: %v", err)
	}
	waitState(e.ctx, t, c, carvev1.StateSuccess, "hybrid")

	gpus, err := partition.ReadInventory(e.m)
	if err != nil {
		t.Fatal(err)
	}
	if g := gpus[1]; g.MIGMode != partition.MIGEnabled || len(g.Instances) != 0 {
		t.Errorf("GPU 1 after turning dynamic: MIG %s with %d instances, want enabled with none", g.MIGMode, len(g.Instances))
	}
	if g := gpus[0]; len(g.Instances) != 7 {
		t.Errorf("GPU 0 (static) has %d instances, want 7", len(g.Instances))
	}
	// GPU 0's seven MIG devices, and GPU 1's devices made on demand (1g.10gb
	// at 7 placements, 3g.40gb at 2), in the pool's slices.
	var static, dynamic int
	err = harness.Poll(e.ctx, time.Minute, func(context.Context) (bool, error) {
		static, dynamic = 0, 0
		for _, n := range e.poolDevices() {
			switch {
			case strings.HasPrefix(n, "gpu-0-mig-"):
				static++
			case strings.HasPrefix(n, "gpu-1-dyn-"):
				dynamic++
			}
		}
		return static == 7 && dynamic == 9, nil
	})
	if err != nil {
		t.Errorf("pool devices %v: %d static of GPU 0 and %d dynamic of GPU 1, want 7 and 9", e.poolDevices(), static, dynamic)
	}
	e.waitNoSpecs()
}
