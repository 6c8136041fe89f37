package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/carve-dev/carve/agent"
	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/internal/buildinfo"
	"github.com/carve-dev/carve/kubeclient"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/test/cluster"
	"github.com/carve-dev/carve/test/harness"
)

// The profile ConfigMap the agents of these tests read. Its namespace is
// not carve-system, which the deployment tests create and delete.
const (
	cmNamespace = "carve-e2e"
	cmName      = "carve-profiles"
)

// agentRun is a carve agent running in the test process on simulated GPUs.
type agentRun struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error // Run's answer, once done is closed
}

// stop stops the agent and fails the test if it does not stop cleanly.
func (r *agentRun) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case <-r.done:
		if r.err != nil {
			t.Errorf("agent: %v", r.err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("agent did not stop within 30 s")
	}
}

// running reports whether the agent is still running (it never restarted).
func (r *agentRun) running() bool {
	select {
	case <-r.done:
		return false
	default:
		return true
	}
}

// freshNode removes what earlier tests left on the node and the profile
// ConfigMap, now and when the test ends.
func freshNode(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	clean := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := harness.DeleteProfiles(ctx, c.Clientset(), cmNamespace, cmName); err != nil {
			return err
		}
		return harness.ResetNode(ctx, c.Clientset(), c.NodeName())
	}
	if err := clean(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := clean(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
}

// newSim returns an initialised simulated machine.
func newSim(t *testing.T, spec string) *sim.Machine {
	t.Helper()
	m, err := sim.New(spec)
	return initSim(t, m, err)
}

// initSim fails the test on err, else initialises m and returns it.
func initSim(t *testing.T, m *sim.Machine, err error) *sim.Machine {
	t.Helper()
	if err == nil {
		err = m.Init()
	}
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// startAgent runs a carve agent for the node on m until the test ends; its
// log goes to a file whose tail the test prints if it fails.
func startAgent(t *testing.T, c *cluster.Cluster, m *sim.Machine, mod func(*agent.Config)) *agentRun {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "agent.log")
	lf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg := agent.Config{
		NodeName: c.NodeName(), Client: agentClient(t, c),
		ConfigMapNamespace: cmNamespace, ConfigMapName: cmName,
		GPUs: m, DevicePluginDir: c.DevicePluginDir(), PodResourcesSocket: c.PodResourcesSocket(),
		StateDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(lf, &slog.HandlerOptions{Level: slog.LevelDebug})),
		DrainRetry: 2 * time.Second, PluginRetryInterval: time.Second,
		Version: buildinfo.Info{Version: agentVersion, Revision: "e2e", GoVersion: runtime.Version()},
	}
	if mod != nil {
		mod(&cfg)
	}
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &agentRun{cancel: cancel, done: make(chan struct{})}
	go func() {
		r.err = a.Run(ctx)
		close(r.done)
	}()
	t.Cleanup(func() {
		r.stop(t)
		if t.Failed() {
			t.Logf("agent log (tail):\n%s", harness.Tail(logPath, 60))
		}
		lf.Close()
	})
	return r
}

// testCtx is a context for one test, ended when it ends.
func testCtx(t *testing.T, limit time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	return ctx
}

func applyProfiles(ctx context.Context, t *testing.T, c *cluster.Cluster, data string) {
	t.Helper()
	if err := harness.ApplyProfiles(ctx, c.Clientset(), cmNamespace, cmName, data); err != nil {
		t.Fatal(err)
	}
}

func waitState(ctx context.Context, t *testing.T, c *cluster.Cluster, state, applied string) *corev1.Node {
	t.Helper()
	n, err := harness.WaitState(ctx, c.Clientset(), c.NodeName(), state, applied, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func setProfileLabel(ctx context.Context, t *testing.T, c *cluster.Cluster, profile string) {
	t.Helper()
	if err := harness.SetNodeLabels(ctx, c.Clientset(), c.NodeName(), map[string]string{"carve.dev/profile": profile}); err != nil {
		t.Fatal(err)
	}
}

func waitEvent(ctx context.Context, t *testing.T, c *cluster.Cluster, reason, substr string, since time.Time) corev1.Event {
	t.Helper()
	ev, err := harness.WaitEvent(ctx, c.Clientset(), c.NodeName(), reason, substr, since, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// migUUIDs returns the UUIDs of the MIG devices the machine holds.
func migUUIDs(t *testing.T, m *sim.Machine) []string {
	t.Helper()
	gpus, err := partition.ReadInventory(m)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, g := range gpus {
		for _, in := range g.Instances {
			out = append(out, in.UUID())
		}
	}
	slices.Sort(out)
	return out
}

func readExample(t *testing.T) string {
	t.Helper()
	root, err := harness.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "configs", "examples", "profiles.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestAgentRealisesTheLabelledProfile: the example profiles on a simulated
// DGX H100; labelling the node picks a profile, which the GPUs, the
// kubelet's allocatable, the labels and the annotation then show.
func TestAgentRealisesTheLabelledProfile(t *testing.T) {
	c := suite.Cluster(t)
	cs := c.Clientset()
	ctx := testCtx(t, 15*time.Minute)
	freshNode(t, c)
	m := newSim(t, "dgx-h100")
	applyProfiles(ctx, t, c, readExample(t))
	r := startAgent(t, c, m, nil)

	n := waitState(ctx, t, c, carvev1.StateSuccess, "full")
	if got := n.Labels[carvev1.LabelSource]; got != "default" {
		t.Errorf("%s = %q, want default", carvev1.LabelSource, got)
	}
	waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{gpu: 8})

	since := time.Now()
	setProfileLabel(ctx, t, c, "all-1g")
	n = waitState(ctx, t, c, carvev1.StateSuccess, "all-1g")
	waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{mig1g: 56})
	waitEvent(ctx, t, c, carvev1.ReasonRepartitioned, "profile all-1g (label) applied", since)

	t.Run("labels", func(t *testing.T) {
		want := map[string]string{
			carvev1.LabelApplied: "all-1g", carvev1.LabelSource: "label", carvev1.LabelState: carvev1.StateSuccess,
			carvev1.LabelGPUCount: "8", carvev1.LabelGPUProduct: "NVIDIA-H100-80GB-HBM3",
			carvev1.LabelMIGCapable: "true", carvev1.LabelMIGStrategy: "mixed",
			"nvidia.com/mig-1g.10gb.count": "56",
		}
		got := harness.OwnedLabels(n)
		for k, v := range want {
			if got[k] != v {
				t.Errorf("label %s = %q, want %q", k, got[k], v)
			}
		}
		for k := range got {
			if strings.HasPrefix(k, "nvidia.com/mig-") && !strings.HasPrefix(k, "nvidia.com/mig-1g.10gb.") {
				t.Errorf("label %s=%s left over: only 1g.10gb devices exist", k, got[k])
			}
		}
		if _, ok := got[carvev1.LabelWindow]; ok {
			t.Errorf("%s set outside any window", carvev1.LabelWindow)
		}
	})

	t.Run("annotation", func(t *testing.T) {
		p, err := harness.RecordOf(n)
		if err != nil {
			t.Fatal(err)
		}
		if p.Profile != "all-1g" || p.State != carvev1.StateSuccess || p.LastError != "" || len(p.GPUs) != 8 {
			t.Fatalf("annotation profile %q state %q error %q, %d GPUs", p.Profile, p.State, p.LastError, len(p.GPUs))
		}
		var recorded []string
		for _, g := range p.GPUs {
			if g.MIGMode != "enabled" || len(g.Instances) != 7 {
				t.Errorf("GPU %d: MIG %s with %d instances, want enabled with 7", g.Index, g.MIGMode, len(g.Instances))
			}
			for _, in := range g.Instances {
				recorded = append(recorded, in.UUID)
			}
		}
		slices.Sort(recorded)
		if want := migUUIDs(t, m); !slices.Equal(recorded, want) {
			t.Errorf("annotation records MIG devices %v, the GPUs hold %v", recorded, want)
		}
	})

	t.Run("carvectl status shows the node", func(t *testing.T) {
		bin := buildCarvectl(ctx, t)
		out, err := exec.CommandContext(ctx, bin, "status", "--kubeconfig", c.Kubeconfig(), "--config-map", cmNamespace+"/"+cmName).CombinedOutput()
		if err != nil {
			t.Fatalf("carvectl status: %v\n%s", err, out)
		}
		table, ro, _ := strings.Cut(string(out), "\n\n")
		lines := strings.Split(strings.TrimSpace(table), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "NODE") {
			t.Fatalf("carvectl status: want a header and one node row:\n%s", out)
		}
		row := strings.Fields(lines[1])
		// NODE SELECTED "SELECTED BY" PINNED APPLIED STATE ROLLOUT VERSION RESOURCES
		want := []string{c.NodeName(), "all-1g", "label", "all-1g", "all-1g", carvev1.StateSuccess, "-", agentVersion, "mig-1g.10gb=56"}
		if len(row) < len(want) || !slices.Equal(row[:len(want)], want) {
			t.Errorf("carvectl status row %q, want it to start %q", row, want)
		}
		// The agent counts itself a member of the rollout; the change is
		// over, so it holds no slot.
		for _, s := range []string{"Rollout of " + cmNamespace + "/" + cmName + " (revision ", "maxUnavailable 1, maxFailures 1): 1 node\n", "no node holds a slot"} {
			if !strings.Contains(ro, s) {
				t.Errorf("carvectl status rollout lacks %q:\n%s", s, ro)
			}
		}
	})

	t.Run("a pod asking for two 1g.10gb devices sees two distinct MIG devices", func(t *testing.T) {
		createPod(ctx, t, cs, harness.DevicePod("agent-two-mig", mig1g, 2, 0))
		got := strings.Split(terminationMessage(ctx, t, cs, "agent-two-mig"), ",")
		if len(got) != 2 || got[0] == got[1] {
			t.Fatalf("NVIDIA_VISIBLE_DEVICES = %v, want 2 distinct devices", got)
		}
		all := migUUIDs(t, m)
		for _, u := range got {
			if !slices.Contains(all, u) {
				t.Errorf("%s is not a MIG device of the node", u)
			}
		}
	})

	t.Run("after a kubelet restart the devices are registered again", func(t *testing.T) {
		if err := c.RestartKubelet(ctx); err != nil {
			t.Fatalf("restart kubelet: %v", err)
		}
		waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{mig1g: 56})
		createPod(ctx, t, cs, harness.DevicePod("agent-after-restart", mig1g, 1, 0))
		if got := terminationMessage(ctx, t, cs, "agent-after-restart"); !strings.HasPrefix(got, "MIG-") {
			t.Fatalf("NVIDIA_VISIBLE_DEVICES = %q after the kubelet restart", got)
		}
		if !r.running() {
			t.Fatal("the agent stopped")
		}
	})
}

const replicasProfiles = `version: v1
defaultProfile: mixed
profiles:
  mixed:
    - gpus: [0]
      mig: {1g.10gb: 7}
      timeSlicing: {replicas: REPLICAS}
    - gpus: [1]
      timeSlicing: {replicas: REPLICAS}
`

// TestAgentFollowsAReplicaEdit: a ConfigMap edit that changes replica
// counts only reaches allocatable with no MIG operation and no restart.
func TestAgentFollowsAReplicaEdit(t *testing.T) {
	c := suite.Cluster(t)
	cs := c.Clientset()
	ctx := testCtx(t, 10*time.Minute)
	freshNode(t, c)
	m := newSim(t, "h100-80gb*2")
	applyProfiles(ctx, t, c, strings.ReplaceAll(replicasProfiles, "REPLICAS", "2"))
	r := startAgent(t, c, m, nil)
	waitState(ctx, t, c, carvev1.StateSuccess, "mixed")
	waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{mig1g: 14, gpu: 2})
	if len(m.OpLog()) == 0 {
		t.Fatal("no MIG operation made the first partition")
	}
	m.ResetOpLog()

	since := time.Now()
	applyProfiles(ctx, t, c, strings.ReplaceAll(replicasProfiles, "REPLICAS", "4"))
	waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{mig1g: 28, gpu: 4})
	waitEvent(ctx, t, c, carvev1.ReasonSharingChanged, "no MIG change needed", since)
	n := waitState(ctx, t, c, carvev1.StateSuccess, "mixed")
	if got := n.Labels[carvev1.LabelGPUReplicas]; got != "4" {
		t.Errorf("%s = %q, want 4", carvev1.LabelGPUReplicas, got)
	}
	if ops := m.OpLog(); len(ops) != 0 {
		t.Errorf("a replica edit made MIG operations: %v", ops)
	}
	if !r.running() {
		t.Error("the agent stopped")
	}
}

// TestAgentRejectsABrokenConfigMap: a broken file never touches the GPUs,
// sets state failed and says what is wrong in a Warning Event, both at
// start and as an edit of a file in force.
func TestAgentRejectsABrokenConfigMap(t *testing.T) {
	c := suite.Cluster(t)
	cs := c.Clientset()
	ctx := testCtx(t, 10*time.Minute)
	freshNode(t, c)
	m := newSim(t, "h100-80gb*2")
	good := strings.ReplaceAll(replicasProfiles, "REPLICAS", "2")
	broken := strings.Replace(good, "{1g.10gb: 7}", "{1g.10gb: 8}", 1)

	since := time.Now()
	applyProfiles(ctx, t, c, broken)
	startAgent(t, c, m, nil)
	n := waitState(ctx, t, c, carvev1.StateFailed, "")
	ev := waitEvent(ctx, t, c, carvev1.ReasonConfigRejected, "profiles.mixed[0].mig", since)
	if ev.Type != corev1.EventTypeWarning {
		t.Errorf("event type %s, want Warning", ev.Type)
	}
	if ops := m.OpLog(); len(ops) != 0 {
		t.Fatalf("a rejected file touched the GPUs: %v", ops)
	}
	if p, err := harness.RecordOf(n); err != nil || !strings.Contains(p.LastError, "1g.10gb") {
		t.Errorf("annotation last error %q (err %v) does not name the problem", p.LastError, err)
	}

	applyProfiles(ctx, t, c, good)
	waitState(ctx, t, c, carvev1.StateSuccess, "mixed")
	waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{mig1g: 14, gpu: 2})
	before := migUUIDs(t, m)
	m.ResetOpLog()

	since = time.Now()
	applyProfiles(ctx, t, c, strings.Replace(good, "timeSlicing", "timeslicing", 1))
	n = waitState(ctx, t, c, carvev1.StateFailed, "mixed")
	waitEvent(ctx, t, c, carvev1.ReasonConfigRejected, "timeslicing", since)
	if ops := m.OpLog(); len(ops) != 0 {
		t.Errorf("a rejected edit touched the GPUs: %v", ops)
	}
	if after := migUUIDs(t, m); !slices.Equal(before, after) {
		t.Errorf("MIG devices changed from %v to %v", before, after)
	}
	if p, err := harness.RecordOf(n); err != nil || p.Profile != "mixed" {
		t.Errorf("annotation profile %q (err %v), want the one still in place, mixed", p.Profile, err)
	}
	// The devices in place stay advertised.
	waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{mig1g: 14, gpu: 2})
}

const windowProfiles = `version: v1
defaultProfile: whole
profiles:
  whole:
    - gpus: all
  shared:
    - gpus: all
      timeSlicing: {replicas: 3}
windows:
  - name: soon
    schedule: "SCHEDULE"
    duration: DURATION
    timeZone: UTC
    nodeSelector: {kubernetes.io/os: linux}
    profile: shared
`

func windowFile(schedule string, d time.Duration) string {
	return strings.NewReplacer("SCHEDULE", schedule, "DURATION", d.String()).Replace(windowProfiles)
}

// offsetClock is a clock running at real speed, offset by a fixed amount.
type offsetClock struct{ offset atomic.Int64 }

func (c *offsetClock) now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// startAt sets the clock so that it reads at now, and returns the real
// time at which it reads at+d.
func (c *offsetClock) startAt(at time.Time, d time.Duration) time.Time {
	now := time.Now()
	c.offset.Store(int64(at.Sub(now)))
	return now.Add(d)
}

// nextAt3 is the next 03:00 UTC.
func nextAt3() time.Time {
	now := time.Now().UTC()
	t := time.Date(now.Year(), now.Month(), now.Day(), 3, 0, 0, 0, time.UTC)
	if !t.After(now) {
		t = t.AddDate(0, 0, 1)
	}
	return t
}

// watchWindow waits for the node to enter the window at about start (real
// time) and leave it at about end, checking the profile, the labels and
// allocatable at each.
func watchWindow(ctx context.Context, t *testing.T, c *cluster.Cluster, start, end time.Time) {
	t.Helper()
	n := crossBoundary(ctx, t, c, start, "start", "shared", true)
	if got := n.Labels[carvev1.LabelSource]; got != "window" {
		t.Errorf("%s = %q in the window, want window", carvev1.LabelSource, got)
	}
	waitAllocatable(ctx, t, c.Clientset(), c.NodeName(), map[string]int64{gpu: 3})
	crossBoundary(ctx, t, c, end, "end", "whole", false)
	waitAllocatable(ctx, t, c.Clientset(), c.NodeName(), map[string]int64{gpu: 1})
}

// boundarySlack is how late after a window's boundary the node may show the
// new profile in force: the agent's timer, one reconcile (a time-slicing
// change) and the label patch, and the test's 250 ms reads of the node.
const boundarySlack = 5 * time.Second

// crossBoundary waits for the node to have profile in force, inside window
// soon or outside any, and fails the test when that happens more than a
// second before the boundary at (real time) or more than boundarySlack
// after it.
func crossBoundary(ctx context.Context, t *testing.T, c *cluster.Cluster, at time.Time, which, profile string, inside bool) *corev1.Node {
	t.Helper()
	what := fmt.Sprintf("profile %s in force at the window's %s", profile, which)
	// Waiting past the slack tells how late a late switch is.
	n, err := harness.WaitNode(ctx, c.Clientset(), c.NodeName(), time.Until(at)+30*time.Second, what, func(n *corev1.Node) bool {
		w, in := n.Labels[carvev1.LabelWindow]
		return in == inside && (!inside || w == "soon") &&
			n.Labels[carvev1.LabelApplied] == profile && n.Labels[carvev1.LabelState] == carvev1.StateSuccess
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := time.Now()
	late := seen.Sub(at)
	switch {
	case late < -time.Second:
		t.Errorf("%s %s before the window's %s", what, -late, which)
	case late > boundarySlack:
		t.Errorf("%s %s after the window's %s, more than %s late", what, late.Round(10*time.Millisecond), which, boundarySlack)
	}
	t.Logf("window %s: profile %s in force %s after the boundary", which, profile, late.Round(10*time.Millisecond))
	return n
}

// TestAgentWindowInjectedClock: once the agent runs, its clock is set 10 s
// before a window's start; the profile switches at the boundary and back
// after the window's 20 s.
func TestAgentWindowInjectedClock(t *testing.T) {
	c := suite.Cluster(t)
	ctx := testCtx(t, 5*time.Minute)
	freshNode(t, c)
	m := newSim(t, "h100-80gb*1")
	var clock offsetClock
	boundary := nextAt3()
	clock.startAt(boundary.Add(-time.Hour), 0)
	applyProfiles(ctx, t, c, windowFile("0 3 * * *", 20*time.Second))
	startAgent(t, c, m, func(cfg *agent.Config) { cfg.Clock = clock.now })
	n := waitState(ctx, t, c, carvev1.StateSuccess, "whole")
	if _, in := n.Labels[carvev1.LabelWindow]; in {
		t.Fatalf("in a window before its start: %v", harness.OwnedLabels(n))
	}
	start := clock.startAt(boundary.Add(-10*time.Second), 10*time.Second)
	poke(ctx, t, c)
	watchWindow(ctx, t, c, start, start.Add(20*time.Second))
}

// poke changes a label of the node that carve does not read, which makes
// the agent reconcile (and so read its clock) again.
func poke(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	if err := harness.SetNodeLabels(ctx, c.Clientset(), c.NodeName(), map[string]string{"carve-e2e/poke": fmt.Sprint(time.Now().UnixNano())}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = harness.SetNodeLabels(context.Background(), c.Clientset(), c.NodeName(), map[string]string{"carve-e2e/poke": ""})
	})
}

// TestAgentWindowRealClock: a window that starts at the next minute (at
// least 20 s away) and lasts a minute, on the real clock.
func TestAgentWindowRealClock(t *testing.T) {
	c := suite.Cluster(t)
	ctx := testCtx(t, 6*time.Minute)
	freshNode(t, c)
	m := newSim(t, "h100-80gb*1")
	start := time.Now().UTC().Truncate(time.Minute).Add(time.Minute)
	if time.Until(start) < 20*time.Second {
		start = start.Add(time.Minute)
	}
	applyProfiles(ctx, t, c, windowFile(fmt.Sprintf("%d %d * * *", start.Minute(), start.Hour()), time.Minute))
	startAgent(t, c, m, nil)
	waitState(ctx, t, c, carvev1.StateSuccess, "whole")
	watchWindow(ctx, t, c, start, start.Add(time.Minute))
}

// kubeletDevices asks the kubelet (PodResources GetAllocatableResources)
// which device IDs of a resource it can allocate: what the device plugin
// serves it, with no API server involved.
func kubeletDevices(ctx context.Context, socket, res string) ([]string, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := podresourcesapi.NewPodResourcesListerClient(conn).GetAllocatableResources(ctx, &podresourcesapi.AllocatableResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("GetAllocatableResources: %w", err)
	}
	var ids []string
	for _, d := range resp.GetDevices() {
		if d.GetResourceName() == res {
			ids = append(ids, d.GetDeviceIds()...)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// TestAgentAPIServerOutage: the API server is down for 30 s, and a window
// starts 10 s into the outage. The kubelet keeps the devices throughout
// (read every 250 ms: never an error, never a device more or less), the
// agent switches the partition at the boundary, and the node's labels
// catch up once the API server is back.
func TestAgentAPIServerOutage(t *testing.T) {
	c := suite.Cluster(t)
	cs := c.Clientset()
	ctx := testCtx(t, 8*time.Minute)
	freshNode(t, c)
	m := newSim(t, "h100-80gb*1")
	var clock offsetClock
	boundary := nextAt3()
	clock.startAt(boundary.Add(-time.Hour), 0)
	applyProfiles(ctx, t, c, windowFile("0 3 * * *", time.Hour))
	r := startAgent(t, c, m, func(cfg *agent.Config) { cfg.Clock = clock.now })
	waitState(ctx, t, c, carvev1.StateSuccess, "whole")
	waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{gpu: 1})
	start := clock.startAt(boundary.Add(-20*time.Second), 20*time.Second)
	poke(ctx, t, c)
	whole, replicas := outageDevices(t, m)
	time.Sleep(time.Until(start.Add(-10 * time.Second)))

	t.Log("stopping the API server for 30 s")
	stopped := time.Now()
	if err := c.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	apiUp := false
	defer func() {
		if !apiUp {
			if err := c.StartAPIServer(context.Background()); err != nil {
				t.Errorf("restart API server: %v", err)
			}
		}
	}()
	switched := watchKubeletDevices(ctx, t, c, stopped.Add(30*time.Second), whole, replicas)
	// The window starts 10 s into the outage: the agent realises it from
	// its cache and the kubelet gets the three replicas.
	switch late := switched.Sub(start); {
	case switched.IsZero():
		t.Fatalf("the window's replicas never reached the kubelet during the outage")
	case late < -time.Second:
		t.Errorf("switched %s before the window's start", -late)
	case late > boundarySlack:
		t.Errorf("switched %s after the window's start, more than %s late", late.Round(10*time.Millisecond), boundarySlack)
	}
	if !r.running() {
		t.Fatal("the agent stopped during the outage")
	}
	if err := c.StartAPIServer(ctx); err != nil {
		t.Fatalf("restart API server: %v", err)
	}
	apiUp = true
	back := time.Now()
	n, err := harness.WaitNode(ctx, cs, c.NodeName(), 90*time.Second, "the window's labels", func(n *corev1.Node) bool {
		return n.Labels[carvev1.LabelWindow] == "soon" && n.Labels[carvev1.LabelApplied] == "shared" && n.Labels[carvev1.LabelState] == carvev1.StateSuccess
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("labels caught up %s after the API server came back", time.Since(back).Round(100*time.Millisecond))
	if got := n.Labels[carvev1.LabelGPUReplicas]; got != "3" {
		t.Errorf("%s = %q, want 3", carvev1.LabelGPUReplicas, got)
	}
	waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{gpu: 3})

	t.Run("an agent started inside the window applies the window's profile", func(t *testing.T) {
		r.stop(t)
		if err := harness.ResetNode(ctx, cs, c.NodeName()); err != nil {
			t.Fatal(err)
		}
		startAgent(t, c, newSim(t, "h100-80gb*1"), func(cfg *agent.Config) { cfg.Clock = clock.now })
		n := waitState(ctx, t, c, carvev1.StateSuccess, "shared")
		if n.Labels[carvev1.LabelWindow] != "soon" || n.Labels[carvev1.LabelSource] != "window" {
			t.Errorf("labels %v, want window soon as the source", harness.OwnedLabels(n))
		}
		waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{gpu: 3})
	})
}

// outageDevices are the device IDs of nvidia.com/gpu on the one-GPU
// machine m: the whole GPU, and its three replicas.
func outageDevices(t *testing.T, m *sim.Machine) (whole, replicas []string) {
	t.Helper()
	gpus, err := partition.ReadInventory(m)
	if err != nil || len(gpus) != 1 {
		t.Fatalf("inventory %v, err %v; want one GPU", gpus, err)
	}
	// The documented form <uuid>::<n>, n from 0, written out here rather
	// than taken from the code under test.
	for n := range 3 {
		replicas = append(replicas, fmt.Sprintf("%s::%d", gpus[0].UUID, n))
	}
	return []string{gpus[0].UUID}, replicas
}

// watchKubeletDevices reads the kubelet's nvidia.com/gpu devices
// (PodResources GetAllocatableResources) every 250 ms until end, and fails
// the test on any read that errs or is neither exactly whole nor, from the
// first time they show, exactly replicas. It returns when replicas first
// showed (zero if never).
func watchKubeletDevices(ctx context.Context, t *testing.T, c *cluster.Cluster, end time.Time, whole, replicas []string) (switched time.Time) {
	t.Helper()
	reads := 0
	for ; time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		ids, err := kubeletDevices(ctx, c.PodResourcesSocket(), gpu)
		reads++
		switch {
		case err != nil:
			t.Fatalf("read %d of the kubelet's devices during the outage: %v", reads, err)
		case slices.Equal(ids, whole) && switched.IsZero():
		case slices.Equal(ids, replicas):
			if switched.IsZero() {
				switched = time.Now()
			}
		default:
			t.Fatalf("read %d during the outage: the kubelet has %s devices %v, want %v or, from the window's start on, %v", reads, gpu, ids, whole, replicas)
		}
	}
	t.Logf("%d reads of the kubelet's devices during the outage, each exactly the whole GPU or its replicas", reads)
	return switched
}

const drainProfiles = `version: v1
defaultProfile: small
profiles:
  small:
    - gpus: all
      mig: {1g.10gb: 7}
  whole:
    - gpus: all
drain:
  policy: POLICY
  timeout: 10m
`

// waitHolds waits until the kubelet says the pod holds a device.
func waitHolds(ctx context.Context, t *testing.T, c *cluster.Cluster, pod string) {
	t.Helper()
	err := harness.Poll(ctx, 90*time.Second, func(ctx context.Context) (bool, error) {
		return harness.PodPhase(ctx, c.Clientset(), metav1.NamespaceDefault, pod) == corev1.PodRunning, nil
	})
	if err != nil {
		t.Fatalf("pod %s never ran: %v", pod, err)
	}
}

// drainSetup starts an agent with drain policy policy and profile small
// (seven 1g.10gb devices) in force, and a pod that holds one of them for
// hold; it returns once the pod runs.
func drainSetup(t *testing.T, c *cluster.Cluster, policy, pod string, hold time.Duration) (context.Context, *sim.Machine) {
	t.Helper()
	cs := c.Clientset()
	ctx := testCtx(t, 8*time.Minute)
	freshNode(t, c)
	m := newSim(t, "h100-80gb*1")
	applyProfiles(ctx, t, c, strings.ReplaceAll(drainProfiles, "POLICY", policy))
	startAgent(t, c, m, nil)
	waitState(ctx, t, c, carvev1.StateSuccess, "small")
	waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{mig1g: 7})
	createPod(ctx, t, cs, harness.DevicePod(pod, mig1g, 1, hold))
	created := time.Now()
	waitHolds(ctx, t, c, pod)
	t.Logf("the holding pod runs %s after its creation", time.Since(created).Round(100*time.Millisecond))
	return ctx, m
}

// TestAgentDrain: a pod holds a MIG device that the next profile removes.
func TestAgentDrain(t *testing.T) {
	c := suite.Cluster(t)
	cs := c.Clientset()

	t.Run("wait: the change waits for the pod to end", func(t *testing.T) {
		// The pod holds its device for a minute from its start: long enough
		// for the draining node's empty allocatable to reach the API server
		// even when the pod is seen running late on a loaded machine.
		ctx, m := drainSetup(t, c, "wait", "drain-wait", time.Minute)

		since := time.Now()
		setProfileLabel(ctx, t, c, "whole")
		waitState(ctx, t, c, carvev1.StateDraining, "small")
		waitEvent(ctx, t, c, carvev1.ReasonDraining, "waiting for them to be released", since)
		// No new pod may land on the devices that are going: none are
		// advertised while the node drains.
		waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{})
		if ph := harness.PodPhase(ctx, cs, metav1.NamespaceDefault, "drain-wait"); ph != corev1.PodRunning {
			t.Fatalf("the holding pod is %s while the node drains, want Running", ph)
		}
		n := waitState(ctx, t, c, carvev1.StateSuccess, "whole")
		if ph := harness.PodPhase(ctx, cs, metav1.NamespaceDefault, "drain-wait"); ph != corev1.PodSucceeded {
			t.Errorf("the change completed with the holding pod %s, want Succeeded (it ran to its end)", ph)
		}
		t.Logf("change completed %s after the label, the pod holding its device for 60 s from its start", time.Since(since).Round(100*time.Millisecond))
		if got := n.Labels[carvev1.LabelGPUCount]; got != "1" {
			t.Errorf("%s = %q", carvev1.LabelGPUCount, got)
		}
		waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{gpu: 1})
		if uuids := migUUIDs(t, m); len(uuids) != 0 {
			t.Errorf("MIG devices left: %v", uuids)
		}
	})

	t.Run("evict: the pod is evicted, respecting its PodDisruptionBudget", func(t *testing.T) {
		ctx, m := drainSetup(t, c, "evict", "drain-evict", 10*time.Minute)
		one := intstr.FromInt32(1)
		pdb := &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "drain-evict"},
			Spec: policyv1.PodDisruptionBudgetSpec{
				MinAvailable: &one,
				Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "drain-evict"}},
			},
		}
		if _, err := cs.PolicyV1().PodDisruptionBudgets(pdb.Namespace).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pdbGone := false
		t.Cleanup(func() {
			if !pdbGone {
				_ = cs.PolicyV1().PodDisruptionBudgets(pdb.Namespace).Delete(context.Background(), pdb.Name, metav1.DeleteOptions{})
			}
		})

		since := time.Now()
		setProfileLabel(ctx, t, c, "whole")
		waitState(ctx, t, c, carvev1.StateDraining, "small")
		waitEvent(ctx, t, c, carvev1.ReasonEvicting, "refused", since)
		if ph := harness.PodPhase(ctx, cs, metav1.NamespaceDefault, "drain-evict"); ph != corev1.PodRunning {
			t.Fatalf("the PodDisruptionBudget did not protect the pod: %s", ph)
		}

		stopWatch, err := harness.WatchDisruption(ctx, cs, metav1.NamespaceDefault, "drain-evict")
		if err != nil {
			t.Fatal(err)
		}
		evicting := time.Now()
		if err := cs.PolicyV1().PodDisruptionBudgets(pdb.Namespace).Delete(ctx, pdb.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		pdbGone = true
		if err := harness.WaitPodGone(ctx, cs, metav1.NamespaceDefault, "drain-evict", 2*time.Minute); err != nil {
			t.Fatalf("not evicted: %v", err)
		}
		// Gone through the Eviction API, not by a delete: the API server
		// marked it, and carve says it evicted it.
		if reason, seen := stopWatch(); reason != harness.DisruptionReasonEviction {
			t.Errorf("the pod's DisruptionTarget reason was %q, want %s; the watch saw:\n%s", reason, harness.DisruptionReasonEviction, strings.Join(seen, "\n"))
		}
		waitEvent(ctx, t, c, carvev1.ReasonEvicted, "evicted pod default/drain-evict through the Eviction API", evicting)
		waitState(ctx, t, c, carvev1.StateSuccess, "whole")
		waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{gpu: 1})
		if uuids := migUUIDs(t, m); len(uuids) != 0 {
			t.Errorf("MIG devices left: %v", uuids)
		}
	})
}

// agentClient is the API client carve-agent builds (kubeclient.New), for
// the cluster c: agents in these tests talk to the API server as the
// binary does.
func agentClient(t *testing.T, c *cluster.Cluster) kubeclient.Interface {
	t.Helper()
	client, err := kubeclient.New(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return client
}
