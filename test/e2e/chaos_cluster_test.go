package e2e

// The cluster scenarios of `make chaos` (docs/reliability.md): faults of
// the cluster around the agent rather than of the GPUs. A kubelet restart
// and a 30 s API server outage in the middle of an apply, a storm of XIDs,
// a pod holding devices across a window change under each drain policy,
// and the agent's clock stepping across a window boundary. Each case is
// recorded with chaos.Recorder("cluster") and asserted as a test. The
// short mode (make test) tries each fault once; chaos.Full() (make chaos)
// repeats them at more points.
//
// The tests are in this order on purpose: after the API server outage the
// scheduler and the kubelet take up to a minute to watch pods again (their
// reflectors back off), so the tests that start no pod (clock, XIDs) come
// next, and the one that does last.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/carve-dev/carve/agent"
	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/internal/chaos"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/plugin"
	"github.com/carve-dev/carve/rollout"
	"github.com/carve-dev/carve/test/cluster"
	"github.com/carve-dev/carve/test/harness"
	"github.com/carve-dev/carve/timeslice"
	"github.com/carve-dev/carve/xidpolicy"
)

// The scenarios of the cluster records, one table each in the report.
const (
	scenarioKubeletRestart = "kubelet restart mid-apply"
	scenarioAPIOutage      = "API server outage mid-apply"
	scenarioXIDStorm       = "XID storm"
	scenarioDrainWindow    = "pod across a window change"
	scenarioClockStep      = "clock step across a window boundary"
)

// clusterCase is one fault a test of this file tried. It is written to
// the chaos records when its test ends: survived unless the test failed,
// with whatever the fault cost.
type clusterCase struct {
	mu    sync.Mutex
	rec   chaos.Record
	lost  []string
	notes []string
}

// newClusterCase starts the record of a case. Call it before anything
// else registers a cleanup, so that the record is written last and counts
// every failure of the test.
func newClusterCase(t *testing.T, scenario, name, fault string) *clusterCase {
	t.Helper()
	cc := &clusterCase{rec: chaos.Record{Scenario: scenario, Case: name, Fault: fault}}
	rec := chaos.NewRecorder("cluster")
	start := time.Now()
	t.Cleanup(func() {
		cc.mu.Lock()
		r := cc.rec
		r.Survived = !t.Failed()
		r.Lost = strings.Join(cc.lost, "; ")
		r.Detail = strings.Join(append(slices.Clone(cc.notes), "took "+time.Since(start).Round(time.Second).String()), "; ")
		cc.mu.Unlock()
		if err := rec.Add(r); err != nil {
			t.Errorf("chaos record: %v", err)
		}
	})
	return cc
}

// describeScenario records what the cases of a scenario check, for the
// text under its heading in the report.
func describeScenario(t *testing.T, scenario, checked string) {
	t.Helper()
	if err := chaos.NewRecorder("cluster").Describe(scenario, checked); err != nil {
		t.Errorf("chaos record: %v", err)
	}
}

// lose fails the test with something the fault cost, and records it.
func (cc *clusterCase) lose(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	cc.mu.Lock()
	cc.lost = append(cc.lost, msg)
	cc.mu.Unlock()
	t.Errorf("lost: %s", msg)
}

// fail fails the test for a check that held no loss (a state, a count),
// and says why in the record's detail.
func (cc *clusterCase) fail(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	cc.mu.Lock()
	cc.notes = append(cc.notes, "failed: "+msg)
	cc.mu.Unlock()
	t.Error(msg)
}

// note adds a line to the record's detail and to the test log.
func (cc *clusterCase) note(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	cc.mu.Lock()
	cc.notes = append(cc.notes, msg)
	cc.mu.Unlock()
	t.Log(msg)
}

// opHook is the agent's AfterOp hook in these tests. It counts the GPU
// operations, can hold the apply after one of them until the test has
// injected its fault, and after each op that destroys a device (destroy-ci,
// or a MIG mode change or reset of a whole GPU) asks the kubelet whether a
// pod holds that device: the one thing carve must never do.
type opHook struct {
	m    *sim.Machine
	pods *plugin.PodResourcesClient

	mu        sync.Mutex
	done      int
	holdAt    int           // op count to hold the apply at; 0 for none
	held      chan struct{} // closed once the apply is held
	resume    chan struct{} // closed to let it go on
	violated  []string      // devices destroyed while a pod held them
	checked   int           // destroys the kubelet was asked about
	unchecked int           // destroys the kubelet could not be asked about
}

// newOpHook returns a hook for the agent on m that asks the cluster's
// kubelet.
func newOpHook(c *cluster.Cluster, m *sim.Machine) *opHook {
	return &opHook{m: m, pods: plugin.NewPodResourcesClient(c.PodResourcesSocket(), 3*time.Second)}
}

// afterOp is the hook (agent.Config.AfterOp); it never fails the apply.
func (h *opHook) afterOp(gpu, step int, op partition.Op) error {
	if gone := h.destroyed(gpu, op); gone != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		inUse, err := h.pods.InUse(ctx)
		cancel()
		h.mu.Lock()
		switch {
		case err != nil:
			h.unchecked++
		case inUse.Holds(gone):
			h.violated = append(h.violated, fmt.Sprintf("GPU %d op %d %s destroyed %s while a pod held it", gpu, step, op, gone))
			h.checked++
		default:
			h.checked++
		}
		h.mu.Unlock()
	}
	h.mu.Lock()
	h.done++
	var wait chan struct{}
	if h.holdAt > 0 && h.done >= h.holdAt {
		close(h.held)
		wait, h.holdAt = h.resume, 0
	}
	h.mu.Unlock()
	if wait != nil {
		select {
		case <-wait:
		case <-time.After(3 * time.Minute): // a test that never lets go
		}
	}
	return nil
}

// destroyed returns the device an op destroys: the MIG device of a
// destroy-ci, the whole GPU of a MIG mode change or reset; "" for others.
func (h *opHook) destroyed(gpu int, op partition.Op) string {
	switch op.Kind {
	case partition.OpDestroyCI:
		return op.UUID
	case partition.OpEnableMIG, partition.OpDisableMIG, partition.OpResetGPU:
		d, err := h.m.Device(gpu)
		if err != nil {
			return ""
		}
		u, err := d.UUID()
		if err != nil {
			return ""
		}
		return u
	}
	return ""
}

// holdAfter holds the apply once k more ops are done. It returns a channel
// closed when the apply is held, and release, which lets it go on (any
// number of times; the test's cleanup calls it too).
func (h *opHook) holdAfter(t *testing.T, k int) (held <-chan struct{}, release func()) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.holdAt = h.done + k
	h.held, h.resume = make(chan struct{}), make(chan struct{})
	var once sync.Once
	resume := h.resume
	release = func() { once.Do(func() { close(resume) }) }
	t.Cleanup(release)
	return h.held, release
}

// check records every device the hook saw destroyed while held, and how
// many destroys it checked since the last check.
func (h *opHook) check(t *testing.T, cc *clusterCase) {
	t.Helper()
	h.mu.Lock()
	violated, checked, unchecked := h.violated, h.checked, h.unchecked
	h.violated, h.checked, h.unchecked = nil, 0, 0
	h.mu.Unlock()
	for _, v := range violated {
		cc.lose(t, "%s", v)
	}
	msg := fmt.Sprintf("%d destroys checked against the kubelet's assignments", checked)
	if unchecked > 0 {
		msg += fmt.Sprintf(", %d unchecked (the kubelet was away)", unchecked)
	}
	cc.note(t, "%s", msg)
}

// kubeletAllocatable asks the kubelet (PodResources
// GetAllocatableResources) for the healthy devices of every carve resource:
// what the device plugin serves it, without the API server.
func kubeletAllocatable(ctx context.Context, socket string) (map[string][]string, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("PodResources %s: %w", socket, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := podresourcesapi.NewPodResourcesListerClient(conn).GetAllocatableResources(ctx, &podresourcesapi.AllocatableResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("GetAllocatableResources: %w", err)
	}
	out := map[string][]string{}
	for _, d := range resp.GetDevices() {
		if res := d.GetResourceName(); strings.HasPrefix(res, harness.ResourcePrefix) && len(d.GetDeviceIds()) > 0 {
			out[res] = append(out[res], d.GetDeviceIds()...)
		}
	}
	for _, ids := range out {
		slices.Sort(ids)
	}
	return out, nil
}

// machineDevices returns the device IDs carve advertises for the GPUs as
// they are, without sharing: each complete MIG instance under its
// profile's resource, each GPU with MIG off as nvidia.com/gpu.
func machineDevices(gpus []partition.GPU) map[string][]string {
	out := map[string][]string{}
	for _, g := range gpus {
		if g.MIGMode != partition.MIGEnabled {
			out[gpu] = append(out[gpu], g.UUID)
			continue
		}
		for _, in := range g.Instances {
			if in.Complete() {
				res := carvev1.ResourceName(in.Profile, false)
				out[res] = append(out[res], in.UUID())
			}
		}
	}
	for _, ids := range out {
		slices.Sort(ids)
	}
	return out
}

// layoutProblems compares the GPUs with a MIG target applied to each (nil:
// MIG off): an instance without its compute instance, or one too many or
// too few of a profile, is a problem (an orphan or a missing instance).
func layoutProblems(gpus []partition.GPU, want map[string]int) []string {
	var out []string
	for _, g := range gpus {
		if (g.MIGMode == partition.MIGEnabled) != (want != nil) {
			out = append(out, fmt.Sprintf("GPU %d: MIG %s", g.Index, g.MIGMode))
			continue
		}
		got := map[string]int{}
		for _, in := range g.Instances {
			got[in.Profile]++
			if !in.Complete() {
				out = append(out, fmt.Sprintf("GPU %d: orphan GPU instance %d (%s) without a complete compute instance", g.Index, in.GIID, in.Profile))
			}
		}
		if want != nil && !maps.Equal(got, want) {
			out = append(out, fmt.Sprintf("GPU %d holds %v, want %v", g.Index, got, want))
		}
	}
	return out
}

// waitKubeletMatches waits until the GPUs hold exactly the layout want
// (per GPU) and the kubelet's allocatable devices are exactly theirs. It
// reads nothing from the API server, so it works in an outage. It returns
// the last difference seen, empty when they matched.
func waitKubeletMatches(ctx context.Context, c *cluster.Cluster, m *sim.Machine, want map[string]int, limit time.Duration) string {
	var last string
	err := harness.Poll(ctx, limit, func(ctx context.Context) (bool, error) {
		gpus, err := partition.ReadInventory(m)
		if err != nil {
			return false, fmt.Errorf("read the GPUs: %w", err)
		}
		if p := layoutProblems(gpus, want); len(p) > 0 {
			last = "GPUs: " + strings.Join(p, "; ")
			return false, nil
		}
		got, err := kubeletAllocatable(ctx, c.PodResourcesSocket())
		if err != nil {
			last = err.Error()
			return false, harness.Retry(err)
		}
		if exp := machineDevices(gpus); !maps.EqualFunc(got, exp, slices.Equal) {
			last = fmt.Sprintf("the kubelet has %v, the GPUs %v", got, exp)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Sprintf("%s (%v)", last, err)
	}
	return ""
}

// deleteFailureLease removes this node's rollout failure Lease that an
// earlier test may have left, so that checkNoFailureLease sees only this
// test's.
func deleteFailureLease(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	name := rollout.FailureName(cmName, c.NodeName())
	err := c.Clientset().CoordinationV1().Leases(cmNamespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("delete Lease %s: %v", name, err)
	}
}

// checkNoFailureLease records a rollout failure Lease of this node that
// stays for 15 s: a change that converged must not count against the
// fleet's failure budget, where it would halt the rollout of other nodes.
func checkNoFailureLease(ctx context.Context, t *testing.T, c *cluster.Cluster, cc *clusterCase) {
	t.Helper()
	name := rollout.FailureName(cmName, c.NodeName())
	var revision string
	err := harness.Poll(ctx, 15*time.Second, func(ctx context.Context) (bool, error) {
		l, err := c.Clientset().CoordinationV1().Leases(cmNamespace).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return true, nil
		case err != nil:
			return false, harness.Retry(err)
		}
		revision = l.Annotations[carvev1.LeaseAnnotationRevision]
		return false, nil
	})
	if err != nil {
		cc.fail(t, "the rollout counts the change as failed (Lease %s, revision %s) though the node converged; with maxFailures 1 it halts every other node (%v)",
			name, revision, err)
	}
}

// countEvents returns how many Events of a reason the node got since.
func countEvents(ctx context.Context, t *testing.T, c *cluster.Cluster, reason string, since time.Time) int {
	t.Helper()
	evs, err := harness.NodeEvents(ctx, c.Clientset(), c.NodeName(), reason)
	if err != nil {
		t.Errorf("%v", err)
		return 0
	}
	n := 0
	for _, e := range evs {
		if !e.LastTimestamp.Time.Before(since.Truncate(time.Second)) || !e.EventTime.Time.Before(since) {
			n += max(int(e.Count), 1)
		}
	}
	return n
}

// applyChaosProfiles are the two layouts the apply scenarios switch
// between on every GPU. A pod holds one 1g.10gb device; both layouts have
// room for it wherever it sits, so the planner keeps it.
const applyChaosProfiles = `version: v1
defaultProfile: sevens
profiles:
  sevens:
    - gpus: all
      mig: {1g.10gb: 7}
  halves:
    - gpus: all
      mig: {3g.40gb: 1, 1g.10gb: 3}
`

// applyChecks is what the apply scenarios check after each fault.
const applyChecks = "After it the agent reaches state success with the new profile, the GPUs hold exactly its instances (no orphan), " +
	"the kubelet's allocatable devices (PodResources) and the node's allocatable are exactly the new devices, the node record lists them, " +
	"the pod still runs and holds its device, no op destroyed a device a pod held, and the rollout counts no failure."

// mig3g is the resource of the 3g.40gb devices of the halves layout.
const mig3g = "nvidia.com/mig-3g.40gb"

// applyLayout is the MIG target of a profile of applyChaosProfiles on each
// GPU, and what the node's allocatable is with two GPUs.
func applyLayout(profile string) (perGPU map[string]int, allocatable map[string]int64) {
	if profile == "halves" {
		return map[string]int{"3g.40gb": 1, "1g.10gb": 3}, map[string]int64{mig3g: 2, mig1g: 6}
	}
	return map[string]int{"1g.10gb": 7}, map[string]int64{mig1g: 14}
}

// applyChaos is an agent on two simulated H100s that realises
// applyChaosProfiles at the pace of real GPUs (sim.RealisticLatency), with
// a pod holding one of its devices: the ground the apply scenarios inject
// their faults on.
type applyChaos struct {
	c       *cluster.Cluster
	m       *sim.Machine
	hook    *opHook
	run     *agentRun
	pod     string
	held    string // the MIG device the pod holds
	profile string // the profile in force
}

// newApplyChaos starts the agent with sevens in force and the holding pod.
func newApplyChaos(ctx context.Context, t *testing.T, c *cluster.Cluster, pod string) *applyChaos {
	t.Helper()
	freshNode(t, c)
	deleteFailureLease(ctx, t, c)
	m := newSim(t, "h100-80gb*2")
	e := &applyChaos{c: c, m: m, hook: newOpHook(c, m), pod: pod, profile: "sevens"}
	applyProfiles(ctx, t, c, applyChaosProfiles)
	e.run = startAgent(t, c, e.m, func(cfg *agent.Config) { cfg.AfterOp = e.hook.afterOp })
	waitState(ctx, t, c, carvev1.StateSuccess, "sevens")
	waitAllocatable(ctx, t, c.Clientset(), c.NodeName(), map[string]int64{mig1g: 14})
	createPod(ctx, t, c.Clientset(), harness.DevicePod(pod, mig1g, 1, time.Hour))
	waitHolds(ctx, t, c, pod)
	e.held = heldDevice(ctx, t, c, pod)
	e.m.SetLatency(sim.RealisticLatency())
	return e
}

// heldDevice returns the one device the kubelet says the pod holds.
func heldDevice(ctx context.Context, t *testing.T, c *cluster.Cluster, pod string) string {
	t.Helper()
	var held []string
	client := plugin.NewPodResourcesClient(c.PodResourcesSocket(), 0)
	err := harness.Poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		u, err := client.InUse(ctx)
		if err != nil {
			return false, harness.Retry(err)
		}
		held = nil
		for _, a := range u.Assignments {
			if a.Pod == pod {
				held = append(held, a.UUIDs...)
			}
		}
		return len(held) > 0, nil
	})
	if err != nil || len(held) != 1 {
		t.Fatalf("pod %s holds %v, want one device (%v)", pod, held, err)
	}
	return held[0]
}

// planOps counts the ops of the change of the GPUs of m to target (per
// GPU; nil: MIG off) as the agent plans it, busy kept.
func planOps(t *testing.T, m *sim.Machine, target map[string]int, busy ...string) int {
	t.Helper()
	node, err := partition.ReadNode(m)
	if err != nil {
		t.Fatal(err)
	}
	inUse := map[string]bool{}
	for _, u := range busy {
		inUse[u] = true
	}
	n := 0
	for _, g := range node.GPUs {
		p, err := partition.PlanGPU(g, node.Models[g.Index], partition.Target{MIG: target}, inUse)
		if err != nil {
			t.Fatalf("plan GPU %d: %v", g.Index, err)
		}
		n += len(p.Ops)
	}
	return n
}

// next is the profile the next change goes to: the other one.
func (e *applyChaos) next() string {
	if e.profile == "sevens" {
		return "halves"
	}
	return "sevens"
}

// change switches the node to the other profile and returns it; once k
// ops of the apply are done, the apply is held until fault has put its
// fault in place and called release (or returned).
func (e *applyChaos) change(ctx context.Context, t *testing.T, cc *clusterCase, k int, fault func(release func())) string {
	t.Helper()
	to := e.next()
	held, release := e.hook.holdAfter(t, k)
	labelled := time.Now()
	setProfileLabel(ctx, t, e.c, to)
	e.profile = to
	select {
	case <-held:
	case <-time.After(3 * time.Minute):
		t.Fatalf("the apply of %s never reached op %d", to, k)
	}
	cc.note(t, "op %d done %s after the label change", k, time.Since(labelled).Round(100*time.Millisecond))
	fault(release)
	release()
	return to
}

// checkConverged checks that the change to profile completed with nothing
// lost: the agent reports it, the GPUs hold exactly its layout (no orphan
// instance), the kubelet's devices and the node's allocatable are theirs,
// the node record lists them, the pod still holds its device, no held
// device was destroyed, and the rollout counts no failure.
func (e *applyChaos) checkConverged(ctx context.Context, t *testing.T, cc *clusterCase, profile string) {
	t.Helper()
	perGPU, alloc := applyLayout(profile)
	n := waitState(ctx, t, e.c, carvev1.StateSuccess, profile)
	if diff := waitKubeletMatches(ctx, e.c, e.m, perGPU, 90*time.Second); diff != "" {
		cc.lose(t, "the GPUs or the kubelet's devices are not profile %s: %s", profile, diff)
	}
	if got, err := harness.WaitAllocatable(ctx, e.c.Clientset(), e.c.NodeName(), alloc, 90*time.Second); err != nil {
		cc.lose(t, "allocatable %v, want %v", got, alloc)
	}
	rec, err := harness.RecordOf(n)
	if err != nil {
		t.Fatal(err)
	}
	var recorded []string
	for _, g := range rec.GPUs {
		for _, in := range g.Instances {
			recorded = append(recorded, in.UUID)
		}
	}
	slices.Sort(recorded)
	if on := migUUIDs(t, e.m); !slices.Equal(recorded, on) {
		cc.fail(t, "the node record lists MIG devices %v, the GPUs hold %v", recorded, on)
	}
	e.checkHeld(ctx, t, cc)
	e.hook.check(t, cc)
	checkNoFailureLease(ctx, t, e.c, cc)
	if !e.run.running() {
		cc.fail(t, "the agent stopped")
	}
}

// checkHeld checks that the pod still runs and holds its device, which
// still exists.
func (e *applyChaos) checkHeld(ctx context.Context, t *testing.T, cc *clusterCase) {
	t.Helper()
	if ph := harness.PodPhase(ctx, e.c.Clientset(), metav1.NamespaceDefault, e.pod); ph != corev1.PodRunning {
		cc.lose(t, "the pod holding %s is %s, want Running", e.held, ph)
	}
	if !slices.Contains(migUUIDs(t, e.m), e.held) {
		cc.lose(t, "the instance %s the pod holds was destroyed", e.held)
	}
	// A kubelet just started lists a pod only once it has read it from
	// the API server again.
	client := plugin.NewPodResourcesClient(e.c.PodResourcesSocket(), 0)
	var last *plugin.InUse
	err := harness.Poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		u, err := client.InUse(ctx)
		if err != nil {
			return false, harness.Retry(err)
		}
		last = u
		return u.Holds(e.held), nil
	})
	if err != nil {
		cc.lose(t, "the kubelet no longer assigns %s to pod %s (it has %v): %v", e.held, e.pod, last, err)
	}
}

// settled reports whether the node is in state success with the profile
// of the last change, so that a change after a failed case still starts
// from a known layout.
func (e *applyChaos) settled(ctx context.Context) bool {
	_, err := harness.WaitState(ctx, e.c.Clientset(), e.c.NodeName(), carvev1.StateSuccess, e.profile, 30*time.Second)
	return err == nil
}

// applyPoints are where in an apply the faults come, as fractions of its
// ops (0: after the first op, 1: after the last one, before the devices
// are advertised), in the short or the full mode; the changes alternate
// between the two layouts.
func applyPoints(short, full []float64) []float64 {
	if chaos.Full() {
		return full
	}
	return short
}

// opAt is the op after which a fault comes: at of n, at least the first.
func opAt(at float64, n int) int { return min(n, max(1, int(at*float64(n)+0.5))) }

// opPlace says where op k of n is in an apply, for the report's faults.
func opPlace(k, n int) string {
	switch k {
	case 1:
		return "after the first op"
	case n:
		return "after the last op, before the devices are advertised"
	}
	return "in the middle of the apply"
}

// TestChaosKubeletRestartMidApply: the kubelet is stopped while the agent
// applies a MIG change at the pace of real GPUs, held after op k until it
// is down, and started again while the apply goes on. The plugin
// registers again, the apply finishes, the kubelet ends with exactly the
// new devices, no orphan instance is left, and a pod keeps the device it
// holds. Short mode: once, a third into the apply; full mode: five
// changes, the fault after the first op, half way, after the last op in
// both directions, and a third in.
func TestChaosKubeletRestartMidApply(t *testing.T) {
	c := suite.Cluster(t)
	describeScenario(t, scenarioKubeletRestart, "The agent, in process, applies a MIG change on two simulated H100s at the pace of real GPUs "+
		"(`--sim-latency realistic`) while a pod holds one of its 1g.10gb devices. The apply is held after op k, the kubelet stopped, the apply let go on "+
		"and the kubelet started again. "+applyChecks)
	ctx := testCtx(t, 20*time.Minute)
	e := newApplyChaos(ctx, t, c, "chaos-kubelet")
	for _, at := range applyPoints([]float64{0.35}, []float64{0, 0.5, 1, 1, 0.35}) {
		to := e.next()
		perGPU, _ := applyLayout(to)
		n := planOps(t, e.m, perGPU, e.held)
		k := opAt(at, n)
		name := fmt.Sprintf("%s to %s, kubelet restarted after op %d of %d", e.profile, to, k, n)
		ok := t.Run(name, func(t *testing.T) {
			cc := newClusterCase(t, scenarioKubeletRestart, name, "kubelet stopped "+opPlace(k, n)+", started again while the apply goes on")
			since := time.Now()
			e.change(ctx, t, cc, k, func(release func()) { restartKubeletHeld(ctx, t, cc, c, release) })
			e.checkConverged(ctx, t, cc, to)
			if n := countEvents(ctx, t, c, carvev1.ReasonAdvertiseFailed, since); n > 0 {
				cc.note(t, "%d AdvertiseFailed Events while the kubelet was away", n)
			}
			cc.note(t, "converged %s after the change began", time.Since(since).Round(100*time.Millisecond))
		})
		if !ok && !e.settled(ctx) {
			break
		}
	}
}

// restartKubeletHeld stops the kubelet, lets the held apply go on, and
// starts the kubelet again.
func restartKubeletHeld(ctx context.Context, t *testing.T, cc *clusterCase, c *cluster.Cluster, release func()) {
	t.Helper()
	stopped := time.Now()
	err := c.StopKubelet()
	release()
	if err != nil {
		t.Fatalf("stop the kubelet: %v", err)
	}
	if err := c.StartKubelet(ctx); err != nil {
		t.Fatalf("start the kubelet: %v", err)
	}
	if err := c.WaitNodeReady(ctx); err != nil {
		t.Fatalf("node not Ready after the kubelet restart: %v", err)
	}
	cc.note(t, "kubelet away for %s", time.Since(stopped).Round(100*time.Millisecond))
}

// TestChaosAPIServerOutageMidApply: the API server is stopped for 30 s
// while the agent applies a MIG change, held after op k until the API
// server is down. The apply goes on from the agent's caches while its
// rollout slot is valid (its last renewal within the fence, 10 s): its
// devices reach the kubelet during the outage, or the fence stops it at
// an operation boundary (a RolloutFenced Event) and it finishes once the
// API server is back; then the node's state, labels, record and Events
// catch up, and nothing is lost. Short mode: once, a third into the apply; full mode: three
// changes, the outage from a third in, after the last op and after the
// first.
func TestChaosAPIServerOutageMidApply(t *testing.T) {
	c := suite.Cluster(t)
	describeScenario(t, scenarioAPIOutage, "The agent, in process, applies a MIG change on two simulated H100s at the pace of real GPUs "+
		"while a pod holds one of its 1g.10gb devices. The apply is held after op k, kube-apiserver stopped, the apply let go on, and "+
		"kube-apiserver started again 30 s after it stopped. The apply goes on while the agent's rollout slot is valid (its last renewal within 10 s): "+
		"the new devices reach the kubelet during the outage, or the agent stops at an operation boundary (a RolloutFenced Event) and finishes once kube-apiserver is back. "+applyChecks+
		" The change's Repartitioned Event reaches the API server.")
	ctx := testCtx(t, 20*time.Minute)
	e := newApplyChaos(ctx, t, c, "chaos-outage")
	for _, at := range applyPoints([]float64{0.3}, []float64{0.3, 1, 0}) {
		to := e.next()
		perGPU, _ := applyLayout(to)
		n := planOps(t, e.m, perGPU, e.held)
		k := opAt(at, n)
		name := fmt.Sprintf("%s to %s, API server down for 30 s from op %d of %d", e.profile, to, k, n)
		ok := t.Run(name, func(t *testing.T) {
			cc := newClusterCase(t, scenarioAPIOutage, name, "kube-apiserver down for 30 s from "+opPlace(k, n))
			since := time.Now()
			var during string
			e.change(ctx, t, cc, k, func(release func()) { during = apiOutageHeld(ctx, t, cc, e, perGPU, release) })
			back := time.Now()
			if during != "" {
				if _, err := harness.WaitEvent(ctx, c.Clientset(), c.NodeName(), carvev1.ReasonRolloutFenced, "", since, 2*time.Minute); err != nil {
					cc.lose(t, "during the outage the change neither reached the kubelet (%s) nor stopped at the rollout's fence: %v", during, err)
				} else {
					cc.note(t, "the change stopped at the rollout's fence during the outage (RolloutFenced), and went on once the API server was back")
				}
			}
			waitState(ctx, t, c, carvev1.StateSuccess, to)
			cc.note(t, "state and labels caught up %s after the API server came back", time.Since(back).Round(100*time.Millisecond))
			e.checkConverged(ctx, t, cc, to)
			cc.note(t, "checked %s after the API server came back", time.Since(back).Round(100*time.Millisecond))
			if _, err := harness.WaitEvent(ctx, c.Clientset(), c.NodeName(), carvev1.ReasonRepartitioned, "profile "+to+" (label) applied", since, 2*time.Minute); err != nil {
				cc.fail(t, "the Repartitioned Event of the change never reached the API server: %v", err)
			}
			cc.note(t, "the change's Event reached the API server %s after it came back", time.Since(back).Round(100*time.Millisecond))
			waitNodeBack(ctx, t, c, back)
			cc.note(t, "the node was Ready again %s after it came back", time.Since(back).Round(100*time.Millisecond))
		})
		if !ok && !e.settled(ctx) {
			break
		}
	}
}

// waitNodeBack waits until the kubelet has renewed the node's Lease after
// the API server came back at back, and the node is Ready without the
// taints of an unreachable node, which the node controller may have set
// meanwhile: the next test then schedules pods at once.
func waitNodeBack(ctx context.Context, t *testing.T, c *cluster.Cluster, back time.Time) {
	t.Helper()
	err := harness.Poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		l, err := c.Clientset().CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, c.NodeName(), metav1.GetOptions{})
		if err != nil {
			return false, harness.Retry(err)
		}
		return l.Spec.RenewTime != nil && l.Spec.RenewTime.After(back), nil
	})
	if err == nil {
		err = c.WaitNodeReady(ctx)
	}
	if err != nil {
		t.Fatalf("the node did not come back after the outage: %v", err)
	}
}

// apiOutageHeld stops the API server, lets the held apply go on, waits for
// the GPUs and the kubelet to show the layout perGPU, and starts the API
// server again 30 s after it stopped. It returns what the kubelet still
// lacked when the outage ended, empty if nothing.
func apiOutageHeld(ctx context.Context, t *testing.T, cc *clusterCase, e *applyChaos, perGPU map[string]int, release func()) string {
	t.Helper()
	var diff string
	apiOutage(ctx, t, e.c, 30*time.Second, func(stopped, end time.Time) {
		release()
		diff = waitKubeletMatches(ctx, e.c, e.m, perGPU, time.Until(end))
		if diff == "" {
			cc.note(t, "the new devices reached the kubelet %s into the outage", time.Since(stopped).Round(100*time.Millisecond))
		}
		if !e.run.running() {
			t.Error("the agent stopped during the outage")
		}
	})
	return diff
}

// apiOutage stops kube-apiserver, runs during (nil: nothing) while it is
// down, given when it stopped and when it is to start again, and starts it
// again d after it stopped (also when the test fails meanwhile). It
// returns when the API server is back.
func apiOutage(ctx context.Context, t *testing.T, c *cluster.Cluster, d time.Duration, during func(stopped, end time.Time)) {
	t.Helper()
	stopped := time.Now()
	err := c.StopAPIServer()
	up := false
	defer func() {
		if !up {
			if err := c.StartAPIServer(context.Background()); err != nil {
				t.Errorf("start the API server: %v", err)
			}
		}
	}()
	if err != nil {
		t.Fatalf("stop the API server: %v", err)
	}
	end := stopped.Add(d)
	if during != nil {
		during(stopped, end)
	}
	time.Sleep(time.Until(end))
	if err := c.StartAPIServer(ctx); err != nil {
		t.Fatalf("start the API server: %v", err)
	}
	up = true
}

// clockStepProfiles: two 3g.40gb devices by default, seven 1g.10gb in the
// daily window soon (03:00 UTC, one hour), so that every switch is a MIG
// change whose ops the simulator logs.
const clockStepProfiles = `version: v1
defaultProfile: halves
profiles:
  halves:
    - gpus: all
      mig: {3g.40gb: 2}
  sevens:
    - gpus: all
      mig: {1g.10gb: 7}
windows:
  - name: soon
    schedule: "0 3 * * *"
    duration: 1h
    timeZone: UTC
    profile: sevens
`

// clockStep is one step of the agent's clock: to where, relative to the
// window's first start, and whether the window is active there.
type clockStep struct {
	name   string
	to     time.Duration
	inside bool
	// silent steps are followed by no event: only the agent's own timers
	// can make it read its clock again, as after a step of a real clock.
	silent bool
}

// profile is the profile in force after the step and its MIG target.
func (s clockStep) profile() (string, map[string]int) {
	if s.inside {
		return "sevens", map[string]int{"1g.10gb": 7}
	}
	return "halves", map[string]int{"3g.40gb": 2}
}

// clockSteps are the steps, in order, from an hour before the start.
func clockSteps() []clockStep {
	steps := []clockStep{
		{"forward across the start", 5 * time.Minute, true, false},
		{"back across the start", -5 * time.Minute, false, false},
		{"forward over the whole window", time.Hour + 5*time.Minute, false, false},
		{"back over the whole window", -5 * time.Minute, false, false},
	}
	if chaos.Full() {
		steps = append(steps,
			clockStep{"forward a day into the next window", 24*time.Hour + 5*time.Minute, true, false},
			clockStep{"forward across the end", 25*time.Hour + 5*time.Minute, false, false},
			clockStep{"back across the end", 24*time.Hour + 30*time.Minute, true, false},
			clockStep{"back a year into that day's window", -365*24*time.Hour + 30*time.Minute, true, false},
			clockStep{"forward a week past the window", 7*24*time.Hour + 2*time.Hour, false, false},
			clockStep{"to the window's first instant", 0, true, false},
			clockStep{"back across the start again", -10 * time.Minute, false, false},
			clockStep{"forward across the start again", 10 * time.Minute, true, false},
			clockStep{"forward over the window and a day", 48*time.Hour + 2*time.Hour, false, false},
			clockStep{"forward across the start, no event after the step", 72*time.Hour + 10*time.Minute, true, true},
		)
	}
	return steps
}

// TestChaosClockStep: the agent's clock steps forward across the window's
// start, back across it, and over a whole window (full mode: also a day
// on, across the end, a year back, a week on, and more). After each step, and
// a reconcile that reads the new time (a label the agent does not read
// makes one), the agent has the profile the new time selects, in state
// success, having run exactly one plan's ops (or none): no double apply,
// no stuck state. Full mode ends with a step across the start that no
// event follows, as after a step of the machine's clock: the agent must
// notice it by itself.
func TestChaosClockStep(t *testing.T) {
	c := suite.Cluster(t)
	describeScenario(t, scenarioClockStep, "The agent, in process, on one simulated H100 with an injected clock; outside the daily window "+
		"03:00-04:00 UTC two 3g.40gb devices, in it seven 1g.10gb. Each step sets the clock, a node label the agent does not read makes it "+
		"reconcile, and once it has reconciled and settled: the profile the new time selects is in force (labels, window, state success), "+
		"the GPUs hold exactly its layout, and the simulator logged exactly the ops of one plan to it (none when the profile stays): "+
		"no double apply, no stuck state.")
	ctx := testCtx(t, 15*time.Minute)
	freshNode(t, c)
	deleteFailureLease(ctx, t, c)
	m := newSim(t, "h100-80gb*1")
	reg := prometheus.NewRegistry()
	var clock offsetClock
	boundary := nextAt3()
	clock.startAt(boundary.Add(-time.Hour), 0)
	applyProfiles(ctx, t, c, clockStepProfiles)
	r := startAgent(t, c, m, func(cfg *agent.Config) { cfg.Clock, cfg.Registerer = clock.now, reg })
	waitState(ctx, t, c, carvev1.StateSuccess, "halves")
	for _, st := range clockSteps() {
		if !t.Run(st.name, func(t *testing.T) { stepClock(ctx, t, c, m, reg, &clock, boundary.Add(st.to), st) }) {
			break
		}
	}
	if !r.running() {
		t.Error("the agent stopped")
	}
}

// stepClock steps the clock to at, makes the agent reconcile, and checks
// what it then has in force and did to the GPUs.
func stepClock(ctx context.Context, t *testing.T, c *cluster.Cluster, m *sim.Machine, reg *prometheus.Registry, clock *offsetClock, at time.Time, st clockStep) {
	t.Helper()
	fault := "agent clock stepped forward"
	if at.Before(clock.now()) {
		fault = "agent clock stepped back"
	}
	if st.silent {
		fault += ", no event after it"
	}
	cc := newClusterCase(t, scenarioClockStep, st.name, fault)
	cc.note(t, "to %s UTC (window daily 03:00-04:00)", at.UTC().Format(time.DateTime))
	want, target := st.profile()
	quiesce(ctx, t, reg)
	expected := planOps(t, m, target)
	m.ResetOpLog()
	before := reconciles(t, reg)
	stepped := time.Now()
	clock.startAt(at, 0)
	if !st.silent {
		poke(ctx, t, c)
	}
	_, err := harness.WaitNode(ctx, c.Clientset(), c.NodeName(), 90*time.Second, "profile "+want+" in force after the step", func(n *corev1.Node) bool {
		return reconciles(t, reg) > before && inForce(n, want, st.inside)
	})
	if err != nil {
		cc.fail(t, "stuck after the step: %v", err)
		return
	}
	took := time.Since(stepped)
	quiesce(ctx, t, reg)
	n, err := c.Clientset().CoreV1().Nodes().Get(ctx, c.NodeName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !inForce(n, want, st.inside) {
		cc.fail(t, "the node left profile %s after reaching it: %v", want, harness.OwnedLabels(n))
	}
	ops := m.OpLog()
	if len(ops) != expected {
		cc.fail(t, "%d ops after the step, want %d (one plan to %s): %v", len(ops), expected, want, ops)
	}
	gpus, err := partition.ReadInventory(m)
	if err != nil {
		t.Fatal(err)
	}
	if p := layoutProblems(gpus, target); len(p) > 0 {
		cc.lose(t, "the GPUs are not %s: %s", want, strings.Join(p, "; "))
	}
	cc.note(t, "profile %s in force %s after the step, %d ops", want, took.Round(100*time.Millisecond), len(ops))
}

// inForce reports whether the node shows profile in force and settled,
// inside the window soon or outside any.
func inForce(n *corev1.Node, profile string, inside bool) bool {
	w, in := n.Labels[carvev1.LabelWindow]
	return in == inside && (!inside || w == "soon") &&
		n.Labels[carvev1.LabelApplied] == profile && n.Labels[carvev1.LabelState] == carvev1.StateSuccess
}

// reconciles returns how many reconciles the agent has finished
// (carve_agent_reconciles_total, all results).
func reconciles(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() == "carve_agent_reconciles_total" {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// quiesce waits until the agent has finished no reconcile for 1.5 s, so
// that none is in flight when the test moves on.
func quiesce(ctx context.Context, t *testing.T, reg *prometheus.Registry) {
	t.Helper()
	last, since := reconciles(t, reg), time.Now()
	err := harness.PollEvery(ctx, 100*time.Millisecond, time.Minute, func(context.Context) (bool, error) {
		if n := reconciles(t, reg); n != last {
			last, since = n, time.Now()
		}
		return time.Since(since) >= 1500*time.Millisecond, nil
	})
	if err != nil {
		t.Fatalf("the agent keeps reconciling: %v", err)
	}
}

// xidQuiet is how long a device stays unhealthy after the last XID on it
// in the storm scenario (carve-agent's default is 5 minutes).
const xidQuiet = 8 * time.Second

// xidStormPolicy makes the XIDs the storms raise that are not ignored
// (79, 94, 95, 48) recoverable after xidQuiet: the storms measure how the
// health flaps stay bounded through recovery. Under the default policy
// they are critical, and a device they hit stays unhealthy until its GPU
// is reset (the plugin's unit tests cover that).
func xidStormPolicy() xidpolicy.Policy {
	p := xidpolicy.Default()
	p.Recoverable, p.Quiet = []uint64{48, 79, 94, 95}, xidQuiet
	return p
}

// xidShot is one XID raised on a GPU (gi, ci -1) or one of its MIG
// devices; sick is the GPU or MIG device UUID it makes unhealthy, "" for
// an XID the plugin ignores (one an application causes).
type xidShot struct {
	gpu    int
	xid    uint64
	gi, ci int
	sick   string
}

// xidStorm is count XIDs raised evenly over a time, the shots in turn;
// fault is its kind, for the report.
type xidStorm struct {
	name, fault string
	count       int
	over        time.Duration
	shots       []xidShot
}

// mix says which XIDs the storm raises where.
func (s xidStorm) mix() string {
	var critical, ignored []string
	for _, sh := range s.shots {
		where := fmt.Sprintf("XID %d on GPU %d", sh.xid, sh.gpu)
		if sh.gi >= 0 {
			where = fmt.Sprintf("XID %d on GPU %d GI %d", sh.xid, sh.gpu, sh.gi)
		}
		if sh.sick != "" {
			critical = append(critical, where)
		} else {
			ignored = append(ignored, where)
		}
	}
	out := "critical " + strings.Join(critical, ", ")
	if len(ignored) > 0 {
		out += "; ignored " + strings.Join(ignored, ", ")
	}
	return out
}

// xidStorms are the storms on simNode's machine: GPU 0 holds seven MIG
// devices, GPUs 1-7 are whole.
func xidStorms(gpus []partition.GPU) []xidStorm {
	mig := func(i int, xid uint64, critical bool) xidShot {
		in := gpus[0].Instances[i]
		s := xidShot{gpu: 0, xid: xid, gi: in.GIID, ci: in.CIs[0].ID}
		if critical {
			s.sick = in.UUID()
		}
		return s
	}
	whole := func(g int, xid uint64, critical bool) xidShot {
		s := xidShot{gpu: g, xid: xid, gi: -1, ci: -1}
		if critical {
			s.sick = gpus[g].UUID
		}
		return s
	}
	// Critical XIDs on GPU 1 and three MIG devices, the ignored ones
	// (13, 31, 43, 45, 68, 109) on other GPUs and MIG devices.
	mixed := []xidShot{
		whole(1, 79, true), mig(4, 13, false), mig(0, 94, true), whole(2, 31, false), mig(1, 95, true),
		mig(5, 43, false), whole(1, 48, true), whole(3, 45, false), mig(2, 94, true), mig(6, 68, false), whole(4, 109, false),
	}
	burst := "a burst of XIDs, critical and ignored ones, on whole GPUs and MIG devices"
	storms := []xidStorm{{"300 XIDs in 1.5 s", burst, 300, 1500 * time.Millisecond, mixed}}
	if chaos.Full() {
		storms = append(storms,
			xidStorm{"3000 XIDs in 5 s, one on the whole MIG GPU", burst + ", one on a whole GPU in MIG mode",
				3000, 5 * time.Second, append(slices.Clone(mixed), whole(0, 48, true))},
			xidStorm{"a critical XID every 1.5 s on two devices for 15 s", "critical XIDs more often than the quiet period, for longer",
				20, 15 * time.Second, []xidShot{whole(1, 79, true), mig(3, 94, true)}},
		)
	}
	return storms
}

// TestChaosXIDStorm: storms of XIDs, critical and ignored ones mixed, on
// whole GPUs and MIG devices, against the device plugin on the real
// kubelet (health quiet period xidQuiet). Exactly the devices critical
// XIDs hit turn unhealthy and recover after the quiet period, and the
// health flaps are bounded: per resource the kubelet processes at most two
// lists per device hit (one unhealthy, one healthy again), however many
// XIDs came, as its own log counts them.
func TestChaosXIDStorm(t *testing.T) {
	c := suite.Cluster(t)
	describeScenario(t, scenarioXIDStorm, "Storms of XIDs on a simulated DGX H100 (GPU 0 in seven MIG devices, GPUs 1-7 whole with "+
		"2 replicas each), against carve's device plugin on the real kubelet with a health quiet period of 8 s: critical XIDs on whole GPUs "+
		"and MIG devices, mixed with the ignored application XIDs. Exactly the devices critical XIDs hit turn unhealthy, every device is "+
		"allocatable again after the quiet period, and the health flaps are bounded: per resource the kubelet processes (its own log) at "+
		"most two device lists per device hit, one unhealthy and one healthy again, however many XIDs came.")
	ctx := testCtx(t, 10*time.Minute)
	m, gpus, res := simNode(t, 2)
	mgr := startHealthPlugin(ctx, t, c, m, res)
	full := map[string][]string{}
	for name, devs := range res {
		for _, d := range devs {
			full[name] = append(full[name], d.ID)
		}
		slices.Sort(full[name])
	}
	setup := time.Now()
	waitAllocatable(ctx, t, c.Clientset(), c.NodeName(), map[string]int64{mig1g: 7, gpu: 14})
	t.Logf("the kubelet has every device %s after the plugin started", time.Since(setup).Round(100*time.Millisecond))
	for _, s := range xidStorms(gpus) {
		if !t.Run(s.name, func(t *testing.T) { runXIDStorm(ctx, t, c, m, mgr, res, full, s) }) {
			break
		}
	}
}

// startHealthPlugin serves res with carve's device plugin, its XID health
// loop watching m, until the test ends.
func startHealthPlugin(ctx context.Context, t *testing.T, c *cluster.Cluster, m *sim.Machine, res timeslice.Resources) *plugin.Manager {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "plugin.log")
	lf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := plugin.New(plugin.Options{
		DevicePluginDir: c.DevicePluginDir(), NVML: m, RetryInterval: time.Second,
		Logger: slog.New(slog.NewTextHandler(lf, nil)),
		Health: plugin.HealthOptions{Policy: xidStormPolicy(), Poll: 100 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	// Cleanups run last first: the manager stops before its log is read.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("device plugin log (tail):\n%s", harness.Tail(logPath, 40))
		}
		lf.Close()
	})
	runManager(ctx, t, mgr)
	if err := mgr.Update(ctx, res); err != nil {
		t.Fatal(err)
	}
	return mgr
}

// runXIDStorm raises the storm and checks the devices' health, as the
// plugin and the kubelet see it, through the recovery.
func runXIDStorm(ctx context.Context, t *testing.T, c *cluster.Cluster, m *sim.Machine, mgr *plugin.Manager, res timeslice.Resources, full map[string][]string, s xidStorm) {
	t.Helper()
	cc := newClusterCase(t, scenarioXIDStorm, s.name, s.fault)
	cc.note(t, "%s", s.mix())
	sick, unhealthy, bound := stormExpect(res, s.shots)
	kubeletLog := c.LogPath("kubelet")
	offset := fileSize(t, kubeletLog)
	var last time.Time // when the last XID was raised
	start := time.Now()
	for i := range s.count {
		time.Sleep(time.Until(start.Add(s.over * time.Duration(i) / time.Duration(s.count))))
		sh := s.shots[i%len(s.shots)]
		if err := m.RaiseXID(sh.gpu, sh.xid, sh.gi, sh.ci); err != nil {
			t.Fatalf("raise XID: %v", err)
		}
		last = time.Now()
	}
	var got []string
	err := harness.PollEvery(ctx, 50*time.Millisecond, 5*time.Second, func(context.Context) (bool, error) {
		got = slices.Sorted(maps.Keys(mgr.Unhealthy()))
		return slices.Equal(got, sick), nil
	})
	if err != nil {
		t.Errorf("the plugin holds %v unhealthy after the storm, want exactly the devices critical XIDs hit: %v", got, sick)
	}
	var now map[string][]string
	err = harness.Poll(ctx, xidQuiet+time.Minute, func(ctx context.Context) (bool, error) {
		var err error
		now, err = kubeletAllocatable(ctx, c.PodResourcesSocket())
		return err == nil && maps.EqualFunc(now, full, slices.Equal) && len(mgr.Unhealthy()) == 0, nil
	})
	if err != nil {
		cc.lose(t, "the devices did not recover: the kubelet can allocate %v, want %v (plugin: unhealthy %v)", now, full, mgr.Unhealthy())
	}
	recovered := time.Since(last)
	if recovered < xidQuiet {
		t.Errorf("recovered %s after the last XID, within the quiet period %s", recovered, xidQuiet)
	}
	lists := kubeletLists(ctx, t, kubeletLog, offset, unhealthy, full)
	for _, name := range slices.Sorted(maps.Keys(full)) {
		checkFlaps(t, cc, name, lists[name], len(full[name]), unhealthy[name], bound[name])
	}
	waitAllocatable(ctx, t, c.Clientset(), c.NodeName(), map[string]int64{mig1g: 7, gpu: 14})
	cc.note(t, "the kubelet processed %d lists of %s (bound %d) and %d of %s (bound %d); recovered %s after the last XID",
		len(lists[mig1g]), mig1g, bound[mig1g], len(lists[gpu]), gpu, bound[gpu], recovered.Round(100*time.Millisecond))
}

// stormExpect returns the UUIDs the storm's critical XIDs hit, and per
// resource how many devices turn unhealthy and the most lists the kubelet
// may get: two (unhealthy, healthy again) per UUID hit that holds a device
// of the resource.
func stormExpect(res timeslice.Resources, shots []xidShot) (sick []string, unhealthy, bound map[string]int) {
	hit := map[string]bool{}
	for _, s := range shots {
		if s.sick != "" {
			hit[s.sick] = true
		}
	}
	unhealthy, bound = map[string]int{}, map[string]int{}
	for name, devs := range res {
		keys := map[string]bool{}
		for _, d := range devs {
			if hit[d.UUID] || hit[d.GPUUUID] {
				unhealthy[name]++
			}
			for _, k := range []string{d.UUID, d.GPUUUID} {
				if hit[k] {
					keys[k] = true
				}
			}
		}
		bound[name] = 2 * len(keys)
	}
	return slices.Sorted(maps.Keys(hit)), unhealthy, bound
}

// checkFlaps checks the lists of one resource the kubelet processed in a
// storm: as many devices unhealthy as were hit at the worst, all healthy
// at the end, and at most bound lists.
func checkFlaps(t *testing.T, cc *clusterCase, name string, lists []kubeletList, total, unhealthy, bound int) {
	t.Helper()
	if unhealthy == 0 {
		if len(lists) > 0 {
			t.Errorf("%s: no device was hit, yet the kubelet got %d lists", name, len(lists))
		}
		return
	}
	worst := total
	for _, l := range lists {
		worst = min(worst, l.healthy)
	}
	switch {
	case len(lists) < 2:
		t.Errorf("%s: the kubelet got %d lists, want the devices unhealthy and then healthy again: %v", name, len(lists), lists)
	case worst != total-unhealthy:
		t.Errorf("%s: at worst the kubelet had %d of %d devices healthy, want %d (exactly those critical XIDs hit unhealthy)", name, worst, total, total-unhealthy)
	case lists[len(lists)-1].healthy != total:
		cc.lose(t, "%s: the kubelet's last list has %d of %d devices healthy", name, lists[len(lists)-1].healthy, total)
	}
	if len(lists) > bound {
		t.Errorf("%s: health flapped: the kubelet got %d lists, more than %d (two per device hit): %v", name, len(lists), bound, lists)
	}
}

// kubeletList is one device list the kubelet processed, as its log says.
type kubeletList struct{ total, healthy int }

// kubeletLists returns, per resource, the device lists the kubelet
// processed since offset in its log (its --v=2 line "Processed device
// updates for resource"), once its last list of every resource with
// devices hit has all of them healthy (or a minute passed).
func kubeletLists(ctx context.Context, t *testing.T, path string, offset int64, unhealthy map[string]int, full map[string][]string) map[string][]kubeletList {
	t.Helper()
	re := regexp.MustCompile(`"Processed device updates for resource" resourceName="([^"]+)" totalCount=(\d+) healthyCount=(\d+)`)
	var lists map[string][]kubeletList
	err := harness.Poll(ctx, time.Minute, func(context.Context) (bool, error) {
		var err error
		if lists, err = readKubeletLists(path, offset, re); err != nil {
			return false, err
		}
		for name, n := range unhealthy {
			if l := lists[name]; n > 0 && (len(l) == 0 || l[len(l)-1].healthy != len(full[name])) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Errorf("the kubelet's log never showed every device healthy again: %v (lists %v)", err, lists)
	}
	return lists
}

// readKubeletLists reads the lists the kubelet log at path records after
// offset.
func readKubeletLists(path string, offset int64, re *regexp.Regexp) (map[string][]kubeletList, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("kubelet log: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, fmt.Errorf("kubelet log: %w", err)
	}
	out := map[string][]kubeletList{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			total, _ := strconv.Atoi(m[2])
			healthy, _ := strconv.Atoi(m[3])
			out[m[1]] = append(out[m[1]], kubeletList{total: total, healthy: healthy})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("kubelet log: %w", err)
	}
	return out, nil
}

// fileSize is the size of the file at path now.
func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// drainWindowProfiles: seven 1g.10gb devices by default, the whole GPU in
// the daily window soon (03:00 UTC, one hour); the drain policy is POLICY.
const drainWindowProfiles = `version: v1
defaultProfile: sevens
profiles:
  sevens:
    - gpus: all
      mig: {1g.10gb: 7}
  whole:
    - gpus: all
windows:
  - name: soon
    schedule: "0 3 * * *"
    duration: 1h
    timeZone: UTC
    profile: whole
drain:
  policy: POLICY
  timeout: 10m
`

// windowSide is one side of the change drainWindowProfiles' window makes:
// a profile, its per-GPU MIG target (nil: MIG off) and its allocatable on
// one H100.
type windowSide struct {
	profile string
	target  map[string]int
	alloc   map[string]int64
	res     string // the resource a holding pod asks for
}

// windowSides returns the profile in force before and after the window's
// start or end is crossed.
func windowSides(at string) (from, to windowSide) {
	sevens := windowSide{"sevens", map[string]int{"1g.10gb": 7}, map[string]int64{mig1g: 7}, mig1g}
	whole := windowSide{"whole", nil, map[string]int64{gpu: 1}, gpu}
	if at == "end" {
		return whole, sevens
	}
	return sevens, whole
}

// drainRun is one run of the drain scenario: an agent on one H100 whose
// injected clock is about to cross a boundary of the window, and a pod
// holding a device of the profile in force, which the next one removes.
type drainRun struct {
	c        *cluster.Cluster
	cc       *clusterCase
	m        *sim.Machine
	hook     *opHook
	from, to windowSide
	source   string // carve.dev/profile.source once the boundary is crossed
	pod      string
	held     string
	since    time.Time // when the clock was stepped
}

// TestChaosPodAcrossWindowChange: a window opens (the agent's injected
// clock crosses its start) while a pod holds a MIG device the window's
// profile removes, under each drain policy. wait: the node drains until
// the pod ends, then applies; evict: the pod is evicted through the
// Eviction API, then the change is applied; fail: the node turns failed
// and nothing is destroyed. In no case is the held instance destroyed
// while held. Full mode also crosses the window's end with a pod holding
// the whole GPU.
func TestChaosPodAcrossWindowChange(t *testing.T) {
	c := suite.Cluster(t)
	describeScenario(t, scenarioDrainWindow, "The agent, in process, on one simulated H100 with an injected clock; a pod holds a device "+
		"of the profile in force, which the profile of the next window state removes (seven 1g.10gb devices outside the window, the whole GPU "+
		"in it). The clock is stepped to 3 s before the window's boundary and the agent's own timer crosses it. wait: the node drains, "+
		"advertising none of the devices going away, until the pod is deleted, then applies; evict: the pod is evicted through the Eviction API, "+
		"then the change applied; fail: the node turns failed, the GPUs are not touched and the devices stay advertised. "+
		"In every case no op destroys a device while the kubelet says a pod holds it, and the change that is made ends with exactly "+
		"the new devices on the GPUs and the kubelet.")
	crossings := []string{"start"}
	if chaos.Full() {
		crossings = append(crossings, "end")
	}
	for _, at := range crossings {
		for _, policy := range []string{"wait", "evict", "fail"} {
			t.Run(fmt.Sprintf("%s at the window's %s", policy, at), func(t *testing.T) {
				d := startDrainRun(t, c, policy, at)
				switch policy {
				case "wait":
					d.drainWait(t)
				case "evict":
					d.drainEvict(t)
				default:
					d.drainFail(t)
				}
				d.hook.check(t, d.cc)
			})
		}
	}
}

// startDrainRun sets up a drainRun and steps the clock to 3 s before the
// window's boundary at (start or end); the agent's own timer crosses it.
func startDrainRun(t *testing.T, c *cluster.Cluster, policy, at string) *drainRun {
	t.Helper()
	from, to := windowSides(at)
	name := fmt.Sprintf("drain policy %s, the window's %s removes a device a pod holds (%s to %s)", policy, at, from.profile, to.profile)
	d := &drainRun{c: c, cc: newClusterCase(t, scenarioDrainWindow, name, "drain policy "+policy+", the window's "+at+" crossed while a pod holds a device it removes"),
		from: from, to: to, source: "window", pod: "chaos-" + policy + "-" + at}
	if at == "end" {
		d.source = "default"
	}
	ctx := testCtx(t, 6*time.Minute)
	freshNode(t, c)
	deleteFailureLease(ctx, t, c)
	d.m = newSim(t, "h100-80gb*1")
	d.hook = newOpHook(c, d.m)
	var clock offsetClock
	boundary := nextAt3()
	if at == "end" {
		boundary = boundary.Add(time.Hour)
		clock.startAt(boundary.Add(-30*time.Minute), 0)
	} else {
		clock.startAt(boundary.Add(-time.Hour), 0)
	}
	applyProfiles(ctx, t, c, strings.ReplaceAll(drainWindowProfiles, "POLICY", policy))
	startAgent(t, c, d.m, func(cfg *agent.Config) { cfg.Clock, cfg.AfterOp = clock.now, d.hook.afterOp })
	setup := time.Now()
	waitState(ctx, t, c, carvev1.StateSuccess, from.profile)
	waitAllocatable(ctx, t, c.Clientset(), c.NodeName(), from.alloc)
	createPod(ctx, t, c.Clientset(), harness.DevicePod(d.pod, from.res, 1, time.Hour))
	waitHolds(ctx, t, c, d.pod)
	t.Logf("agent started, %s in force and the pod holding %s after %s", from.profile, from.res, time.Since(setup).Round(100*time.Millisecond))
	d.held = heldDevice(ctx, t, c, d.pod)
	d.m.ResetOpLog()
	d.since = time.Now()
	clock.startAt(boundary.Add(-3*time.Second), 0)
	poke(ctx, t, c)
	return d
}

// ctx is a context for the rest of the run.
func (d *drainRun) ctx(t *testing.T) context.Context {
	t.Helper()
	return testCtx(t, 4*time.Minute)
}

// checkUntouched records it if the held device is gone from the GPUs or
// the pod no longer runs: nothing may happen to either before it ends.
func (d *drainRun) checkUntouched(ctx context.Context, t *testing.T) {
	t.Helper()
	gpus, err := partition.ReadInventory(d.m)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(slices.Concat(slices.Collect(maps.Values(machineDevices(gpus)))...), d.held) {
		d.cc.lose(t, "the device %s the pod holds is gone from the GPUs (%v)", d.held, machineDevices(gpus))
	}
	if ph := harness.PodPhase(ctx, d.c.Clientset(), metav1.NamespaceDefault, d.pod); ph != corev1.PodRunning {
		d.cc.lose(t, "the holding pod is %s, want Running", ph)
	}
}

// checkApplied checks that the change to the new side is complete: the
// state, the GPUs and the devices.
func (d *drainRun) checkApplied(ctx context.Context, t *testing.T) {
	t.Helper()
	waitState(ctx, t, d.c, carvev1.StateSuccess, d.to.profile)
	if diff := waitKubeletMatches(ctx, d.c, d.m, d.to.target, time.Minute); diff != "" {
		d.cc.lose(t, "the GPUs or the kubelet's devices are not profile %s: %s", d.to.profile, diff)
	}
	waitAllocatable(ctx, t, d.c.Clientset(), d.c.NodeName(), d.to.alloc)
	checkNoFailureLease(ctx, t, d.c, d.cc)
}

// drainWait: the node drains, advertising none of the devices going away,
// for as long as the pod runs; once it is deleted the change is made.
func (d *drainRun) drainWait(t *testing.T) {
	t.Helper()
	ctx := d.ctx(t)
	waitState(ctx, t, d.c, carvev1.StateDraining, d.from.profile)
	waitEvent(ctx, t, d.c, carvev1.ReasonDraining, "waiting for them to be released", d.since)
	waitAllocatable(ctx, t, d.c.Clientset(), d.c.NodeName(), map[string]int64{})
	// It stays so across several drain retries (every 2 s).
	time.Sleep(5 * time.Second)
	d.checkUntouched(ctx, t)
	if n, err := harness.WaitState(ctx, d.c.Clientset(), d.c.NodeName(), carvev1.StateDraining, d.from.profile, time.Second); err != nil {
		t.Errorf("no longer draining while the pod runs: %v", err)
	} else if src := n.Labels[carvev1.LabelSource]; src != d.source {
		t.Errorf("%s = %q while draining, want %s", carvev1.LabelSource, src, d.source)
	}
	released := time.Now()
	if err := harness.DeletePod(ctx, d.c.Clientset(), metav1.NamespaceDefault, d.pod); err != nil {
		t.Fatal(err)
	}
	d.checkApplied(ctx, t)
	d.cc.note(t, "drained %s, applied %s after the pod was deleted", released.Sub(d.since).Round(time.Second), time.Since(released).Round(100*time.Millisecond))
}

// drainEvict: the agent evicts the pod through the Eviction API, then
// makes the change.
func (d *drainRun) drainEvict(t *testing.T) {
	t.Helper()
	ctx := d.ctx(t)
	cs := d.c.Clientset()
	stopWatch, err := harness.WatchDisruption(ctx, cs, metav1.NamespaceDefault, d.pod)
	if err != nil {
		t.Fatal(err)
	}
	waitEvent(ctx, t, d.c, carvev1.ReasonEvicted, "evicted pod default/"+d.pod, d.since)
	if err := harness.WaitPodGone(ctx, cs, metav1.NamespaceDefault, d.pod, 2*time.Minute); err != nil {
		t.Fatalf("not evicted: %v", err)
	}
	if reason, seen := stopWatch(); reason != harness.DisruptionReasonEviction {
		t.Errorf("the pod's DisruptionTarget reason was %q, want %s; the watch saw:\n%s", reason, harness.DisruptionReasonEviction, strings.Join(seen, "\n"))
	}
	d.checkApplied(ctx, t)
	d.cc.note(t, "evicted and applied %s after the clock step", time.Since(d.since).Round(100*time.Millisecond))
}

// drainFail: the node turns failed at once, nothing on the GPUs changes
// and the devices stay advertised, across several reconciles.
func (d *drainRun) drainFail(t *testing.T) {
	t.Helper()
	ctx := d.ctx(t)
	waitState(ctx, t, d.c, carvev1.StateFailed, d.from.profile)
	waitEvent(ctx, t, d.c, carvev1.ReasonBlocked, "drain policy fail: the change is not made", d.since)
	poke(ctx, t, d.c) // one more reconcile, inside the window
	time.Sleep(5 * time.Second)
	if ops := d.m.OpLog(); len(ops) > 0 {
		d.cc.lose(t, "with drain policy fail the GPUs were changed: %v", ops)
	}
	d.checkUntouched(ctx, t)
	if _, err := harness.WaitAllocatable(ctx, d.c.Clientset(), d.c.NodeName(), d.from.alloc, time.Minute); err != nil {
		d.cc.lose(t, "the devices in place are no longer advertised: %v", err)
	}
	if _, err := harness.WaitState(ctx, d.c.Clientset(), d.c.NodeName(), carvev1.StateFailed, d.from.profile, time.Second); err != nil {
		t.Errorf("no longer failed: %v", err)
	}
	d.cc.note(t, "failed without touching the GPUs")
}
