package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/dra"
	"github.com/carve-dev/carve/test/cluster"
	"github.com/carve-dev/carve/test/harness"
)

const driverProfiles = `version: v1
defaultProfile: small
profiles:
  small:
    - gpus: all
      mig: {1g.10gb: 7}
`

// upgradeState sets the driver upgrade state label, as the GPU Operator's
// upgrade controller does ("" removes it).
func upgradeState(ctx context.Context, t *testing.T, c *cluster.Cluster, state string) {
	t.Helper()
	if err := harness.SetNodeLabels(ctx, c.Clientset(), c.NodeName(), map[string]string{carvev1.LabelDriverUpgrade: state}); err != nil {
		t.Fatal(err)
	}
}

// TestDriverUpgrade: a stand-in of NVIDIA's driver upgrade controller
// moves the node through its label states, and the simulated driver is
// unloaded and loaded again in the middle, as the driver pod does. Seen
// from outside: the agent keeps serving until the GPU pods are to go, then
// advertises nothing and says driver-upgrade; the unload succeeds (the
// simulated driver refuses it while any handle is open); the agent waits
// while the label says the upgrade is over but the driver is not back;
// once it is, the MIG layout the reload lost is realised again and
// advertised.
func TestDriverUpgrade(t *testing.T) {
	c := suite.Cluster(t)
	cs := c.Clientset()
	ctx := testCtx(t, 10*time.Minute)
	freshNode(t, c)
	m := newSim(t, "h100-80gb*2")
	applyProfiles(ctx, t, c, driverProfiles)
	r := startAgent(t, c, m, nil)
	waitState(ctx, t, c, carvev1.StateSuccess, "small")
	waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{mig1g: 14})
	before := migUUIDs(t, m)

	for _, s := range []string{carvev1.DriverUpgradeRequired, carvev1.DriverCordonRequired, carvev1.DriverWaitForJobsRequired} {
		upgradeState(ctx, t, c, s)
	}
	time.Sleep(2 * time.Second) // passes on the states before the pods go
	waitState(ctx, t, c, carvev1.StateSuccess, "small")
	waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{mig1g: 14})

	since := time.Now()
	upgradeState(ctx, t, c, carvev1.DriverPodDeletionRequired)
	waitState(ctx, t, c, carvev1.StateDriverUpgrade, "small")
	waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{})
	waitEvent(ctx, t, c, carvev1.ReasonDriverUpgrade, "carve closed its GPU handles", since)
	upgradeState(ctx, t, c, carvev1.DriverDrainRequired)
	upgradeState(ctx, t, c, carvev1.DriverPodRestartRequired)
	waitRecord(ctx, t, c, "waits for the upgrade", func(rec carvev1.NodeRecord) bool {
		return rec.State == carvev1.StateDriverUpgrade && strings.Contains(rec.Waiting, carvev1.DriverPodRestartRequired)
	})

	// The driver pod unloads the old driver: refused were a handle open.
	if err := m.UnloadDriver(); err != nil {
		t.Fatalf("driver unload with the node in %s: %v", carvev1.StateDriverUpgrade, err)
	}
	since = time.Now()
	upgradeState(ctx, t, c, carvev1.DriverValidationRequired) // too early: the new driver is not loaded yet
	waitEvent(ctx, t, c, carvev1.ReasonDriverNotLoaded, "driver not loaded", since)
	waitRecord(ctx, t, c, "waits for the driver", func(rec carvev1.NodeRecord) bool {
		return rec.State == carvev1.StateDriverUpgrade && rec.Waiting == "the GPU driver to load"
	})
	waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{})

	since = time.Now()
	m.ResetOpLog()
	if err := m.LoadDriver(); err != nil { // every MIG instance is gone, as after a reboot
		t.Fatal(err)
	}
	waitEvent(ctx, t, c, carvev1.ReasonDriverBack, "realises the profile in force again", since)
	waitState(ctx, t, c, carvev1.StateSuccess, "small")
	waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{mig1g: 14})
	if after := migUUIDs(t, m); len(after) != len(before) {
		t.Errorf("MIG devices after the upgrade: %d, want %d", len(after), len(before))
	}
	if len(m.OpLog()) == 0 {
		t.Error("no MIG operation after the driver reload: the layout was not realised again")
	}
	upgradeState(ctx, t, c, carvev1.DriverUncordonRequired)
	upgradeState(ctx, t, c, carvev1.DriverUpgradeDone)
	time.Sleep(2 * time.Second)
	waitState(ctx, t, c, carvev1.StateSuccess, "small")
	if n := m.RefusedUnloads(); n != 0 {
		t.Errorf("%d driver unloads refused", n)
	}
	if !r.running() {
		t.Error("the agent stopped")
	}
}

// waitRecord waits until the node record satisfies ok.
func waitRecord(ctx context.Context, t *testing.T, c *cluster.Cluster, what string, ok func(carvev1.NodeRecord) bool) {
	t.Helper()
	_, err := harness.WaitNode(ctx, c.Clientset(), c.NodeName(), time.Minute, what, func(n *corev1.Node) bool {
		rec, err := harness.RecordOf(n)
		return err == nil && ok(rec)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestDriverUpgradeDRA: the same upgrade with carve as a DRA driver, run
// as the carve-agent ServiceAccount under configs/deploy/dra's RBAC and
// admission policies: the node's ResourceSlice lists no device while the
// driver is away, the unload succeeds, and once the driver is back the
// slice lists the simulator's devices again with a higher generation.
func TestDriverUpgradeDRA(t *testing.T) {
	c := suite.Cluster(t)
	freshNode(t, c)
	e := &draEnv{t: t, ctx: testCtx(t, 10*time.Minute), c: c, cs: c.Clientset(), m: newSim(t, "h100-80gb*2"), state: t.TempDir()}
	e.create(anySlice(draClasses())...)
	e.agent = e.agentClient()
	if err := harness.ApplyProfiles(e.ctx, e.cs, deployNS, profilesCM, draProfiles); err != nil {
		t.Fatal(err)
	}
	e.startAgent()
	waitState(e.ctx, t, c, carvev1.StateSuccess, "small")
	e.waitSlice(0)

	upgradeState(e.ctx, t, c, carvev1.DriverPodRestartRequired)
	waitState(e.ctx, t, c, carvev1.StateDriverUpgrade, "small")
	var gen int64
	err := harness.Poll(e.ctx, time.Minute, func(ctx context.Context) (bool, error) {
		l, err := e.cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + dra.DriverName})
		if err != nil {
			return false, harness.Retry(err)
		}
		for _, s := range l.Items {
			if len(s.Spec.Devices) > 0 {
				return false, nil
			}
			gen = max(gen, s.Spec.Pool.Generation)
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("ResourceSlice devices with the driver away: %v", err)
	}
	if err := e.m.UnloadDriver(); err != nil {
		t.Fatalf("driver unload with the node in %s: %v", carvev1.StateDriverUpgrade, err)
	}
	if err := e.m.LoadDriver(); err != nil {
		t.Fatal(err)
	}
	upgradeState(e.ctx, t, c, carvev1.DriverUpgradeDone)
	waitState(e.ctx, t, c, carvev1.StateSuccess, "small")
	e.waitSlice(gen)
}
