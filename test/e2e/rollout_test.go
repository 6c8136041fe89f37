package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/carve-dev/carve/agent"
	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/rollout"
	"github.com/carve-dev/carve/test/cluster"
	"github.com/carve-dev/carve/test/harness"
)

// The fleet of TestRolloutFleet: agents in this process, each on its own
// simulated H100 and its own Node object (no kubelet), reading their own
// ConfigMap so that their Leases do not mix with the other tests'.
const (
	fleetCM     = "carve-fleet"
	fleetSize   = 20
	fleetLabel  = "carve.dev/e2e-fleet"
	fleetSlot   = 6 * time.Second
	fleetRetry  = time.Second
	fleetOpTime = 300 * time.Millisecond
)

// fleetFile is the profile file with default profile def and the given
// rollout section; note makes a new revision of the same file.
func fleetFile(def, rolloutSection, note string) string {
	return fmt.Sprintf(`version: v1
# %s
defaultProfile: %s
rollout: %s
profiles:
  full:
    - gpus: all
  balanced:
    - gpus: all
      mig: {1g.10gb: 2, 2g.20gb: 1, 3g.40gb: 1}
  small:
    - gpus: all
      mig: {1g.10gb: 7}
  half:
    - gpus: all
      mig: {3g.40gb: 2}
`, note, def, rolloutSection)
}

// fleetAgent is one agent of the fleet.
type fleetAgent struct {
	node string
	m    *sim.Machine
	dir  string
	run  *agentRun
}

// startFleetAgent (re)starts the agent of a, on its machine and state
// directory.
func startFleetAgent(t *testing.T, c *cluster.Cluster, a *fleetAgent) {
	t.Helper()
	lf, err := os.OpenFile(filepath.Join(a.dir, "agent.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	ag, err := agent.New(agent.Config{
		NodeName: a.node, Client: agentClient(t, c),
		ConfigMapNamespace: cmNamespace, ConfigMapName: fleetCM, GPUs: a.m,
		Advertise: agent.AdvertiseNone, PodResourcesSocket: agent.PodResourcesNone, StateDir: filepath.Join(a.dir, "state"),
		Logger:              slog.New(slog.NewTextHandler(lf, &slog.HandlerOptions{Level: slog.LevelDebug})),
		RolloutSlotDuration: fleetSlot, RolloutRetry: fleetRetry, PauseOperands: nil,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &agentRun{cancel: cancel, done: make(chan struct{})}
	go func() {
		r.err = ag.Run(ctx)
		lf.Close()
		close(r.done)
	}()
	a.run = r
}

// slotSelector selects the slot Leases of the ConfigMap cm.
func slotSelector(cm string) string {
	return carvev1.LeaseLabelConfigMap + "=" + cm + "," + carvev1.LeaseLabelKind + "=" + rollout.KindSlot
}

// fleetNodes names a fleet's Nodes: the size Nodes labelled label.
type fleetNodes struct {
	label string
	size  int
}

// fleetState is a fleet node's state and applied profile (its labels),
// and from its record what it waits for, its change and its last error.
type fleetState struct {
	state, applied, waiting, change, lastError string
}

// states returns each fleet node's fleetState.
func (fl fleetNodes) states(ctx context.Context, cs kubernetes.Interface) (map[string]fleetState, error) {
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: fl.label})
	if err != nil {
		return nil, fmt.Errorf("fleet nodes: %w", err)
	}
	out := map[string]fleetState{}
	for _, n := range list.Items {
		rec, _ := harness.RecordOf(&n)
		st := fleetState{state: n.Labels[carvev1.LabelState], applied: n.Labels[carvev1.LabelApplied], waiting: rec.Waiting, lastError: rec.LastError}
		if c := rec.Change; c != nil {
			st.change = fmt.Sprintf("since %s, profile %s, slot %s", c.Since, c.Profile, c.Slot)
		}
		out[n.Name] = st
	}
	return out, nil
}

// wait waits until every node of the fleet is in state with applied; it
// returns the states last read.
func (fl fleetNodes) wait(ctx context.Context, cs kubernetes.Interface, state, applied string, limit time.Duration) (map[string]fleetState, error) {
	var last map[string]fleetState
	err := harness.PollEvery(ctx, 250*time.Millisecond, limit, func(ctx context.Context) (bool, error) {
		s, err := fl.states(ctx, cs)
		if err != nil {
			return false, harness.Retry(err)
		}
		last = s
		for _, st := range s {
			if st.state != state || st.applied != applied {
				return false, nil
			}
		}
		return len(s) == fl.size, nil
	})
	if err != nil {
		return last, fmt.Errorf("fleet not %s with %s: %w", state, applied, err)
	}
	return last, nil
}

// waitFleet waits until every node of the fleet is in state with applied.
func waitFleet(ctx context.Context, t *testing.T, cs kubernetes.Interface, fl fleetNodes, state, applied string, limit time.Duration) {
	t.Helper()
	if last, err := fl.wait(ctx, cs, state, applied, limit); err != nil {
		t.Fatalf("%v\n%s", err, formatStates(last))
	}
}

// cleanFleet removes a fleet's Nodes (labelled label), and the Leases and
// the ConfigMap cm.
func cleanFleet(cs kubernetes.Interface, label, cm string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cs.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: label}); err != nil {
		return fmt.Errorf("delete fleet nodes: %w", err)
	}
	if err := cs.CoordinationV1().Leases(cmNamespace).DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: carvev1.LeaseLabelConfigMap + "=" + cm}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete fleet leases: %w", err)
	}
	return harness.DeleteProfiles(ctx, cs, cmNamespace, cm)
}

// TestRolloutFleet runs 20 agents against the real API server, each change
// lasting seconds: counted from the nodes' records by a watcher outside
// the agents, the rollout bound is never exceeded and is used; a profile
// that fails everywhere stops after maxFailures nodes, and a fixed file
// resumes the rollout. (An agent killed or frozen mid-change, and an API
// server outage, are TestChaosRolloutFleet's, with agent processes.)
func TestRolloutFleet(t *testing.T) {
	c := suite.Cluster(t)
	cs := c.Clientset()
	ctx := testCtx(t, 10*time.Minute)
	fl := fleetNodes{label: fleetLabel, size: fleetSize}
	if err := cleanFleet(cs, fleetLabel, fleetCM); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cleanFleet(cs, fleetLabel, fleetCM); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	const bounded = "{maxUnavailable: 3, maxFailures: 2}"
	applyProfilesNamed(ctx, t, cs, fleetCM, fleetFile("full", bounded, "start"))
	agents := make([]*fleetAgent, fleetSize)
	for i := range agents {
		a := &fleetAgent{node: fmt.Sprintf("carve-fleet-%02d", i), m: newSim(t, "h100-80gb*1"), dir: t.TempDir()}
		a.m.SetLatency(sim.UniformLatency(fleetOpTime))
		if err := createFleetNode(ctx, cs, a.node, fleetLabel); err != nil {
			t.Fatal(err)
		}
		startFleetAgent(t, c, a)
		agents[i] = a
	}
	var suspects []*fleetAgent // the agents whose log tails a failure shows (none: the first three)
	t.Cleanup(func() {
		for _, a := range agents {
			if a.run.running() {
				a.run.stop(t)
			}
		}
		if t.Failed() {
			shown := agents[:3]
			if len(suspects) > 0 {
				shown = suspects
			}
			for _, a := range shown {
				t.Logf("%s log (tail):\n%s", a.node, harness.Tail(filepath.Join(a.dir, "agent.log"), 30))
			}
		}
	})
	waitFleet(ctx, t, cs, fl, carvev1.StateSuccess, "full", 2*time.Minute)
	mid := watchMidChange(ctx, t, cs, fleetLabel, 3, 200*time.Millisecond)
	mid.take()

	// 1. All to MIG: 20 disruptive changes, at most 3 at once.
	start := time.Now()
	applyProfilesNamed(ctx, t, cs, fleetCM, fleetFile("balanced", bounded, "to MIG"))
	waitFleet(ctx, t, cs, fl, carvev1.StateSuccess, "balanced", 4*time.Minute)
	seen := mid.take()
	t.Logf("20 nodes to balanced in %s, at most %d mid-change at once", time.Since(start).Round(time.Second), seen.most)
	checkMidBound(t, mid, seen, 2)

	// 2. A profile that fails on every node: the rollout halts after
	// maxFailures (2) failed nodes; those in flight then may fail too, the
	// rest are held back.
	for _, a := range agents {
		if err := a.m.InjectFault(sim.Fault{Call: "CreateGPUInstance", GPU: -1, Err: partition.ErrInsufficientResources}); err != nil {
			t.Fatal(err)
		}
	}
	since := time.Now()
	applyProfilesNamed(ctx, t, cs, fleetCM, fleetFile("half", bounded, "broken"))
	var states map[string]fleetState
	failed, held := 0, 0
	if err := harness.PollEvery(ctx, 250*time.Millisecond, 2*time.Minute, func(ctx context.Context) (bool, error) {
		s, err := fl.states(ctx, cs)
		if err != nil {
			return false, harness.Retry(err)
		}
		states, failed, held = s, 0, 0
		for _, st := range s {
			switch {
			case st.state == carvev1.StateFailed:
				failed++
			case st.state == carvev1.StatePending && strings.Contains(st.waiting, "halted"):
				held++
			}
		}
		return failed >= 2 && failed+held == fleetSize, nil
	}); err != nil {
		for _, a := range agents {
			if st := states[a.node]; st.state != carvev1.StatePending || !strings.Contains(st.waiting, "halted") {
				suspects = append(suspects, a)
			}
		}
		seen := mid.take()
		t.Errorf("the rollout did not halt with every node failed or held back: %v\n%s\nmid-change timeline:\n%s", err, formatStates(states), mid.format(seen.timeline))
	}
	t.Logf("broken profile: %d nodes failed, %d held back", failed, held)
	if failed > 2+3-1 {
		t.Errorf("%d nodes failed; want at most 4 (maxFailures 2, and up to 3 in flight when the budget ran out)\n%s", failed, formatStates(states))
	}
	if _, err := harness.WaitConfigMapEvent(ctx, cs, cmNamespace, fleetCM, carvev1.ReasonRolloutHalted, since, 30*time.Second); err != nil {
		t.Errorf("no %s Event on the ConfigMap: %v", carvev1.ReasonRolloutHalted, err)
	}

	// 3. A fixed file, a new revision: the rollout resumes.
	for _, a := range agents {
		a.m.ClearFaults()
	}
	applyProfilesNamed(ctx, t, cs, fleetCM, fleetFile("half", bounded, "fixed"))
	waitFleet(ctx, t, cs, fl, carvev1.StateSuccess, "half", 4*time.Minute)
	checkMidBound(t, mid, mid.take(), 0)
}

// checkMidBound fails the test with what midProblems finds.
func checkMidBound(t *testing.T, w *midWatch, seen midPhase, least int) {
	t.Helper()
	for _, p := range midProblems(w, seen, least) {
		t.Error(p)
	}
}

// applyProfilesNamed writes data as the profile file of the ConfigMap cm.
func applyProfilesNamed(ctx context.Context, t *testing.T, cs kubernetes.Interface, cm, data string) {
	t.Helper()
	if err := harness.ApplyProfiles(ctx, cs, cmNamespace, cm, data); err != nil {
		t.Fatal(err)
	}
}
