package e2e

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/test/harness"
)

const crashProfiles = `version: v1
defaultProfile: before
profiles:
  before:
    - gpus: [0]
      mig: {1g.10gb: 7}
  after:
    - gpus: [0]
      mig: {1g.10gb: 2, 2g.20gb: 1, 3g.40gb: 1}
    - gpus: [1]
      mig: {4g.40gb: 1, 3g.40gb: 1}
`

// crashSpec is the simulated machine of the crash test.
const crashSpec = "h100-80gb*2"

// layout is what a machine's GPUs hold: per GPU its MIG modes and its
// instances as profile@placement=UUID, sorted.
func layout(t *testing.T, m partition.NVML) map[int]string {
	t.Helper()
	gpus, err := partition.ReadInventory(m)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for _, g := range gpus {
		var ins []string
		for _, in := range g.Instances {
			ins = append(ins, fmt.Sprintf("%s@%d:%d=%s", in.Profile, in.Placement.Start, in.Placement.Size, in.UUID()))
		}
		slices.Sort(ins)
		out[g.Index] = fmt.Sprintf("mig %s (pending %s) %s", g.MIGMode, g.PendingMIGMode, strings.Join(ins, " "))
	}
	return out
}

// crashStates builds the simulator state files of the test: the node
// before (profile before applied), and the layout a clean apply of profile
// after gives, with the NVML calls that apply makes, one line each as the
// simulator's op journal writes them.
func crashStates(t *testing.T, dir string) (before []byte, want map[int]string, ops []string) {
	t.Helper()
	path := filepath.Join(dir, "before.json")
	m, err := sim.Open(crashSpec, path)
	m = initSim(t, m, err)
	apply := func(targets map[int]partition.Target) {
		node, err := partition.ReadNode(m)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := partition.PlanNode(node.GPUs, node.Models, targets, nil)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		m.ResetOpLog()
		for _, gp := range plan.GPUs {
			n += len(gp.Ops)
			ap := partition.Applier{Lib: m}
			if err := ap.Apply(context.Background(), gp); err != nil {
				t.Fatal(err)
			}
		}
		// The test counts the agent's ops (its crash hook) in NVML calls.
		if got := len(m.OpLog()); got != n {
			t.Fatalf("the plan's %d ops made %d NVML calls; the test wants one each", n, got)
		}
	}
	apply(map[int]partition.Target{0: {MIG: map[string]int{"1g.10gb": 7}}, 1: {}})
	if before, err = os.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	apply(map[int]partition.Target{
		0: {MIG: map[string]int{"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}},
		1: {MIG: map[string]int{"4g.40gb": 1, "3g.40gb": 1}},
	})
	for _, op := range m.OpLog() {
		ops = append(ops, op.String())
	}
	return before, layout(t, m), ops
}

// journal reads an op journal's lines.
func journal(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if len(data) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
}

// TestAgentCrashAfterEveryOp kills the carve-agent binary right after its
// k-th NVML op, for every k of a change from profile before to profile
// after, and restarts it: every restart converges to exactly the layout of
// a clean apply (no instance made twice, none left over) and removes the
// checkpoint; the simulator's op journal shows that the two runs made
// between them exactly the NVML calls of a clean apply: the restarted
// agent makes the ops that were left (total − k), and destroys and
// re-creates nothing. The simulated GPUs keep their state in a file across
// the restarts, as hardware would.
func TestAgentCrashAfterEveryOp(t *testing.T) {
	c := suite.Cluster(t)
	ctx := testCtx(t, 25*time.Minute)
	freshNode(t, c)
	root, err := harness.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin, err := harness.BuildAgent(ctx, root, dir, harness.TestHooksTag)
	if err != nil {
		t.Fatal(err)
	}
	before, want, wantOps := crashStates(t, dir)
	ops := len(wantOps)
	if ops < 10 {
		t.Fatalf("the change takes only %d ops; the test wants a longer one", ops)
	}
	t.Logf("the change takes %d NVML ops", ops)
	applyProfiles(ctx, t, c, crashProfiles)

	statePath := filepath.Join(dir, "sim.json")
	stateDir := filepath.Join(dir, "state")
	logPath := filepath.Join(dir, "agent.log")
	const metricsAddr = "127.0.0.1:19465"
	args := []string{
		"--node-name", c.NodeName(), "--kubeconfig", c.Kubeconfig(), "--config-map", cmNamespace + "/" + cmName,
		"--gpus", "sim:" + crashSpec, "--sim-state", statePath,
		"--device-plugin-dir", c.DevicePluginDir(), "--pod-resources-socket", c.PodResourcesSocket(),
		"--state-dir", stateDir, "--metrics-addr", metricsAddr, "--log-level", "debug",
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent log (tail):\n%s", harness.Tail(logPath, 80))
		}
	})

	for k := 1; k <= ops; k++ {
		if err := os.WriteFile(statePath, before, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(stateDir); err != nil {
			t.Fatal(err)
		}
		if err := harness.ResetNode(ctx, c.Clientset(), c.NodeName()); err != nil {
			t.Fatal(err)
		}
		setProfileLabel(ctx, t, c, "after")
		since := time.Now()
		journalPath := filepath.Join(dir, fmt.Sprintf("ops-%d.log", k))
		journalEnv := "CARVE_TEST_SIM_OP_JOURNAL=" + journalPath

		crash, err := harness.Start(bin, args, []string{fmt.Sprintf("CARVE_FAULT_EXIT_AFTER_OPS=%d", k), journalEnv}, logPath)
		if err != nil {
			t.Fatal(err)
		}
		code, err := crash.Wait(2 * time.Minute)
		if err != nil {
			_, _ = crash.Stop()
			t.Fatalf("k=%d: the agent did not stop after op %d: %v", k, k, err)
		}
		if code != 86 {
			t.Fatalf("k=%d: exit code %d, want 86 (fault injection)", k, code)
		}
		if _, err := os.Stat(filepath.Join(stateDir, "intent.json")); err != nil {
			t.Fatalf("k=%d: no checkpoint after the crash: %v", k, err)
		}
		if got := layout(t, openState(t, statePath)); maps.Equal(got, want) && k < ops {
			t.Fatalf("k=%d: the GPUs reached the target before the last op", k)
		}
		if diff := cmp.Diff(wantOps[:k], journal(t, journalPath)); diff != "" {
			t.Fatalf("k=%d: the crashed agent's NVML calls differ from a clean apply's first %d (-clean +crashed):\n%s", k, k, diff)
		}

		agentProc, err := harness.Start(bin, args, []string{journalEnv}, logPath)
		if err != nil {
			t.Fatal(err)
		}
		_, waitErr := harness.WaitState(ctx, c.Clientset(), c.NodeName(), carvev1.StateSuccess, "after", 2*time.Minute)
		if waitErr == nil {
			_, waitErr = harness.WaitEvent(ctx, c.Clientset(), c.NodeName(), carvev1.ReasonResumingApply, "was interrupted", since, 30*time.Second)
		}
		if waitErr == nil && k == ops {
			waitErr = checkServing(ctx, metricsAddr)
		}
		code, stopErr := agentProc.Stop()
		if waitErr != nil {
			t.Fatalf("k=%d: after the restart: %v", k, waitErr)
		}
		if stopErr != nil || code != 0 {
			t.Fatalf("k=%d: the agent stopped with code %d: %v", k, code, stopErr)
		}
		if got := layout(t, openState(t, statePath)); !maps.Equal(got, want) {
			t.Fatalf("k=%d: the GPUs hold\n%v\nwant (a clean apply)\n%v", k, got, want)
		}
		if diff := cmp.Diff(wantOps, journal(t, journalPath)); diff != "" {
			t.Fatalf("k=%d: the crashed and the restarted agent's NVML calls differ from a clean apply's (-clean +both runs):\n%s", k, diff)
		}
		if _, err := os.Stat(filepath.Join(stateDir, "intent.json")); !os.IsNotExist(err) {
			t.Fatalf("k=%d: the checkpoint is still there after convergence (err %v)", k, err)
		}
	}
}

// openState opens a simulator state file for reading.
func openState(t *testing.T, path string) *sim.Machine {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := sim.NewFromState(data)
	return initSim(t, m, err)
}

// checkServing checks the agent binary's /readyz and /metrics.
func checkServing(ctx context.Context, addr string) error {
	get := func(path string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
		if err != nil {
			return 0, "", err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	if code, body, err := get("/readyz"); err != nil || code != http.StatusOK {
		return fmt.Errorf("/readyz: %d %q: %w", code, body, err)
	}
	code, body, err := get("/metrics")
	if err != nil || code != http.StatusOK {
		return fmt.Errorf("/metrics: %d: %w", code, err)
	}
	for _, name := range []string{"carve_agent_reconciles_total", "carve_agent_devices_advertised"} {
		if !strings.Contains(body, name) {
			return fmt.Errorf("/metrics lacks %s", name)
		}
	}
	return nil
}
