package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/test/harness"
)

// TestDynamicPrepareKilledAfterEveryOp kills the carve-agent binary
// (--advertise dra) right after each NVML op of a claim's prepare on a
// dynamic GPU (create-gi, then create-ci) and restarts it: the kubelet asks
// again, the restarted agent finishes the device from its record and the
// GPU as it is, and the pod runs; the simulator's op journal over both
// runs shows each op once (never a second GPU instance), and the GPU holds
// exactly the claim's device, destroyed when the claim goes.
func TestDynamicPrepareKilledAfterEveryOp(t *testing.T) {
	c := suite.Cluster(t)
	ctx := testCtx(t, 12*time.Minute)
	freshNode(t, c)
	e := &draEnv{t: t, ctx: ctx, c: c, cs: c.Clientset()}
	e.create(anySlice(draClasses())...)
	applyProfiles(ctx, t, c, hybridProfiles)
	cr := newCrashRun(ctx, t, c, "h100-80gb*2", "hybrid")
	args := []string{
		"--node-name", c.NodeName(), "--kubeconfig", c.Kubeconfig(), "--config-map", cmNamespace + "/" + cmName,
		"--gpus", "sim:" + cr.spec, "--sim-state", cr.statePath(), "--advertise", "dra",
		"--kubelet-root-dir", c.KubeletRootDir(), "--cdi-dir", c.CDIDir(), "--pod-resources-socket", c.PodResourcesSocket(),
		"--state-dir", cr.stateDir(), "--metrics-addr", cr.metricsAddr, "--log-level", "debug",
	}
	start := func(env ...string) *harness.Process {
		t.Helper()
		p, err := harness.Start(cr.bin, args, env, cr.logPath())
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	waitOffered := func() {
		t.Helper()
		if err := harness.Poll(ctx, 2*time.Minute, func(context.Context) (bool, error) {
			return slices.Contains(e.poolDevices(), "gpu-1-dyn-3g40gb-4"), nil
		}); err != nil {
			t.Fatalf("GPU 1's dynamic devices never offered: %v", e.poolDevices())
		}
	}
	// The node realises the hybrid profile first: GPU 1 in MIG mode, empty.
	p := start()
	waitState(ctx, t, c, carvev1.StateSuccess, "hybrid")
	waitOffered()
	if code, err := p.Stop(); err != nil || code != 0 {
		t.Fatalf("the agent stopped with %d: %v", code, err)
	}
	onGPU1 := `device.attributes["gpu.carve.dev"].index == 1 && device.attributes["gpu.carve.dev"].profile == "3g.40gb"`
	for k := 1; k <= 2; k++ {
		name := fmt.Sprintf("dyn-crash-%d", k)
		journalPath := filepath.Join(cr.dir, fmt.Sprintf("dyn-ops-%d.log", k))
		journalEnv := "CARVE_TEST_SIM_OP_JOURNAL=" + journalPath
		p := start(journalEnv, fmt.Sprintf("CARVE_FAULT_EXIT_AFTER_OPS=%d", k))
		waitOffered()
		e.create(draClaim(name, "mig.carve.dev", onGPU1, 1, false), claimPod(name, name, 10*time.Minute))
		if code, err := p.Wait(2 * time.Minute); err != nil || code != 86 {
			_, _ = p.Stop()
			t.Fatalf("k=%d: the agent did not stop after op %d of the prepare: code %d, %v", k, k, code, err)
		}
		if got := journal(t, journalPath); len(got) != k {
			t.Errorf("k=%d: ops before the kill: %v", k, got)
		}
		p = start(journalEnv)
		waitHolds(ctx, t, c, name)
		gis, cis := 0, 0
		for _, line := range journal(t, journalPath) {
			gis += strings.Count(line, "CreateGPUInstance(")
			cis += strings.Count(line, "CreateComputeInstance(")
		}
		if ops := journal(t, journalPath); gis != 1 || cis != 1 || len(ops) != 2 {
			t.Errorf("k=%d: the two runs made %v, want one create-gi and one create-ci", k, ops)
		}
		if got := gpuInstances(t, openState(t, cr.statePath()), 1); len(got) != 1 || got["3g.40gb@4:4"] == "" {
			t.Errorf("k=%d: GPU 1 holds %v, want the claim's 3g.40gb at 4:4 only", k, got)
		}
		if err := harness.DeletePod(ctx, e.cs, metav1.NamespaceDefault, name); err != nil {
			t.Fatal(err)
		}
		if err := e.cs.ResourceV1().ResourceClaims(metav1.NamespaceDefault).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := harness.Poll(ctx, 2*time.Minute, func(context.Context) (bool, error) {
			return len(gpuInstances(t, openState(t, cr.statePath()), 1)) == 0, nil
		}); err != nil {
			t.Fatalf("k=%d: the claim's device was not destroyed", k)
		}
		if code, err := p.Stop(); err != nil || code != 0 {
			t.Fatalf("k=%d: the restarted agent stopped with %d: %v", k, code, err)
		}
	}
}
