package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/carve-dev/carve/agent"
	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/internal/chaos"
	"github.com/carve-dev/carve/internal/transitions"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/rollout"
	"github.com/carve-dev/carve/test/cluster"
	"github.com/carve-dev/carve/test/harness"
)

// logTimes is a slog.Handler that passes every record on and keeps the
// time and attributes of those with the messages it watches.
type logTimes struct {
	next  slog.Handler
	watch map[string]bool
	seen  *seenLogs
}

// seenLogs are the records a logTimes kept, shared by its derived
// handlers.
type seenLogs struct {
	mu      sync.Mutex
	records []slog.Record
}

func (l *logTimes) Enabled(ctx context.Context, lvl slog.Level) bool { return l.next.Enabled(ctx, lvl) }

func (l *logTimes) Handle(ctx context.Context, r slog.Record) error {
	if l.watch[r.Message] {
		l.seen.mu.Lock()
		l.seen.records = append(l.seen.records, r.Clone())
		l.seen.mu.Unlock()
	}
	return l.next.Handle(ctx, r)
}

func (l *logTimes) WithAttrs(as []slog.Attr) slog.Handler {
	return &logTimes{next: l.next.WithAttrs(as), watch: l.watch, seen: l.seen}
}

func (l *logTimes) WithGroup(name string) slog.Handler {
	return &logTimes{next: l.next.WithGroup(name), watch: l.watch, seen: l.seen}
}

// of returns the times of the records with message msg, and the value of
// their attribute key (nil where they have none).
func (s *seenLogs) of(msg, key string) ([]time.Time, []slog.Value) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var at []time.Time
	var vals []slog.Value
	for _, r := range s.records {
		if r.Message != msg {
			continue
		}
		at = append(at, r.Time)
		var v slog.Value
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == key {
				v = a.Value
			}
			return true
		})
		vals = append(vals, v)
	}
	return at, vals
}

// The agent's log messages the test reads.
const (
	logApplyFailed = "apply failed"
	logRetry       = "reconcile ended failed; retrying with backoff"
)

// watchStates polls the node's carve.dev/state until ctx ends and returns
// the function that stops it and gives the values seen, repeats dropped.
func watchStates(ctx context.Context, c *cluster.Cluster) func() []string {
	ctx, cancel := context.WithCancel(ctx)
	var (
		mu   sync.Mutex
		seen []string
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if n, err := c.Clientset().CoreV1().Nodes().Get(ctx, c.NodeName(), metav1.GetOptions{}); err == nil {
				s := n.Labels[carvev1.LabelState]
				mu.Lock()
				if len(seen) == 0 || seen[len(seen)-1] != s {
					seen = append(seen, s)
				}
				mu.Unlock()
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return func() []string {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// reconcilesEnded returns carve_agent_reconciles_total{result} from reg.
func reconcilesEnded(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "carve_agent_reconciles_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

const (
	scenarioNVMLBackoff = "NVML failure lasting several calls (carve-agent on the local cluster)"
	checkedNVMLBackoff  = "The agent, set up as carve-agent sets it up (its device plugin registered with the local kubelet), " +
		"on a simulated H100 pair realising H100-80GB:full->all-1g of the reference suite, with SetMIGMode failing on " +
		"that many calls in a row. Each pass must end failed (the node's carve.dev/state goes failed, a Warning ApplyFailed " +
		"Event, carve_agent_reconciles_total{result=\"failed\"} counts them), the retries must come with a growing " +
		"backoff (0.5 s doubling, capped at 30 s: the delays the agent logs, and the time between failed applies, each " +
		"longer than the one before), and once the fault clears the node must reach state success with exactly the " +
		"layout of an uninterrupted apply (MIG device UUIDs included), only the failed calls added to its NVML calls, " +
		"no checkpoint left, and no failure Lease left in the rollout (it would count against the file's failure budget)."
)

// TestChaosNVMLFailureRetriesWithBackoff: a fault that lasts N NVML calls;
// see checkedNVMLBackoff.
func TestChaosNVMLFailureRetriesWithBackoff(t *testing.T) {
	c := suite.Cluster(t)
	ctx := testCtx(t, 5*time.Minute)
	freshNode(t, c)
	rec := chaos.NewRecorder("e2e-1-nvml")
	if err := rec.Describe(scenarioNVMLBackoff, checkedNVMLBackoff); err != nil {
		t.Fatal(err)
	}
	deleteFailureLease(ctx, t, c) // chaos_cluster_test.go
	failures := 3
	if chaos.Full() {
		failures = 7 // reaches the 30 s cap
	}
	var tr transitions.Transition
	for _, x := range transitions.Suite() {
		if x.Name() == "H100-80GB:full->all-1g" {
			tr = x
		}
	}
	before, want, wantOps := transitionStates(t, tr, t.TempDir())
	m, err := sim.NewFromState(before)
	m = initSim(t, m, err)

	logPath := filepath.Join(t.TempDir(), "agent.log")
	lf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent log (tail):\n%s", harness.Tail(logPath, 60))
		}
		lf.Close()
	})
	logs := &seenLogs{}
	reg := prometheus.NewRegistry()
	stateDir := t.TempDir()
	applyProfiles(ctx, t, c, transitions.Profiles(tr.Model))
	// Pinned from the start, so that the failed passes change no label of
	// the node but carve.dev/state (a label change starts a pass at once).
	setProfileLabel(ctx, t, c, tr.From)
	startAgent(t, c, m, func(cfg *agent.Config) {
		cfg.Logger = slog.New(&logTimes{next: slog.NewTextHandler(lf, &slog.HandlerOptions{Level: slog.LevelDebug}),
			watch: map[string]bool{logApplyFailed: true, logRetry: true}, seen: logs})
		cfg.Registerer, cfg.StateDir = reg, stateDir
	})
	waitState(ctx, t, c, carvev1.StateSuccess, tr.From)

	cc := &chaosCase{t: t}
	m.ResetOpLog()
	if err := m.InjectFault(sim.Fault{Call: "SetMIGMode", GPU: -1, Err: errors.New("NVML_ERROR_UNKNOWN (injected)"), Times: failures}); err != nil {
		t.Fatal(err)
	}
	states := watchStates(ctx, c)
	start := time.Now()
	setProfileLabel(ctx, t, c, tr.To)
	waitState(ctx, t, c, carvev1.StateSuccess, tr.To)
	took := time.Since(start)
	seen := states()
	if !slices.Contains(seen, carvev1.StateFailed) {
		cc.fail("the node's state went %v, never failed", seen)
	}
	waitEvent(ctx, t, c, carvev1.ReasonApplyFailed, "injected", start)
	if got := reconcilesEnded(t, reg, carvev1.StateFailed); got != float64(failures) {
		cc.fail("carve_agent_reconciles_total{result=failed} = %v, want %d", got, failures)
	}
	delays := checkBackoff(cc, logs, failures)
	checkConverged(t, cc, m, want, wantOps, failures, stateDir)
	noFailureLeaseLeft(ctx, cc, c)
	cc.notes = append(cc.notes, fmt.Sprintf("retried after %s; states %s; converged %s after the change",
		strings.Join(delays, ", "), strings.Join(seen, " -> "), took.Round(100*time.Millisecond)))
	cc.record(rec, chaos.Record{Scenario: scenarioNVMLBackoff, Case: fmt.Sprintf("%s, %d failures", tr.Name(), failures),
		Fault: fmt.Sprintf("SetMIGMode fails %d times in a row", failures)})
}

// checkBackoff checks the retries of the failed passes: the delays the
// agent logged are 0.5 s doubling up to the 30 s cap (which the retry
// interval the pass asked for, 30 s from its start, may shorten by the
// time the pass took), and each failed apply came at least that delay
// after the one before, later each time. It returns the delays.
func checkBackoff(cc *chaosCase, logs *seenLogs, failures int) []string {
	_, vals := logs.of(logRetry, "retryIn")
	var delays []time.Duration
	var got []string
	for _, v := range vals {
		delays = append(delays, v.Duration())
		got = append(got, v.Duration().Round(10*time.Millisecond).String())
	}
	if len(delays) != failures {
		cc.fail("%d retries logged (%v), want %d", len(delays), got, failures)
	}
	want := agent.MinRetryBackoff
	for i, d := range delays {
		if d > want || d < want-time.Second {
			cc.fail("retry %d after %s, want %s (at most 1 s less at the cap)", i+1, d, want)
		}
		want = min(2*want, agent.MaxRetryBackoff)
	}
	failedAt, _ := logs.of(logApplyFailed, "")
	if len(failedAt) != failures {
		cc.fail("%d failed applies logged, want %d", len(failedAt), failures)
		return got
	}
	var prev time.Duration
	for i := 1; i < len(failedAt) && i <= len(delays); i++ {
		gap := failedAt[i].Sub(failedAt[i-1])
		if gap < delays[i-1]-50*time.Millisecond || gap <= prev {
			cc.fail("failed apply %d came %s after the one before (the one before that: %s), want at least the %s backoff and longer each time", i+1, gap, prev, delays[i-1])
		}
		prev = gap
	}
	return got
}

// noFailureLeaseLeft checks that the rollout holds no failure of this
// node once it converged: a failure Lease left behind would count against
// the revision's failure budget and, with maxFailures 1, hold every other
// node back.
func noFailureLeaseLeft(ctx context.Context, cc *chaosCase, c *cluster.Cluster) {
	name := rollout.FailureName(cmName, c.NodeName())
	_, err := c.Clientset().CoordinationV1().Leases(cmNamespace).Get(ctx, name, metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		cc.lose("the rollout still counts the change as failed (Lease %s/%s: %v) though the node converged", cmNamespace, name, err)
	}
}

// checkConverged checks the machine after the fault: exactly a clean
// apply's layout, its NVML calls plus the failed ones, no checkpoint.
func checkConverged(t *testing.T, cc *chaosCase, m *sim.Machine, want map[int]string, wantOps []string, failures int, stateDir string) {
	t.Helper()
	if got := layout(t, m); !maps.Equal(got, want) {
		cc.lose("the GPUs hold\n%v\nwant (a clean apply)\n%v", got, want)
	}
	var ok []string
	failed := 0
	for _, op := range m.OpLog() {
		if op.Err != nil {
			failed++
			continue
		}
		ok = append(ok, op.String())
	}
	if diff := cmp.Diff(wantOps, ok); diff != "" || failed != failures {
		cc.fail("%d failed NVML calls (want %d); the others differ from a clean apply's (-clean +got):\n%s", failed, failures, diff)
	}
	if _, err := os.Stat(filepath.Join(stateDir, "intent.json")); !os.IsNotExist(err) {
		cc.fail("checkpoint left after converging (err %v)", err)
	}
}
