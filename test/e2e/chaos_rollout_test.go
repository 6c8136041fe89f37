package e2e

// A fleet rollout under faults, for `make chaos` (docs/reliability.md):
// twelve carve-agent processes, each on its own Node object and simulated
// GPUs, go through profile revisions under a rollout bound of 3 while one
// of them is killed, one frozen, and the API server stopped; a watcher
// outside the agents counts how many nodes are mid-change at once.

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/internal/chaos"
	"github.com/carve-dev/carve/test/cluster"
	"github.com/carve-dev/carve/test/harness"
)

// The fleet of TestChaosRolloutFleet: its ConfigMap (its Leases are
// labelled with it, apart from every other test's), the label on its
// Nodes, its size and bound.
const (
	chaosFleetCM    = "carve-chaos-fleet"
	chaosFleetLabel = "carve.dev/e2e-chaos-fleet"
	chaosFleetSize  = 12
	chaosFleetBound = 3
	chaosFleetSpec  = "h100-80gb*1"
	// chaosFleetRollout is the agents' rollout timing (the test hook
	// CARVE_TEST_ROLLOUT): slots expire 6 s after their last renewal.
	chaosFleetRollout = "slot=6s,retry=1s"
	chaosFleetSlot    = 6 * time.Second
)

const (
	scenarioFleet = "fleet rollout under faults (12 carve-agent processes, local cluster)"
	checkedFleet  = "Twelve carve-agent processes (the test build), each with its own Node object (no kubelet, `--advertise none`), its own " +
		"simulated H100 at the pace of real GPUs (`--sim-latency realistic`) and rollout slots that expire 6 s after their last renewal, " +
		"go through a new profile revision in each case under `rollout: {maxUnavailable: 3}`, while the fault strikes a node in the middle " +
		"of its change. A watcher outside the agents (a Node informer, and a List every 200 ms) counts the nodes whose record " +
		"(`carve.dev/partition`) says they are mid-change, at every event and every tick: never more than 3. Every node must reach " +
		"the profile (state success, `carve.dev/profile.applied`); every MIG operation of a node, as its simulator's op journal shows, " +
		"must come while the watcher saw that node mid-change; a killed or frozen node's slot Lease must still name it when it comes " +
		"back (the slot of a node mid-change is not taken over); and no slot Lease is left held at the end."
)

// fleetProc is one carve-agent process of the fleet, with its own
// directory (simulator state, op journal, state directory, log).
type fleetProc struct {
	node, dir string
	p         *harness.Process
}

func (a *fleetProc) journalPath() string { return filepath.Join(a.dir, "ops.log") }
func (a *fleetProc) logPath() string     { return filepath.Join(a.dir, "agent.log") }

// chaosFleet is the fleet of TestChaosRolloutFleet and what watches it.
type chaosFleet struct {
	c      *cluster.Cluster
	cs     kubernetes.Interface
	bin    string
	nodes  fleetNodes
	agents []*fleetProc
	watch  *midWatch
	ops    *opJournals
	// blamed are the nodes whose log tails a failure prints.
	mu     sync.Mutex
	blamed map[string]bool
}

// newChaosFleet builds the agent, creates the ConfigMap (profile full)
// and the Nodes, starts the watchers and the agents, and stops and removes
// them all when the test ends.
func newChaosFleet(ctx context.Context, t *testing.T, c *cluster.Cluster) *chaosFleet {
	t.Helper()
	f := &chaosFleet{c: c, cs: c.Clientset(), nodes: fleetNodes{label: chaosFleetLabel, size: chaosFleetSize}, blamed: map[string]bool{}}
	root, err := harness.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	if f.bin, err = harness.BuildAgent(ctx, root, t.TempDir(), harness.TestHooksTag); err != nil {
		t.Fatal(err)
	}
	if err := cleanFleet(f.cs, chaosFleetLabel, chaosFleetCM); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.stopAll(t) })
	applyProfilesNamed(ctx, t, f.cs, chaosFleetCM, chaosFleetFile("full", "start"))
	for i := range chaosFleetSize {
		a := &fleetProc{node: fmt.Sprintf("carve-cfleet-%02d", i), dir: t.TempDir()}
		f.agents = append(f.agents, a)
		if err := createFleetNode(ctx, f.cs, a.node, chaosFleetLabel); err != nil {
			t.Fatal(err)
		}
	}
	f.watch = watchMidChange(ctx, t, f.cs, chaosFleetLabel, chaosFleetBound, 200*time.Millisecond)
	f.ops = newOpJournals(f.agents)
	go f.ops.run(ctx, 100*time.Millisecond)
	for _, a := range f.agents {
		f.start(t, a)
	}
	return f
}

// chaosFleetFile is the fleet's profile file with default profile def;
// note makes a new revision.
func chaosFleetFile(def, note string) string {
	return fleetFile(def, fmt.Sprintf("{maxUnavailable: %d}", chaosFleetBound), note)
}

// start (re)starts a's agent process.
func (f *chaosFleet) start(t *testing.T, a *fleetProc) {
	t.Helper()
	args := []string{
		"--node-name", a.node, "--kubeconfig", f.c.Kubeconfig(), "--config-map", cmNamespace + "/" + chaosFleetCM,
		"--gpus", "sim:" + chaosFleetSpec, "--sim-state", filepath.Join(a.dir, "sim.json"), "--sim-latency", "realistic",
		"--advertise", "none", "--pod-resources-socket", "none", "--state-dir", filepath.Join(a.dir, "state"),
		"--metrics-addr", "127.0.0.1:0", "--log-level", "debug",
	}
	env := []string{"CARVE_TEST_ROLLOUT=" + chaosFleetRollout, "CARVE_TEST_SIM_OP_JOURNAL=" + a.journalPath()}
	p, err := harness.Start(f.bin, args, env, a.logPath())
	if err != nil {
		t.Fatal(err)
	}
	a.p = p
}

// blame marks a node whose log tail a failure prints.
func (f *chaosFleet) blame(node string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.blamed[node] = true
}

// stopAll stops every agent (SIGCONT first, for one left frozen), prints
// the blamed nodes' log tails if the test failed, and removes the fleet.
func (f *chaosFleet) stopAll(t *testing.T) {
	t.Helper()
	for _, a := range f.agents {
		if a.p == nil || a.p.Exited() {
			continue
		}
		_ = a.p.Signal(syscall.SIGCONT)
		if code, err := a.p.Stop(); err != nil || code != 0 {
			t.Errorf("%s: the agent stopped with code %d: %v", a.node, code, err)
		}
	}
	f.mu.Lock()
	blamed := maps.Clone(f.blamed)
	f.mu.Unlock()
	if t.Failed() {
		for _, a := range f.agents {
			if blamed[a.node] {
				t.Logf("%s log (tail):\n%s", a.node, harness.Tail(a.logPath(), 40))
			}
		}
		f.keepLogs(t)
	}
	if err := cleanFleet(f.cs, chaosFleetLabel, chaosFleetCM); err != nil {
		t.Errorf("cleanup: %v", err)
	}
}

// keepLogs copies every agent's log and MIG operation journal into the
// folder CARVE_E2E_KEEP names, if it is set, so that a failure can be read
// in full after the test's temporary folders are gone.
func (f *chaosFleet) keepLogs(t *testing.T) {
	t.Helper()
	dir := os.Getenv("CARVE_E2E_KEEP")
	if dir == "" {
		return
	}
	dir = filepath.Join(dir, t.Name())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("keep the fleet's logs: %v", err)
		return
	}
	for _, a := range f.agents {
		for _, src := range []string{a.logPath(), a.journalPath()} {
			b, err := os.ReadFile(src)
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, a.node+"-"+filepath.Base(src)), b, 0o644)
			}
			if err != nil {
				t.Logf("keep %s: %v", src, err)
			}
		}
	}
	t.Logf("the fleet's logs are kept in %s", dir)
}

// agent returns the fleet's agent of node.
func (f *chaosFleet) agent(node string) *fleetProc {
	for _, a := range f.agents {
		if a.node == node {
			return a
		}
	}
	return nil
}

// fleetFault is a fault of a phase: it strikes once a node is mid-change
// with afterOps MIG operations of the phase done.
type fleetFault func(f *chaosFleet, ctx context.Context, t *testing.T, cc *clusterCase, afterOps int)

// fleetPhase is one profile revision for the whole fleet, and its fault.
type fleetPhase struct {
	profile  string
	fault    string
	afterOps int
	inject   fleetFault
}

// fleetPhases are the phases of TestChaosRolloutFleet: in the short mode
// (make test) each fault once, after a node's first MIG operation; in the
// full mode (make chaos) each again, as soon as a node's record shows its
// change. The profiles go from whole GPUs to MIG, to another MIG layout,
// back to whole GPUs (short: the briefest change, where the 20 s outage
// weighs most), and so on, each a disruptive change on every node.
func fleetPhases() []fleetPhase {
	phases := []fleetPhase{
		{"balanced", "a node mid-change SIGKILLed after its first MIG operation, restarted 10 s later", 1, (*chaosFleet).killHolder},
		{"half", "a node mid-change frozen (SIGSTOP) after its first MIG operation for 15 s, then SIGCONT", 1, (*chaosFleet).freezeHolder},
		{"full", "kube-apiserver down for 20 s from a node's first MIG operation", 1, (*chaosFleet).outage},
	}
	if !chaos.Full() {
		return phases
	}
	return append(phases,
		fleetPhase{"small", "a node SIGKILLed as soon as its record shows its change, restarted 10 s later", 0, (*chaosFleet).killHolder},
		fleetPhase{"half", "a node frozen (SIGSTOP) as soon as its record shows its change, for 15 s, then SIGCONT", 0, (*chaosFleet).freezeHolder},
		fleetPhase{"balanced", "kube-apiserver down for 20 s from the first node's record showing its change", 0, (*chaosFleet).outage},
	)
}

// TestChaosRolloutFleet: a fleet of twelve carve-agent processes goes
// through a profile revision per phase under maxUnavailable 3 while a
// node mid-change is killed, frozen, or the API server is stopped;
// counted from outside the agents, never more than 3 nodes are
// mid-change at once. See checkedFleet and fleetPhases.
func TestChaosRolloutFleet(t *testing.T) {
	c := suite.Cluster(t)
	describeScenario(t, scenarioFleet, checkedFleet)
	ctx := testCtx(t, 15*time.Minute)
	began := time.Now()
	f := newChaosFleet(ctx, t, c)
	if states, err := f.nodes.wait(ctx, f.cs, carvev1.StateSuccess, "full", 3*time.Minute); err != nil {
		f.blameUnconverged(states, "full")
		t.Fatalf("the fleet did not reach full: %v\n%s", err, formatStates(states))
	}
	start := f.watch.take()
	f.checkOps(t, nil, f.ops.take())
	t.Logf("fleet of %d at full after %s (at most %d nodes mid-change at once)", chaosFleetSize, time.Since(began).Round(time.Second), start.most)
	profile := "full"
	for i, ph := range fleetPhases() {
		ok := t.Run(fmt.Sprintf("phase %d %s to %s", i+1, profile, ph.profile), func(t *testing.T) {
			cc := newClusterCase(t, scenarioFleet, fmt.Sprintf("%s to %s", profile, ph.profile), ph.fault)
			f.runPhase(ctx, t, cc, i+1, profile, ph)
		})
		profile = ph.profile
		if !ok {
			break
		}
	}
	t.Logf("TestChaosRolloutFleet took %s", time.Since(began).Round(time.Second))
}

// runPhase applies a new revision of the file with ph's profile, injects
// its fault, waits for the fleet to converge, and checks the phase.
func (f *chaosFleet) runPhase(ctx context.Context, t *testing.T, cc *clusterCase, n int, from string, ph fleetPhase) {
	t.Helper()
	f.watch.take()
	f.ops.take()
	start := time.Now()
	applyProfilesNamed(ctx, t, f.cs, chaosFleetCM, chaosFleetFile(ph.profile, fmt.Sprintf("phase %d", n)))
	ph.inject(f, ctx, t, cc, ph.afterOps)
	states, err := f.nodes.wait(ctx, f.cs, carvev1.StateSuccess, ph.profile, 3*time.Minute)
	seen := f.watch.take()
	ops := f.ops.take()
	t.Logf("phase %d: at most %d nodes mid-change at once (%s to %s, %s; %d MIG operations; converged after %s)",
		n, seen.most, from, ph.profile, ph.fault, len(ops), time.Since(start).Round(time.Second))
	cc.note(t, "at most %d nodes mid-change at once; %d MIG operations", seen.most, len(ops))
	if err != nil {
		f.blameUnconverged(states, ph.profile)
		cc.fail(t, "the fleet did not reach %s: %v\n%s\nmid-change timeline:\n%s", ph.profile, err, formatStates(states), f.watch.format(seen.timeline))
	}
	f.checkBound(t, cc, seen)
	f.checkOps(t, cc, ops)
	if err == nil {
		f.checkSettled(ctx, t, cc)
	}
	cc.note(t, "converged %s after the revision", time.Since(start).Round(time.Second))
}

// checkBound checks what the watcher saw in a phase (midProblems): never
// more than the bound mid-change at once, and at least 2.
func (f *chaosFleet) checkBound(t *testing.T, cc *clusterCase, seen midPhase) {
	t.Helper()
	for _, o := range seen.over {
		f.blameAll(o.text)
	}
	for _, p := range midProblems(f.watch, seen, 2) {
		cc.fail(t, "%s", p)
	}
}

// blameAll blames every fleet node named in s.
func (f *chaosFleet) blameAll(s string) {
	for _, a := range f.agents {
		if strings.Contains(s, a.node) {
			f.blame(a.node)
		}
	}
}

// blameUnconverged blames the nodes not at profile.
func (f *chaosFleet) blameUnconverged(states map[string]fleetState, profile string) {
	for node, st := range states {
		if st.state != carvev1.StateSuccess || st.applied != profile {
			f.blame(node)
		}
	}
}

// checkOps checks that every MIG operation in ops came while the watcher
// saw its node mid-change. cc nil: outside a phase (the fleet's start).
func (f *chaosFleet) checkOps(t *testing.T, cc *clusterCase, ops []fleetOp) {
	t.Helper()
	var bad []string
	for _, op := range ops {
		if !f.watch.covered(op.node, op.lo, op.hi) {
			f.blame(op.node)
			bad = append(bad, fmt.Sprintf("%s: %q done between %s and %s; seen mid-change %s",
				op.node, op.op, f.watch.since(op.lo), f.watch.since(op.hi), f.watch.spansOf(op.node)))
		}
	}
	if len(bad) == 0 {
		return
	}
	msg := fmt.Sprintf("%d MIG operations came while their node's record showed no change:\n  %s", len(bad), strings.Join(bad, "\n  "))
	if cc == nil {
		t.Error(msg)
		return
	}
	cc.fail(t, "%s", msg)
}

// checkSettled checks that, the fleet converged, the watcher soon sees no
// node mid-change and every slot Lease is released (within 10 s).
func (f *chaosFleet) checkSettled(ctx context.Context, t *testing.T, cc *clusterCase) {
	t.Helper()
	var mid map[string]carvev1.ChangeRecord
	var held map[string]string
	err := harness.PollEvery(ctx, 250*time.Millisecond, 10*time.Second, func(ctx context.Context) (bool, error) {
		h, err := slotHolders(ctx, f.cs, chaosFleetCM)
		if err != nil {
			return false, harness.Retry(err)
		}
		mid, held = f.watch.midNow(), h
		return len(mid) == 0 && len(h) == 0, nil
	})
	if err != nil {
		cc.fail(t, "after the fleet converged, nodes still mid-change %v and slot Leases still held %v: %v", mid, held, err)
	}
}

// slotHolders returns the slot Leases of the ConfigMap cm that name a
// holder, by name.
func slotHolders(ctx context.Context, cs kubernetes.Interface, cm string) (map[string]string, error) {
	list, err := cs.CoordinationV1().Leases(cmNamespace).List(ctx, metav1.ListOptions{LabelSelector: slotSelector(cm)})
	if err != nil {
		return nil, fmt.Errorf("slot Leases: %w", err)
	}
	out := map[string]string{}
	for _, l := range list.Items {
		if h := l.Spec.HolderIdentity; h != nil && *h != "" {
			out[l.Name] = *h
		}
	}
	return out, nil
}

// waitHolder waits for a node mid-change with at least afterOps MIG
// operations of the phase done, and returns its agent and its change.
func (f *chaosFleet) waitHolder(ctx context.Context, t *testing.T, afterOps int) (*fleetProc, carvev1.ChangeRecord) {
	t.Helper()
	var a *fleetProc
	var change carvev1.ChangeRecord
	err := harness.PollEvery(ctx, 20*time.Millisecond, 2*time.Minute, func(context.Context) (bool, error) {
		mid := f.watch.midNow()
		for _, node := range slices.Sorted(maps.Keys(mid)) {
			if f.ops.count(node) >= afterOps {
				a, change = f.agent(node), mid[node]
				return a != nil, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no node mid-change with %d MIG operations done: %v", afterOps, err)
	}
	f.blame(a.node)
	return a, change
}

// killHolder SIGKILLs a node's agent mid-change and restarts it 10 s
// later, once its slot has expired; meanwhile its slot must stay its own.
func (f *chaosFleet) killHolder(ctx context.Context, t *testing.T, cc *clusterCase, afterOps int) {
	t.Helper()
	a, change := f.waitHolder(ctx, t, afterOps)
	ops := f.ops.count(a.node)
	if err := a.p.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := a.p.Wait(10 * time.Second); err != nil {
		t.Fatalf("%s: %v", a.node, err)
	}
	cc.note(t, "%s SIGKILLed mid-change (slot %s) with %d MIG operations done", a.node, change.Slot, ops)
	sleepCtx(ctx, 10*time.Second)
	f.checkKept(ctx, t, cc, a, change, "killed 10 s before")
	f.start(t, a)
}

// freezeHolder freezes a node's agent (SIGSTOP) mid-change for 15 s,
// longer than its slot lasts, and lets it go on (SIGCONT); meanwhile its
// slot must stay its own.
func (f *chaosFleet) freezeHolder(ctx context.Context, t *testing.T, cc *clusterCase, afterOps int) {
	t.Helper()
	a, change := f.waitHolder(ctx, t, afterOps)
	ops := f.ops.count(a.node)
	if err := a.p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := a.p.Signal(syscall.SIGCONT); err != nil {
			t.Error(err)
		}
	}()
	cc.note(t, "%s frozen mid-change (slot %s) with %d MIG operations done", a.node, change.Slot, ops)
	sleepCtx(ctx, 15*time.Second)
	f.checkKept(ctx, t, cc, a, change, "frozen for 15 s")
}

// outage stops kube-apiserver for 20 s once a node is mid-change.
func (f *chaosFleet) outage(ctx context.Context, t *testing.T, cc *clusterCase, afterOps int) {
	t.Helper()
	a, change := f.waitHolder(ctx, t, afterOps)
	cc.note(t, "kube-apiserver stopped with %d nodes mid-change (among them %s, slot %s, %d MIG operations done)",
		len(f.watch.midNow()), a.node, change.Slot, f.ops.count(a.node))
	apiOutage(ctx, t, f.c, 20*time.Second, nil)
	waitNodeBack(ctx, t, f.c, time.Now())
}

// checkKept checks that a's node, killed or frozen mid-change for longer
// than a slot lasts, still shows its change and still holds its slot.
func (f *chaosFleet) checkKept(ctx context.Context, t *testing.T, cc *clusterCase, a *fleetProc, change carvev1.ChangeRecord, what string) {
	t.Helper()
	if _, ok := f.watch.midNow()[a.node]; !ok {
		cc.note(t, "%s, %s, no longer shows its change (it ended before the fault landed)", a.node, what)
		return
	}
	if change.Slot == "" {
		cc.fail(t, "%s's change names no slot under a bounded rollout: %+v", a.node, change)
		return
	}
	l, err := f.cs.CoordinationV1().Leases(cmNamespace).Get(ctx, change.Slot, metav1.GetOptions{})
	if err != nil {
		cc.fail(t, "%s's slot %s, %s: %v", a.node, change.Slot, what, err)
		return
	}
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	if holder != a.node {
		cc.fail(t, "%s, %s and still mid-change, lost its slot %s to %q", a.node, what, change.Slot, holder)
		return
	}
	cc.note(t, "%s, %s, still mid-change and holding %s", a.node, what, change.Slot)
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// fleetOp is a MIG operation of a node, as its op journal shows it: done
// after lo (the last read of the journal that lacked it began) and by hi
// (the read that found it ended).
type fleetOp struct {
	node, op string
	lo, hi   time.Time
}

// opJournals reads the fleet's simulator op journals as they grow.
type opJournals struct {
	files []*journalFile

	mu  sync.Mutex
	ops []fleetOp
}

// journalFile is one node's journal and how far it was read.
type journalFile struct {
	node, path string
	off        int64
	last       time.Time
}

// newOpJournals reads the journals of agents, from now.
func newOpJournals(agents []*fleetProc) *opJournals {
	j := &opJournals{}
	for _, a := range agents {
		j.files = append(j.files, &journalFile{node: a.node, path: a.journalPath(), last: time.Now()})
	}
	return j
}

// run reads the journals every period until ctx ends.
func (j *opJournals) run(ctx context.Context, every time.Duration) {
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		for _, f := range j.files {
			ops := f.read()
			j.mu.Lock()
			j.ops = append(j.ops, ops...)
			j.mu.Unlock()
		}
	}
}

// read returns the whole lines added to the journal since the last read.
func (f *journalFile) read() []fleetOp {
	began := time.Now()
	data, err := readFrom(f.path, f.off)
	if err != nil {
		return nil
	}
	end := strings.LastIndexByte(string(data), '\n')
	if end < 0 {
		f.last = began
		return nil
	}
	found := time.Now()
	var ops []fleetOp
	for line := range strings.SplitSeq(string(data[:end]), "\n") {
		ops = append(ops, fleetOp{node: f.node, op: line, lo: f.last, hi: found})
	}
	f.off += int64(end + 1)
	f.last = began
	return ops
}

// readFrom reads a file from offset off; a missing file reads empty.
func readFrom(path string, off int64) ([]byte, error) {
	fh, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("op journal: %w", err)
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil || st.Size() <= off {
		return nil, err
	}
	buf := make([]byte, st.Size()-off)
	if _, err := fh.ReadAt(buf, off); err != nil {
		return nil, fmt.Errorf("op journal %s: %w", path, err)
	}
	return buf, nil
}

// take returns the operations read since the last take.
func (j *opJournals) take() []fleetOp {
	j.mu.Lock()
	defer j.mu.Unlock()
	ops := j.ops
	j.ops = nil
	return ops
}

// count returns how many operations of node were read since the last
// take.
func (j *opJournals) count(node string) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	n := 0
	for _, op := range j.ops {
		if op.node == node {
			n++
		}
	}
	return n
}

// createFleetNode creates a Node object (no kubelet behind it) labelled
// label=true.
func createFleetNode(ctx context.Context, cs kubernetes.Interface, name, label string) error {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{label: "true"}}}
	if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create node %s: %w", name, err)
	}
	return nil
}

// formatStates writes a fleet's states, one node a line, sorted.
func formatStates(states map[string]fleetState) string {
	var out []string
	for node, st := range states {
		out = append(out, fmt.Sprintf("  %s: state %s, applied %q, waiting %q, change %q, last error %q", node, st.state, st.applied, st.waiting, st.change, st.lastError))
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}
