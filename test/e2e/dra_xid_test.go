package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/carve-dev/carve/agent"
	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/dra"
	"github.com/carve-dev/carve/test/harness"
	"github.com/carve-dev/carve/xidpolicy"
)

// draWholeProfiles gives the node its GPUs whole.
const draWholeProfiles = `version: v1
defaultProfile: whole
profiles:
  whole:
    - gpus: all
`

// TestDRAXIDTaints runs carve as the DRA driver with critical XIDs tainting
// NoExecute, and checks from the cluster's side what a taint does: a
// critical XID on the GPU a running pod's claim holds gets that pod
// evicted by Kubernetes' device taint eviction; a new claim is given the
// other GPU; and with that one taken too, a third claim's pod cannot be
// scheduled, as the only free device is tainted.
func TestDRAXIDTaints(t *testing.T) {
	c := suite.Cluster(t)
	freshNode(t, c)
	e := &draEnv{t: t, ctx: testCtx(t, 10*time.Minute), c: c, cs: c.Clientset(), m: newSim(t, "h100-80gb*2"), state: t.TempDir()}
	e.create(anySlice(draClasses())...)
	e.agent = e.agentClient()
	if err := harness.ApplyProfiles(e.ctx, e.cs, deployNS, profilesCM, draWholeProfiles); err != nil {
		t.Fatal(err)
	}
	policy := xidpolicy.Default()
	policy.CriticalTaint = xidpolicy.NoExecute
	startAgent(t, c, e.m, func(cfg *agent.Config) {
		cfg.Client, cfg.ConfigMapNamespace, cfg.ConfigMapName = e.agentKube, deployNS, profilesCM
		cfg.Advertise, cfg.KubeletRootDir, cfg.CDIDir, cfg.StateDir = agent.AdvertiseDRA, c.KubeletRootDir(), c.CDIDir(), e.state
		cfg.XIDPolicy = policy
	})
	waitState(e.ctx, t, c, carvev1.StateSuccess, "whole")
	e.waitSlice(0)

	e.create(draClaim("xid-a", "gpu.carve.dev", "", 1, false), claimPod("dra-xid-a", "xid-a", 10*time.Minute))
	waitHolds(e.ctx, t, c, "dra-xid-a")
	held := e.allocated("xid-a")
	gpu, err := strconv.Atoi(strings.TrimPrefix(held, "gpu-"))
	if err != nil {
		t.Fatalf("claim xid-a got device %q, want gpu-N", held)
	}
	if err := e.m.RaiseXID(gpu, 79, -1, -1); err != nil {
		t.Fatal(err)
	}
	if err := harness.Poll(e.ctx, time.Minute, func(context.Context) (bool, error) {
		for _, d := range e.slice().Spec.Devices {
			for _, tn := range d.Taints {
				if d.Name == held && tn.Key == dra.TaintXID && tn.Value == "79" && string(tn.Effect) == "NoExecute" {
					return true, nil
				}
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("device %s never carried the XID taint: %+v", held, e.slice().Spec.Devices)
	}
	if err := harness.WaitPodGone(e.ctx, e.cs, metav1.NamespaceDefault, "dra-xid-a", 2*time.Minute); err != nil {
		t.Fatalf("the pod on the tainted device was not evicted: %v (phase %s)", err, harness.PodPhase(e.ctx, e.cs, metav1.NamespaceDefault, "dra-xid-a"))
	}

	e.create(draClaim("xid-b", "gpu.carve.dev", "", 1, false), claimPod("dra-xid-b", "xid-b", 10*time.Minute))
	waitHolds(e.ctx, t, c, "dra-xid-b")
	if got := e.allocated("xid-b"); got == held {
		t.Fatalf("claim xid-b got the tainted device %s", got)
	}
	e.create(draClaim("xid-c", "gpu.carve.dev", "", 1, false), claimPod("dra-xid-c", "xid-c", 0))
	if err := harness.Poll(e.ctx, time.Minute, func(ctx context.Context) (bool, error) {
		p, err := e.cs.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, "dra-xid-c", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("pod dra-xid-c was not held back (phase %s): %v", harness.PodPhase(e.ctx, e.cs, metav1.NamespaceDefault, "dra-xid-c"), err)
	}
	for _, pod := range []string{"dra-xid-b", "dra-xid-c"} {
		if err := harness.DeletePod(e.ctx, e.cs, metav1.NamespaceDefault, pod); err != nil {
			t.Fatal(err)
		}
	}
}

// allocated waits until the claim is allocated and returns its device.
func (e *draEnv) allocated(claim string) string {
	e.t.Helper()
	var dev string
	err := harness.Poll(e.ctx, time.Minute, func(ctx context.Context) (bool, error) {
		c, err := e.cs.ResourceV1().ResourceClaims(metav1.NamespaceDefault).Get(ctx, claim, metav1.GetOptions{})
		if err != nil || c.Status.Allocation == nil || len(c.Status.Allocation.Devices.Results) == 0 {
			return false, nil //nolint:nilerr // not yet
		}
		dev = c.Status.Allocation.Devices.Results[0].Device
		return true, nil
	})
	if err != nil {
		e.t.Fatalf("claim %s never allocated: %v", claim, err)
	}
	return dev
}
