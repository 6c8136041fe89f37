package e2e

// The carve-agent process sent SIGTERM (as the kubelet does on a DaemonSet
// rolling update or a node drain) after every operation of a change.

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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/internal/chaos"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/rollout"
	"github.com/carve-dev/carve/test/harness"
)

// termLatency is how long each simulated NVML op takes in the SIGTERM
// cases: long enough that the signal, sent once op k is in the journal,
// lands while op k+1 is in flight.
const termLatency = 150 * time.Millisecond

// noteInFlight notes a case whose signal landed while an op was in flight
// (the agent finished it: op k+1).
const noteInFlight = "finished the op in flight"

// termSpeed is how fast the simulated GPUs go in a SIGTERM case.
type termSpeed struct {
	// latency is --sim-latency; slowest the longest op it gives.
	latency string
	slowest time.Duration
	// delay is how long after op k is in the journal the signal is
	// sent: half an op puts op k+1 in flight (not the checkpoint of op
	// k, which comes right after it).
	delay time.Duration
}

// termGrace stands for the pod's terminationGracePeriodSeconds: the agent
// must be gone this long after the signal.
const termGrace = 30 * time.Second

// TestChaosAgentSIGTERMAfterEveryOp sends SIGTERM to the carve-agent binary as
// soon as the simulator's op journal shows op k, for every k of the crash
// test's change (termOps: every k in full mode; every op taking
// termLatency, so op k+1 is in flight when the signal lands), and restarts
// it. The agent must finish the op in
// flight and start no other, exit with status 0 well within termGrace,
// say in one log line what it waited for, leave a checkpoint that records
// exactly the ops the journal shows, and keep its rollout slot; the
// restart must make exactly the ops left and converge to a clean apply's
// layout. In full mode (CARVE_CHAOS=full) a case also signals during an
// op of 3 s, which the shutdown must wait out.
func TestChaosAgentSIGTERMAfterEveryOp(t *testing.T) {
	c := suite.Cluster(t)
	ctx := testCtx(t, 20*time.Minute)
	freshNode(t, c)
	cr := newCrashRun(ctx, t, c, crashSpec, "after")
	cr.before, cr.want, cr.ops = crashStates(t, cr.dir)
	applyProfiles(ctx, t, c, crashProfiles)
	t.Logf("the change takes %d NVML ops", len(cr.ops))
	inFlight := 0
	for _, k := range termOps(len(cr.ops)) {
		cc := cr.termAfter(ctx, t, k, termSpeed{latency: termLatency.String(), slowest: termLatency, delay: termLatency / 2})
		if len(cc.lost)+len(cc.failed) > 0 {
			t.FailNow()
		}
		if slices.Contains(cc.notes, noteInFlight) {
			inFlight++
		}
	}
	// The signal lands while an op is in flight, unless the machine is so
	// slow that op k's checkpoint outlasts half an op: some must have.
	if inFlight == 0 {
		t.Errorf("no case stopped with an op in flight: the test did not test what it is for")
	}
	if chaos.Full() {
		cr.termDuringSlowest(ctx, t)
	}
}

// termDuringSlowest signals, at --sim-latency realistic, right after the
// op before the slowest of the change (a GPU reset, else a MIG mode
// change), which the shutdown must then wait out, and logs how long it
// took.
func (cr *crashRun) termDuringSlowest(ctx context.Context, t *testing.T) {
	t.Helper()
	slow := slices.IndexFunc(cr.ops, func(op string) bool { return strings.Contains(op, " Reset(") })
	if slow < 0 {
		slow = slices.IndexFunc(cr.ops, func(op string) bool { return strings.Contains(op, " SetMIGMode(") })
	}
	k := max(slow, 1)
	cc := cr.termAfter(ctx, t, k, termSpeed{latency: "realistic", slowest: sim.RealisticLatency().ResetGPU})
	t.Logf("realistic latency, SIGTERM after op %d of %d (op %d: %s): %s", k, len(cr.ops), k+1, cr.ops[k], strings.Join(cc.notes, "; "))
}

// termOps are the ops after which TestChaosAgentSIGTERMAfterEveryOp signals, of
// a change of n ops: every one in full mode (CARVE_CHAOS=full, `make
// chaos`); in short mode (`make test`) the first two, one in the middle
// and the last two, at rest after the last.
func termOps(n int) []int {
	var ks []int
	for k := 1; k <= n; k++ {
		if chaos.Full() || k <= 2 || k == (n+1)/2 || k >= n-1 {
			ks = append(ks, k)
		}
	}
	return ks
}

// termAfter runs one case: the agent from the start, each op taking
// latency, sent SIGTERM once op k is in the journal, then restarted until
// the node is at the profile.
func (cr *crashRun) termAfter(ctx context.Context, t *testing.T, k int, speed termSpeed) *chaosCase {
	t.Helper()
	cc := &chaosCase{t: t, name: fmt.Sprintf("SIGTERM after op %d", k)}
	if err := cr.reset(ctx); err != nil {
		t.Fatal(err)
	}
	since := time.Now()
	cr.runs++
	journalPath := filepath.Join(cr.dir, fmt.Sprintf("ops-%d.log", cr.runs))
	journalEnv := "CARVE_TEST_SIM_OP_JOURNAL=" + journalPath
	p, err := harness.Start(cr.bin, cr.args("--sim-latency", speed.latency), []string{journalEnv}, cr.logPath())
	if err != nil {
		t.Fatal(err)
	}
	took, ok := cr.term(cc, p, journalPath, k, speed.delay)
	if !ok {
		return cc
	}
	cc.notes = append(cc.notes, "stopped "+took.Round(10*time.Millisecond).String()+" after the signal")
	if took > speed.slowest+5*time.Second {
		cc.fail("the agent took %s to stop after the signal; the op in flight takes at most %s", took, speed.slowest)
	}
	done := len(journal(t, journalPath))
	if done == k+1 {
		cc.notes = append(cc.notes, noteInFlight)
	}
	switch {
	case done < k || done > k+1:
		cc.fail("the agent made %d NVML calls by its exit; signalled after op %d, it may finish op %d (in flight) and no other", done, k, k+1)
	case !slices.Equal(cr.ops[:done], journal(t, journalPath)):
		cc.fail("the NVML calls before the exit are not a clean apply's first %d:\n%v", done, journal(t, journalPath))
	}
	recorded := cr.checkpointAfterTerm(cc, done)
	cr.checkShutdownLog(cc)
	if done < len(cr.ops) {
		cr.checkSlotKept(ctx, cc)
	}
	cr.restart(ctx, t, cc, k, recorded, journalEnv, since)
	if got := layout(t, openState(t, cr.statePath())); !maps.Equal(got, cr.want) {
		cc.lose("the GPUs hold\n%v\nwant (a clean apply)\n%v", got, cr.want)
	}
	if got := journal(t, journalPath); !slices.Equal(cr.ops, got) {
		cc.fail("the stopped and the restarted agent's NVML calls are not a clean apply's (%d calls, want %d): the restart must make only those left", len(got), len(cr.ops))
	}
	if _, err := os.Stat(filepath.Join(cr.stateDir(), "intent.json")); !os.IsNotExist(err) {
		cc.fail("the checkpoint is still there after convergence (err %v)", err)
	}
	return cc
}

// term sends SIGTERM to p once the journal has k lines and waits for it
// to exit; it returns how long the exit took after the signal, and false
// when the case cannot go on.
func (cr *crashRun) term(cc *chaosCase, p *harness.Process, journalPath string, k int, delay time.Duration) (time.Duration, bool) {
	if err := signalAtLine(p, journalPath, k, syscall.SIGTERM, delay, 2*time.Minute); err != nil {
		_, _ = p.Stop()
		cc.fail("%v", err)
		return 0, false
	}
	sent := time.Now()
	code, err := p.Wait(termGrace)
	took := time.Since(sent)
	if err != nil {
		_, _ = p.Stop()
		cc.fail("the agent did not exit within %s of SIGTERM: %v", termGrace, err)
		return took, false
	}
	if code != 0 {
		cc.fail("exit status %d after SIGTERM, want 0", code)
	}
	return took, true
}

// signalAtLine sends sig to p delay after the op journal at path has k
// lines.
func signalAtLine(p *harness.Process, path string, k int, sig syscall.Signal, delay, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		data, err := os.ReadFile(path)
		if err != nil && !os.IsNotExist(err) {
			return err
		}
		if strings.Count(string(data), "\n") >= k {
			time.Sleep(delay)
			return p.Signal(sig)
		}
		if p.Exited() {
			return fmt.Errorf("the agent exited before its op %d", k)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return fmt.Errorf("no op %d in the journal after %s", k, limit)
}

// checkpointAfterTerm checks the checkpoint a SIGTERM left when the agent
// had made done ops: it records exactly those, or, after the last op, it
// may be gone (the signal came once the change was over). It returns the
// ops recorded, -1 for none.
func (cr *crashRun) checkpointAfterTerm(cc *chaosCase, done int) int {
	data, err := os.ReadFile(filepath.Join(cr.stateDir(), "intent.json"))
	if errors.Is(err, os.ErrNotExist) && done == len(cr.ops) {
		cc.notes = append(cc.notes, "the signal came after the change was over")
		return -1
	}
	if err != nil {
		cc.lose("no checkpoint after the shutdown: %v", err)
		return -1
	}
	cp, err := carvev1.DecodeCheckpoint(data)
	if err != nil {
		cc.lose("checkpoint unreadable after the shutdown: %v", err)
		return -1
	}
	if cp.OpsDone() != done || cp.Profile != cr.profile {
		cc.fail("checkpoint of %s with %d ops done, want %s with the %d the GPUs went through", cp.Profile, cp.OpsDone(), cr.profile, done)
	}
	return cp.OpsDone()
}

// checkShutdownLog checks the agent's one line on the shutdown, the last
// run's in the log, which says what it waited for and how long.
func (cr *crashRun) checkShutdownLog(cc *chaosCase) {
	data, err := os.ReadFile(cr.logPath())
	if err != nil {
		cc.fail("agent log: %v", err)
		return
	}
	lines := strings.Split(string(data), "\n")
	for _, l := range slices.Backward(lines) {
		if strings.Contains(l, `"msg":"shutdown: stopped"`) {
			if !strings.Contains(l, `"waitedFor"`) || !strings.Contains(l, `"took"`) {
				cc.fail("the shutdown line lacks what it waited for and how long: %s", l)
			}
			if slices.Contains(cc.notes, noteInFlight) && !strings.Contains(l, "in flight: GPU") {
				cc.fail("the agent finished an op in flight, but its shutdown line does not name it: %s", l)
			}
			return
		}
		if strings.Contains(l, "carve-agent running") {
			break
		}
	}
	cc.fail("no shutdown line in the agent's log after SIGTERM")
}

// checkSlotKept checks that the node still holds a rollout slot after a
// shutdown mid-change: the slot is the next start's, not another node's.
func (cr *crashRun) checkSlotKept(ctx context.Context, cc *chaosCase) {
	sel := fmt.Sprintf("%s=%s,%s=%s", carvev1.LeaseLabelConfigMap, rollout.LabelValue(cmName), carvev1.LeaseLabelKind, rollout.KindSlot)
	list, err := cr.c.Clientset().CoordinationV1().Leases(cmNamespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		cc.fail("list rollout slots: %v", err)
		return
	}
	for _, l := range list.Items {
		if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == cr.c.NodeName() {
			return
		}
	}
	cc.fail("no rollout slot held by %s after a shutdown mid-change (%d slots)", cr.c.NodeName(), len(list.Items))
}
