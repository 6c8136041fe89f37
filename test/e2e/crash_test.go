package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
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
	fixed := func(targets map[int]partition.Target) func(partition.Node) map[int]partition.Target {
		return func(partition.Node) map[int]partition.Target { return targets }
	}
	return realiseStates(t, crashSpec, dir,
		fixed(map[int]partition.Target{0: {MIG: map[string]int{"1g.10gb": 7}}, 1: {}}),
		fixed(map[int]partition.Target{
			0: {MIG: map[string]int{"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}},
			1: {MIG: map[string]int{"4g.40gb": 1, "3g.40gb": 1}},
		}))
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
// the restarts, as hardware would. The machinery is crashRun
// (chaos_kill_test.go), which TestChaosAgentKilledAtEveryOp runs over the
// reference suite of transitions.
func TestAgentCrashAfterEveryOp(t *testing.T) {
	c := suite.Cluster(t)
	ctx := testCtx(t, 25*time.Minute)
	freshNode(t, c)
	cr := newCrashRun(ctx, t, c, crashSpec, "after")
	cr.before, cr.want, cr.ops = crashStates(t, cr.dir)
	if len(cr.ops) < 10 {
		t.Fatalf("the change takes only %d ops; the test wants a longer one", len(cr.ops))
	}
	t.Logf("the change takes %d NVML ops", len(cr.ops))
	applyProfiles(ctx, t, c, crashProfiles)
	for k := 1; k <= len(cr.ops); k++ {
		if cc := cr.killAfter(ctx, t, k, killByHook); len(cc.lost)+len(cc.failed) > 0 {
			t.FailNow()
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
