package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

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
		NodeName: a.node, Client: kubernetes.NewForConfigOrDie(c.RESTConfig()),
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

// slotWatch counts, from outside the agents, the slot Leases that name a
// holder, and keeps the most there ever were.
type slotWatch struct {
	mu      sync.Mutex
	holders map[string]string // Lease name -> holder
	most    int
}

func (w *slotWatch) set(l *coordinationv1.Lease, gone bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if gone || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		delete(w.holders, l.Name)
	} else {
		w.holders[l.Name] = *l.Spec.HolderIdentity
	}
	w.most = max(w.most, len(w.holders))
}

// take returns the most holders seen since the last take, and starts
// again from those holding now.
func (w *slotWatch) take() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	most := w.most
	w.most = len(w.holders)
	return most
}

func (w *slotWatch) holderOf(name string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.holders[name]
}

func (w *slotWatch) anyHolder() (string, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for name, h := range w.holders {
		return name, h
	}
	return "", ""
}

// watchSlots runs a Lease informer on the fleet's slot Leases until ctx
// ends.
func watchSlots(ctx context.Context, t *testing.T, cs kubernetes.Interface) *slotWatch {
	t.Helper()
	w := &slotWatch{holders: map[string]string{}}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(cmNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = carvev1.LeaseLabelConfigMap + "=" + fleetCM + "," + carvev1.LeaseLabelKind + "=" + rollout.KindSlot
		}))
	inf := f.Coordination().V1().Leases().Informer()
	lease := func(obj any) *coordinationv1.Lease {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		l, _ := obj.(*coordinationv1.Lease)
		return l
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.set(lease(o), false) },
		UpdateFunc: func(_, o any) { w.set(lease(o), false) },
		DeleteFunc: func(o any) { w.set(lease(o), true) },
	}); err != nil {
		t.Fatal(err)
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("slot Lease informer did not sync")
	}
	return w
}

// fleetStates returns each fleet node's state and applied profile, and
// its record's waiting.
func fleetStates(ctx context.Context, cs kubernetes.Interface) (map[string][3]string, error) {
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: fleetLabel})
	if err != nil {
		return nil, err
	}
	out := map[string][3]string{}
	for _, n := range list.Items {
		rec, _ := harness.RecordOf(&n)
		out[n.Name] = [3]string{n.Labels[carvev1.LabelState], n.Labels[carvev1.LabelApplied], rec.Waiting}
	}
	return out, nil
}

// waitFleet waits until every node but those in skip is in state with
// applied.
func waitFleet(ctx context.Context, t *testing.T, cs kubernetes.Interface, state, applied string, skip map[string]bool, limit time.Duration) {
	t.Helper()
	var last map[string][3]string
	err := harness.PollEvery(ctx, 250*time.Millisecond, limit, func(ctx context.Context) (bool, error) {
		s, err := fleetStates(ctx, cs)
		if err != nil {
			return false, harness.Retry(err)
		}
		last = s
		for node, st := range s {
			if !skip[node] && (st[0] != state || st[1] != applied) {
				return false, nil
			}
		}
		return len(s) == fleetSize, nil
	})
	if err != nil {
		t.Fatalf("fleet not %s with %s: %v\n%v", state, applied, err, last)
	}
}

// cleanFleet removes the fleet's Nodes, Leases and ConfigMap.
func cleanFleet(cs kubernetes.Interface) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cs.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: fleetLabel}); err != nil {
		return err
	}
	if err := cs.CoordinationV1().Leases(cmNamespace).DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: carvev1.LeaseLabelConfigMap + "=" + fleetCM}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return harness.DeleteProfiles(ctx, cs, cmNamespace, fleetCM)
}

// TestRolloutFleet runs 20 agents against the real API server, each change
// lasting seconds: the rollout bound is never exceeded and is used; an
// agent killed holding a slot loses it within the slot's duration; a
// profile that fails everywhere stops after maxFailures nodes, and a fixed
// file resumes the rollout.
func TestRolloutFleet(t *testing.T) {
	c := suite.Cluster(t)
	cs := c.Clientset()
	ctx := testCtx(t, 10*time.Minute)
	if err := cleanFleet(cs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cleanFleet(cs); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	const bounded = "{maxUnavailable: 3, maxFailures: 2}"
	applyProfilesNamed(ctx, t, cs, fleetFile("full", bounded, "start"))
	agents := make([]*fleetAgent, fleetSize)
	for i := range agents {
		a := &fleetAgent{node: fmt.Sprintf("carve-fleet-%02d", i), m: newSim(t, "h100-80gb*1"), dir: t.TempDir()}
		a.m.SetLatency(sim.UniformLatency(fleetOpTime))
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: a.node, Labels: map[string]string{fleetLabel: "true"}}}
		if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		startFleetAgent(t, c, a)
		agents[i] = a
	}
	t.Cleanup(func() {
		for _, a := range agents {
			if a.run.running() {
				a.run.stop(t)
			}
		}
		if t.Failed() {
			for _, a := range agents[:3] {
				t.Logf("%s log (tail):\n%s", a.node, harness.Tail(filepath.Join(a.dir, "agent.log"), 30))
			}
		}
	})
	waitFleet(ctx, t, cs, carvev1.StateSuccess, "full", nil, 2*time.Minute)
	slots := watchSlots(ctx, t, cs)

	// 1. All to MIG: 20 disruptive changes, at most 3 at once.
	start := time.Now()
	applyProfilesNamed(ctx, t, cs, fleetFile("balanced", bounded, "to MIG"))
	waitFleet(ctx, t, cs, carvev1.StateSuccess, "balanced", nil, 4*time.Minute)
	most := slots.take()
	t.Logf("20 nodes to balanced in %s, at most %d in a disruptive change at once", time.Since(start).Round(time.Second), most)
	if most > 3 || most < 2 {
		t.Errorf("at most %d nodes held a slot at once; want 2 or 3 (the bound 3, and used)", most)
	}

	// 2. An agent killed holding a slot loses it within the slot's
	// duration; the others go on, and it finishes once it is back.
	applyProfilesNamed(ctx, t, cs, fleetFile("small", bounded, "to small"))
	var slot, victim string
	if err := harness.PollEvery(ctx, 50*time.Millisecond, time.Minute, func(context.Context) (bool, error) {
		slot, victim = slots.anyHolder()
		return victim != "", nil
	}); err != nil {
		t.Fatalf("no node took a slot: %v", err)
	}
	var killed *fleetAgent
	for _, a := range agents {
		if a.node == victim {
			killed = a
		}
	}
	killed.run.stop(t)
	killedAt := time.Now()
	if err := harness.PollEvery(ctx, 50*time.Millisecond, time.Minute, func(context.Context) (bool, error) {
		return slots.holderOf(slot) != victim, nil
	}); err != nil {
		t.Fatalf("slot %s still held by the killed %s: %v", slot, victim, err)
	}
	if freed := time.Since(killedAt); freed > fleetSlot+2*fleetRetry+2*time.Second {
		t.Errorf("the killed agent's slot was free again after %s, want within its duration %s (plus a retry)", freed.Round(time.Millisecond), fleetSlot)
	} else {
		t.Logf("the killed %s's slot %s taken over after %s (slot duration %s)", victim, slot, time.Since(killedAt).Round(time.Millisecond), fleetSlot)
	}
	waitFleet(ctx, t, cs, carvev1.StateSuccess, "small", map[string]bool{victim: true}, 4*time.Minute)
	startFleetAgent(t, c, killed)
	waitFleet(ctx, t, cs, carvev1.StateSuccess, "small", nil, 2*time.Minute)
	if most := slots.take(); most > 3 {
		t.Errorf("%d nodes held a slot at once, bound 3", most)
	}

	// 3. A profile that fails on every node: the rollout halts after
	// maxFailures (2) failed nodes; those in flight then may fail too, the
	// rest are held back.
	for _, a := range agents {
		if err := a.m.InjectFault(sim.Fault{Call: "CreateGPUInstance", GPU: -1, Err: partition.ErrInsufficientResources}); err != nil {
			t.Fatal(err)
		}
	}
	since := time.Now()
	applyProfilesNamed(ctx, t, cs, fleetFile("half", bounded, "broken"))
	var states map[string][3]string
	failed, held := 0, 0
	if err := harness.PollEvery(ctx, 250*time.Millisecond, 2*time.Minute, func(ctx context.Context) (bool, error) {
		s, err := fleetStates(ctx, cs)
		if err != nil {
			return false, harness.Retry(err)
		}
		states, failed, held = s, 0, 0
		for _, st := range s {
			switch {
			case st[0] == carvev1.StateFailed:
				failed++
			case st[0] == carvev1.StatePending && strings.Contains(st[2], "halted"):
				held++
			}
		}
		return failed >= 2 && failed+held == fleetSize, nil
	}); err != nil {
		t.Fatalf("the rollout did not halt with every node failed or held back: %v\n%v", err, states)
	}
	t.Logf("broken profile: %d nodes failed, %d held back", failed, held)
	if failed > 2+3-1 {
		t.Errorf("%d nodes failed; want at most 4 (maxFailures 2, and up to 3 in flight when the budget ran out)\n%v", failed, states)
	}
	if _, err := harness.WaitConfigMapEvent(ctx, cs, cmNamespace, fleetCM, carvev1.ReasonRolloutHalted, since, 30*time.Second); err != nil {
		t.Errorf("no %s Event on the ConfigMap: %v", carvev1.ReasonRolloutHalted, err)
	}

	// 4. A fixed file, a new revision: the rollout resumes.
	for _, a := range agents {
		a.m.ClearFaults()
	}
	applyProfilesNamed(ctx, t, cs, fleetFile("half", bounded, "fixed"))
	waitFleet(ctx, t, cs, carvev1.StateSuccess, "half", nil, 4*time.Minute)
	if most := slots.take(); most > 3 {
		t.Errorf("%d nodes held a slot at once, bound 3", most)
	}
}

func applyProfilesNamed(ctx context.Context, t *testing.T, cs kubernetes.Interface, data string) {
	t.Helper()
	if err := harness.ApplyProfiles(ctx, cs, cmNamespace, fleetCM, data); err != nil {
		t.Fatal(err)
	}
}
