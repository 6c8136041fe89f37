package e2e

// The carve-agent process killed at every operation of transitions of the
// reference suite (internal/transitions), for `make chaos`
// (docs/reliability.md): the machinery TestAgentCrashAfterEveryOp shares,
// and the chaos run over the suite. In-process kills of every operation of
// every transition are agent/chaos_test.go's.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/desired"
	"github.com/carve-dev/carve/internal/chaos"
	"github.com/carve-dev/carve/internal/transitions"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/test/cluster"
	"github.com/carve-dev/carve/test/harness"
)

// killMode is how a crash run ends the agent after op k.
type killMode int

const (
	// killByHook: CARVE_FAULT_EXIT_AFTER_OPS=k, the carve_testhooks
	// binary exits with status 86 right after op k is checkpointed.
	killByHook killMode = iota
	// killBySignal: SIGKILL as soon as the simulator's op journal shows
	// op k, every op taking 100 ms; the kill lands after op k, before or
	// after its checkpoint, and before op k+1 takes effect.
	killBySignal
)

func (m killMode) String() string {
	if m == killBySignal {
		return "SIGKILL after the op"
	}
	return "exit after the op is checkpointed (test hook)"
}

// crashRun runs the carve-agent binary built with the test hooks against a
// simulated machine kept in a file, from a saved starting state to a
// profile, killing it after an op and restarting it.
type crashRun struct {
	c   *cluster.Cluster
	bin string
	// spec is the simulated machine; profile the profile the node is
	// labelled with.
	spec, profile string
	// before is the simulator's state file at the start; want the layout
	// a clean apply reaches (layout); ops its NVML calls, as the op
	// journal writes them.
	before []byte
	want   map[int]string
	ops    []string
	dir    string
	// metricsAddr is where the restarted agent serves /metrics and
	// /readyz.
	metricsAddr string
	// runs counts the cases run, each with an op journal of its own.
	runs int
}

// statePath, stateDir, logPath are the run's simulator state, agent state
// directory and agent log.
func (cr *crashRun) statePath() string { return filepath.Join(cr.dir, "sim.json") }
func (cr *crashRun) stateDir() string  { return filepath.Join(cr.dir, "state") }
func (cr *crashRun) logPath() string   { return filepath.Join(cr.dir, "agent.log") }

// args are the agent's flags, plus extra.
func (cr *crashRun) args(extra ...string) []string {
	return append([]string{
		"--node-name", cr.c.NodeName(), "--kubeconfig", cr.c.Kubeconfig(), "--config-map", cmNamespace + "/" + cmName,
		"--gpus", "sim:" + cr.spec, "--sim-state", cr.statePath(),
		"--device-plugin-dir", cr.c.DevicePluginDir(), "--pod-resources-socket", cr.c.PodResourcesSocket(),
		"--state-dir", cr.stateDir(), "--metrics-addr", cr.metricsAddr, "--log-level", "debug",
	}, extra...)
}

// chaosCase collects what one case of a chaos test found: what was lost,
// and what else went wrong. Each finding also fails the test, prefixed
// with the case's name.
type chaosCase struct {
	t            *testing.T
	name         string
	lost, failed []string
	notes        []string
}

func (cc *chaosCase) errorf(format string, args ...any) string {
	cc.t.Helper()
	msg := fmt.Sprintf(format, args...)
	if cc.name != "" {
		cc.t.Errorf("%s: %s", cc.name, msg)
	} else {
		cc.t.Error(msg)
	}
	return msg
}

func (cc *chaosCase) lose(format string, args ...any) {
	cc.t.Helper()
	cc.lost = append(cc.lost, cc.errorf("lost: "+format, args...))
}

func (cc *chaosCase) fail(format string, args ...any) {
	cc.t.Helper()
	cc.failed = append(cc.failed, cc.errorf(format, args...))
}

// record adds the case's Record.
func (cc *chaosCase) record(rec *chaos.Recorder, r chaos.Record) {
	cc.t.Helper()
	r.Survived = len(cc.lost)+len(cc.failed) == 0
	r.Lost = strings.Join(cc.lost, "; ")
	r.Detail = strings.Join(slices.Concat(cc.notes, cc.lost, cc.failed), "; ")
	if err := rec.Add(r); err != nil {
		cc.t.Error(err)
	}
}

// reset puts the machine, the agent's state directory and the Node back
// to the start, and labels the Node with the profile.
func (cr *crashRun) reset(ctx context.Context) error {
	if err := os.WriteFile(cr.statePath(), cr.before, 0o644); err != nil {
		return err
	}
	if err := os.RemoveAll(cr.stateDir()); err != nil {
		return err
	}
	cs := cr.c.Clientset()
	if err := harness.ResetNode(ctx, cs, cr.c.NodeName()); err != nil {
		return err
	}
	return harness.SetNodeLabels(ctx, cs, cr.c.NodeName(), map[string]string{carvev1.LabelProfile: cr.profile})
}

// killAfter runs one case: the agent from the start, ended after op k as
// mode says, then restarted until the node is at the profile. The two runs
// must make between them exactly a clean apply's NVML calls (the restart
// only those left), reach exactly its layout, and leave no checkpoint.
func (cr *crashRun) killAfter(ctx context.Context, t *testing.T, k int, mode killMode) *chaosCase {
	t.Helper()
	cc := &chaosCase{t: t, name: fmt.Sprintf("k=%d", k)}
	if err := cr.reset(ctx); err != nil {
		t.Fatal(err)
	}
	since := time.Now()
	cr.runs++
	journalPath := filepath.Join(cr.dir, fmt.Sprintf("ops-%d.log", cr.runs))
	journalEnv := "CARVE_TEST_SIM_OP_JOURNAL=" + journalPath
	done, ok := cr.kill(t, cc, k, mode, journalEnv, journalPath)
	if !ok {
		return cc
	}
	got, most := journal(t, journalPath), k
	if mode == killBySignal {
		most = k + 1 // op k+1 done before the kill landed: possible, unlikely
	}
	if n := min(len(got), len(cr.ops)); len(got) < k || len(got) > most || !slices.Equal(cr.ops[:n], got) {
		cc.fail("the killed agent's NVML calls are not a clean apply's first %d: %s", k, cmp.Diff(cr.ops[:min(k, len(cr.ops))], got))
	}
	if got := layout(t, openState(t, cr.statePath())); maps.Equal(got, cr.want) && len(journal(t, journalPath)) < len(cr.ops) {
		cc.fail("the GPUs reached the target before the last op")
	}
	cr.restart(ctx, t, cc, k, done, journalEnv, since)
	if got := layout(t, openState(t, cr.statePath())); !maps.Equal(got, cr.want) {
		cc.lose("the GPUs hold\n%v\nwant (a clean apply)\n%v", got, cr.want)
	}
	if diff := cmp.Diff(cr.ops, journal(t, journalPath)); diff != "" {
		cc.fail("the killed and the restarted agent's NVML calls differ from a clean apply's (-clean +both runs):\n%s", diff)
	}
	if _, err := os.Stat(filepath.Join(cr.stateDir(), "intent.json")); !os.IsNotExist(err) {
		cc.fail("the checkpoint is still there after convergence (err %v)", err)
	}
	return cc
}

// kill starts the agent and ends it after op k; it returns the ops done
// that its checkpoint records (-1: no checkpoint), and false when the case
// cannot go on.
func (cr *crashRun) kill(t *testing.T, cc *chaosCase, k int, mode killMode, journalEnv, journalPath string) (int, bool) {
	t.Helper()
	env, args := []string{journalEnv}, cr.args()
	if mode == killByHook {
		env = append(env, fmt.Sprintf("CARVE_FAULT_EXIT_AFTER_OPS=%d", k))
	} else {
		args = cr.args("--sim-latency", "100ms")
	}
	p, err := harness.Start(cr.bin, args, env, cr.logPath())
	if err != nil {
		t.Fatal(err)
	}
	if mode == killBySignal {
		if err := killAtLine(p, journalPath, k, 2*time.Minute); err != nil {
			_, _ = p.Stop()
			cc.fail("%v", err)
			return 0, false
		}
	}
	code, err := p.Wait(2 * time.Minute)
	if err != nil {
		_, _ = p.Stop()
		cc.fail("the agent did not stop after op %d: %v", k, err)
		return 0, false
	}
	if want := map[killMode]int{killByHook: 86, killBySignal: -1}[mode]; code != want {
		cc.fail("exit code %d, want %d", code, want)
		return 0, false
	}
	return cr.checkpointAfterKill(cc, k, mode), true
}

// checkpointAfterKill checks the checkpoint a kill after op k left: it
// records k ops (or k-1, k+1 after a SIGKILL, which may land on either
// side of a checkpoint), or is gone after the last op, when a SIGKILL
// can come after the apply finished. It returns the ops recorded, -1 for
// none.
func (cr *crashRun) checkpointAfterKill(cc *chaosCase, k int, mode killMode) int {
	data, err := os.ReadFile(filepath.Join(cr.stateDir(), "intent.json"))
	if errors.Is(err, os.ErrNotExist) && mode == killBySignal && k == len(cr.ops) {
		cc.notes = append(cc.notes, "killed after the apply had finished")
		return -1
	}
	if err != nil {
		cc.lose("no checkpoint after the kill: %v", err)
		return -1
	}
	cp, err := carvev1.DecodeCheckpoint(data)
	if err != nil {
		cc.lose("checkpoint unreadable after the kill: %v", err)
		return -1
	}
	ok := cp.OpsDone() == k
	if mode == killBySignal {
		ok = cp.OpsDone() >= k-1 && cp.OpsDone() <= k+1
	}
	if !ok || cp.Profile != cr.profile {
		cc.fail("checkpoint of %s with %d ops done after a kill after op %d", cp.Profile, cp.OpsDone(), k)
	}
	if cp.OpsDone() != k {
		cc.notes = append(cc.notes, fmt.Sprintf("the kill after op %d found %d checkpointed", k, cp.OpsDone()))
	}
	return cp.OpsDone()
}

// killAtLine sends SIGKILL to p once the op journal at path has k lines.
func killAtLine(p *harness.Process, path string, k int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		data, err := os.ReadFile(path)
		if err != nil && !os.IsNotExist(err) {
			return err
		}
		if strings.Count(string(data), "\n") >= k {
			return p.Signal(syscall.SIGKILL)
		}
		if p.Exited() {
			return fmt.Errorf("the agent exited before its op %d", k)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return fmt.Errorf("no op %d in the journal after %s", k, limit)
}

// restart runs the agent again until the node is at the profile, checks
// it reports the interrupted apply (when a checkpoint was left: done >= 0)
// and, after the last op, serves /readyz and /metrics; then stops it.
func (cr *crashRun) restart(ctx context.Context, t *testing.T, cc *chaosCase, k, done int, journalEnv string, since time.Time) {
	t.Helper()
	p, err := harness.Start(cr.bin, cr.args(), []string{journalEnv}, cr.logPath())
	if err != nil {
		t.Fatal(err)
	}
	cs := cr.c.Clientset()
	_, waitErr := harness.WaitState(ctx, cs, cr.c.NodeName(), carvev1.StateSuccess, cr.profile, 2*time.Minute)
	if waitErr == nil && done >= 0 {
		_, waitErr = harness.WaitEvent(ctx, cs, cr.c.NodeName(), carvev1.ReasonResumingApply, "was interrupted", since, 30*time.Second)
	}
	if waitErr == nil && k == len(cr.ops) {
		// With no checkpoint left (a stop once the change was over), the
		// node is at the profile before the restarted agent serves.
		waitErr = waitServing(ctx, cr.metricsAddr, 30*time.Second)
	}
	code, stopErr := p.Stop()
	if waitErr != nil {
		cc.fail("after the restart: %v", waitErr)
	}
	if stopErr != nil || code != 0 {
		cc.fail("the restarted agent stopped with code %d: %v", code, stopErr)
	}
}

// waitServing waits until checkServing passes, at most limit.
func waitServing(ctx context.Context, addr string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		err := checkServing(ctx, addr)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// newCrashRun builds the agent with the test hooks and prepares a run in a
// directory of its own; the agent's log tail is printed if t fails.
func newCrashRun(ctx context.Context, t *testing.T, c *cluster.Cluster, spec, profile string) *crashRun {
	t.Helper()
	root, err := harness.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin, err := harness.BuildAgent(ctx, root, dir, harness.TestHooksTag)
	if err != nil {
		t.Fatal(err)
	}
	cr := &crashRun{c: c, bin: bin, spec: spec, profile: profile, dir: dir, metricsAddr: "127.0.0.1:19465"}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent log (tail):\n%s", harness.Tail(cr.logPath(), 80))
		}
	})
	return cr
}

// realiseStates opens a simulated machine kept in a file in dir, realises
// each of the targets on it in turn, and returns the state file's content
// after the first, the layout after the last, and the NVML calls of the
// last, one line each as the op journal writes them. Each op of a plan
// must be one NVML call: the tests count ops by the calls.
func realiseStates(t *testing.T, spec, dir string, targets ...func(partition.Node) map[int]partition.Target) (before []byte, want map[int]string, ops []string) {
	t.Helper()
	path := filepath.Join(dir, "before.json")
	m, err := sim.Open(spec, path)
	m = initSim(t, m, err)
	for i, target := range targets {
		node, err := partition.ReadNode(m)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := partition.PlanNode(node.GPUs, node.Models, target(node), nil)
		if err != nil {
			t.Fatal(err)
		}
		m.ResetOpLog()
		n := 0
		for _, gp := range plan.GPUs {
			n += len(gp.Ops)
			if err := (&partition.Applier{Lib: m}).Apply(context.Background(), gp); err != nil {
				t.Fatal(err)
			}
		}
		if got := len(m.OpLog()); got != n {
			t.Fatalf("the plan's %d ops made %d NVML calls; the test wants one each", n, got)
		}
		if i == 0 {
			if before, err = os.ReadFile(path); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, op := range m.OpLog() {
		ops = append(ops, op.String())
	}
	return before, layout(t, m), ops
}

// profileTargets returns the MIG targets of a profile of f on a node, as
// the agent resolves them.
func profileTargets(t *testing.T, f *configs.File, profile string) func(partition.Node) map[int]partition.Target {
	t.Helper()
	return func(node partition.Node) map[int]partition.Target {
		st, err := desired.For(f, profile, node)
		if err != nil {
			t.Fatalf("%s: %v", profile, err)
		}
		return st.Targets
	}
}

// transitionStates is realiseStates for a transition of the suite: the
// machine at tr.From, and a clean apply of tr.To.
func transitionStates(t *testing.T, tr transitions.Transition, dir string) (before []byte, want map[int]string, ops []string) {
	t.Helper()
	f, err := configs.Parse([]byte(transitions.Profiles(tr.Model)))
	if err != nil {
		t.Fatal(err)
	}
	return realiseStates(t, tr.Machine, dir, profileTargets(t, f, tr.From), profileTargets(t, f, tr.To))
}

// killTransition is one transition of a kill run, and the ops to kill at
// (nil: all).
type killTransition struct {
	name string
	ops  []int
	mode killMode
}

// killPlan is what TestChaosAgentKilledAtEveryOp runs. In full mode:
// every op of nine transitions of the suite with the test hook (MIG on
// and off, instances added to and taken from partly used GPUs, mixes
// changed, on three models; 112 ops) and of three with SIGKILL (52 ops),
// what fits `make chaos`'s 30 minutes on a 2-core machine beside the
// other runs. In short mode (TestAgentCrashAfterEveryOp kills at every op
// of a change already) one SIGKILL in the middle of one transition.
func killPlan() []killTransition {
	if !chaos.Full() {
		return []killTransition{{name: "H100-80GB:balanced->halves", ops: []int{8}, mode: killBySignal}}
	}
	var plan []killTransition
	for _, name := range []string{
		"H100-80GB:full->half", "H100-80GB:balanced->halves", "H100-80GB:halves->full", "H100-80GB:half->half-plus",
		"H100-80GB:half-plus->half", "H100-80GB:whole->full", "A100-40GB:half->halves", "A30-24GB:full->all-1g", "A30-24GB:halves->whole",
	} {
		plan = append(plan, killTransition{name: name, mode: killByHook})
	}
	for _, name := range []string{"H100-80GB:balanced->halves", "A30-24GB:all-1g->halves", "H200-141GB:halves->full"} {
		plan = append(plan, killTransition{name: name, mode: killBySignal})
	}
	return plan
}

const (
	scenarioKill = "carve-agent killed at every operation (process, local cluster)"
	checkedKill  = "The carve-agent binary (a test build with a fault hook, never shipped) runs against the local cluster on a simulated machine " +
		"kept in a file, from the start of a transition of the reference suite, and is ended after operation k: it exits " +
		"right after operation k is checkpointed (the test hook), or gets SIGKILL as soon as the simulated GPUs' journal of " +
		"operations shows operation k (every operation taking 100 ms, so the kill lands before or after its checkpoint but " +
		"before operation k+1). The checkpoint must record the operations done; restarted, the agent must report " +
		"ResumingApply, reach state success, make between the two runs exactly the NVML calls of an uninterrupted apply " +
		"(the restart only those left: nothing destroyed and re-made), hold exactly its layout (MIG device UUIDs included), " +
		"and remove the checkpoint."
)

// TestChaosAgentKilledAtEveryOp kills the carve-agent process after every
// op of transitions of the reference suite; see checkedKill and killPlan.
func TestChaosAgentKilledAtEveryOp(t *testing.T) {
	c := suite.Cluster(t)
	ctx := testCtx(t, 25*time.Minute)
	freshNode(t, c)
	rec := chaos.NewRecorder("e2e-2-kill")
	if err := rec.Describe(scenarioKill, checkedKill); err != nil {
		t.Fatal(err)
	}
	byName := map[string]transitions.Transition{}
	for _, tr := range transitions.Suite() {
		byName[tr.Name()] = tr
	}
	cr := newCrashRun(ctx, t, c, "", "")
	for _, kt := range killPlan() {
		tr, ok := byName[kt.name]
		if !ok {
			t.Fatalf("no transition %s in the suite", kt.name)
		}
		t.Run(fmt.Sprintf("%s/%s", tr.Name(), map[killMode]string{killByHook: "hook", killBySignal: "sigkill"}[kt.mode]), func(t *testing.T) {
			cr.spec, cr.profile = tr.Machine, tr.To
			cr.before, cr.want, cr.ops = transitionStates(t, tr, t.TempDir())
			applyProfiles(ctx, t, c, transitions.Profiles(tr.Model))
			ops := kt.ops
			if ops == nil {
				for k := 1; k <= len(cr.ops); k++ {
					ops = append(ops, k)
				}
			}
			for _, k := range ops {
				start := time.Now()
				cc := cr.killAfter(ctx, t, k, kt.mode)
				cc.notes = append(cc.notes, "took "+time.Since(start).Round(100*time.Millisecond).String())
				cc.record(rec, chaos.Record{Scenario: scenarioKill, Case: fmt.Sprintf("%s, op %d of %d", tr.Name(), k, len(cr.ops)),
					Fault: kt.mode.String()})
			}
		})
	}
}
