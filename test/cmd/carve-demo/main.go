package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/desired"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/test/cluster"
	"github.com/carve-dev/carve/test/harness"
	"github.com/carve-dev/carve/timeslice"
)

const (
	nodeName    = "carve-demo"
	cmNamespace = "carve-system"
	cmName      = "carve-profiles"
	// metricsAddr is where the demo's agent serves /metrics.
	metricsAddr = "127.0.0.1:9465"
)

// options are the demo's flags.
type options struct {
	agentBin, profiles, gpus string
	// simLatency is the agent's --sim-latency, latency its meaning.
	simLatency string
	latency    sim.Latency
	steps      []string
	keep       bool
}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	var o options
	var steps string
	fs := flag.NewFlagSet("carve-demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.agentBin, "agent", "bin/carve-agent", "the carve-agent binary (make build)")
	fs.StringVar(&o.profiles, "profiles", "configs/examples/profiles.yaml", "the profile file to load into the ConfigMap")
	fs.StringVar(&o.gpus, "gpus", "sim:dgx-h100", "the simulated machine (sim:<machine>)")
	fs.StringVar(&o.simLatency, "sim-latency", "realistic", "how long the simulated GPUs take for a MIG change (the agent's --sim-latency): realistic (as on hardware), none, a duration per operation (200ms), or op=duration,...")
	fs.StringVar(&steps, "steps", "full,balanced,shared-4", "the profiles to switch through, in order")
	fs.BoolVar(&o.keep, "keep", false, "leave the cluster and the agent running at the end, until Ctrl-C")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if !strings.HasPrefix(o.gpus, sim.Prefix) {
		return o, fmt.Errorf("--gpus %q: the demo runs on simulated GPUs, sim:<machine>", o.gpus)
	}
	l, err := sim.ParseLatency(o.simLatency)
	if err != nil {
		return o, fmt.Errorf("--sim-latency %w", err)
	}
	o.latency = l
	for s := range strings.SplitSeq(steps, ",") {
		if s = strings.TrimSpace(s); s != "" {
			o.steps = append(o.steps, s)
		}
	}
	if len(o.steps) == 0 {
		return o, errors.New("--steps: name at least one profile")
	}
	return o, nil
}

// demo is one run.
type demo struct {
	o         options
	out       io.Writer
	file      *configs.File
	data      string
	cs        kubernetes.Interface
	statePath string
	rows      []summaryRow
}

type summaryRow struct {
	step, profile, inForce, gpuOps, allocatable string
}

func main() {
	o, err := parseOptions(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "carve-demo:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err = run(ctx, o, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "carve-demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, out io.Writer) error {
	f, data, agentBin, err := prepare(o)
	if err != nil {
		return err
	}
	d := &demo{o: o, out: out, file: f, data: string(data)}
	d.printf("carve demo: a real single-node Kubernetes %s with simulated GPUs (%s; %s)\n\n", cluster.KubernetesVersion(), o.gpus, latencyNote(o.latency))
	c, err := d.startCluster(ctx)
	if err != nil {
		return err
	}
	defer func() {
		d.printf("\nstopping the cluster\n")
		if err := c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "carve-demo: stop the cluster:", err)
		}
	}()
	if err := d.loadProfiles(ctx); err != nil {
		return err
	}
	proc, logPath, err := d.startAgent(ctx, c, agentBin)
	if err != nil {
		return err
	}
	defer func() {
		if code, err := proc.Stop(); err != nil || code != 0 {
			fmt.Fprintf(os.Stderr, "carve-demo: carve-agent stopped with code %d (%v); log %s\n", code, err, logPath)
		}
	}()
	for i, profile := range o.steps {
		if err := d.step(ctx, i+1, profile); err != nil {
			if proc.Exited() {
				return d.agentFailed(proc, logPath, err)
			}
			return fmt.Errorf("step %d (%s): %w (agent log: %s)", i+1, profile, err, logPath)
		}
	}
	d.summary()
	if o.latency.IsZero() {
		d.printf("\n  The GPUs are simulated: MIG operations take microseconds here, and seconds\n  on real GPUs (try --sim-latency realistic); the rest (the agent, kubelet,\n  scheduler) is real.\n")
	} else {
		d.printf("\n  The GPUs are simulated, their MIG operations timed with --sim-latency %s\n  (docs/reference.md, simulated latency); the rest (the agent, kubelet,\n  scheduler) is real.\n", o.latency)
	}
	if o.keep {
		d.keepRunning(ctx, c)
	}
	return nil
}

// prepare reads and checks the profile file and the agent binary, and
// that a cluster can run here, before anything starts.
func prepare(o options) (*configs.File, []byte, string, error) {
	data, err := os.ReadFile(o.profiles)
	if err != nil {
		return nil, nil, "", err
	}
	f, err := configs.Parse(data)
	if err != nil {
		return nil, nil, "", fmt.Errorf("%s: %w", o.profiles, err)
	}
	for _, s := range o.steps {
		if _, ok := f.Profiles[s]; !ok {
			return nil, nil, "", fmt.Errorf("--steps: %s has no profile %q", o.profiles, s)
		}
	}
	agentBin, err := filepath.Abs(o.agentBin)
	if err != nil {
		return nil, nil, "", err
	}
	if _, err := os.Stat(agentBin); err != nil {
		return nil, nil, "", fmt.Errorf("--agent: %w (build it with make build)", err)
	}
	if err := cluster.Available(); err != nil {
		return nil, nil, "", fmt.Errorf("the local cluster cannot run here: %w (run as root: sudo make demo)", err)
	}
	return f, data, agentBin, nil
}

// startCluster starts the local cluster: step 1.
func (d *demo) startCluster(ctx context.Context) (*cluster.Cluster, error) {
	d.printf("[1/3] starting the local cluster (the first run on a machine builds Kubernetes and containerd: about 10 minutes on 2 cores)\n")
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	c, err := cluster.Start(startCtx, cluster.Options{NodeName: nodeName, Log: indent(d.out, "      "), HandleSignals: true, Owner: "carve-demo"})
	if err != nil {
		return nil, fmt.Errorf("start the cluster: %w", err)
	}
	d.cs = c.Clientset()
	d.printf("      node %s Ready in %s\n\n", c.NodeName(), c.StartupTime().Round(100*time.Millisecond))
	return c, nil
}

// loadProfiles puts the profile file into the ConfigMap: step 2.
func (d *demo) loadProfiles(ctx context.Context) error {
	d.printf("[2/3] profiles: %s -> ConfigMap %s/%s\n", d.o.profiles, cmNamespace, cmName)
	if err := harness.ApplyProfiles(ctx, d.cs, cmNamespace, cmName, d.data); err != nil {
		return err
	}
	names := slices.Sorted(maps.Keys(d.file.Profiles))
	d.printf("      %d profiles: %s; default %s\n\n", len(names), strings.Join(names, ", "), d.file.DefaultProfile)
	return nil
}

// startAgent starts the carve-agent binary and waits for its first
// success: step 3. It returns the process and its log's path.
func (d *demo) startAgent(ctx context.Context, c *cluster.Cluster, agentBin string) (*harness.Process, string, error) {
	work, err := os.MkdirTemp("", "carve-demo-")
	if err != nil {
		return nil, "", err
	}
	d.statePath = filepath.Join(work, "sim-state.json")
	logPath := filepath.Join(work, "agent.log")
	args := []string{
		"--node-name", c.NodeName(), "--kubeconfig", c.Kubeconfig(), "--config-map", cmNamespace + "/" + cmName,
		"--gpus", d.o.gpus, "--sim-state", d.statePath, "--state-dir", filepath.Join(work, "state"),
		"--device-plugin-dir", c.DevicePluginDir(), "--pod-resources-socket", c.PodResourcesSocket(),
		"--metrics-addr", metricsAddr, "--sim-latency", d.o.latency.String(),
	}
	d.printf("[3/3] carve-agent %s\n", strings.Join(args, " "))
	d.printf("      log: %s\n", logPath)
	started := time.Now()
	proc, err := harness.Start(agentBin, args, nil, logPath)
	if err != nil {
		return nil, "", err
	}
	n, err := harness.WaitNodeEvery(ctx, d.cs, c.NodeName(), 10*time.Millisecond, 2*time.Minute, "state success", func(n *corev1.Node) bool {
		return n.Labels[carvev1.LabelState] == carvev1.StateSuccess
	})
	if err != nil {
		err = d.agentFailed(proc, logPath, err)
		if code, serr := proc.Stop(); serr != nil || code != 0 {
			fmt.Fprintf(os.Stderr, "carve-demo: carve-agent stopped with code %d (%v); log %s\n", code, serr, logPath)
		}
		return nil, "", err
	}
	d.printf("      ready in %s: profile %s (%s) in force\n", time.Since(started).Round(10*time.Millisecond),
		n.Labels[carvev1.LabelApplied], n.Labels[carvev1.LabelSource])
	return proc, logPath, nil
}

// keepRunning tells how to explore the cluster and waits for Ctrl-C.
func (d *demo) keepRunning(ctx context.Context, c *cluster.Cluster) {
	d.printf("\nthe cluster and carve-agent keep running; in another shell:\n")
	d.printf("  export KUBECONFIG=%s\n", c.Kubeconfig())
	d.printf("  kubectl label node %s carve.dev/profile=all-1g --overwrite    # or use bin/carve-cluster kubectl ...\n", c.NodeName())
	d.printf("  go run ./cmd/carvectl status --kubeconfig %s\n", c.Kubeconfig())
	d.printf("Ctrl-C stops everything.\n")
	<-ctx.Done()
}

func (d *demo) agentFailed(proc *harness.Process, logPath string, err error) error {
	if proc.Exited() {
		code, _ := proc.Wait(0)
		return fmt.Errorf("carve-agent exited with code %d; its log (%s) ends:\n%s", code, logPath, harness.Tail(logPath, 20))
	}
	return fmt.Errorf("%w (agent log: %s)", err, logPath)
}

func (d *demo) printf(format string, args ...any) { fmt.Fprintf(d.out, format, args...) }

// step labels the node with a profile, waits for it to be in force, and
// shows the node and a pod's devices.
func (d *demo) step(ctx context.Context, i int, profile string) error {
	d.printf("\n━━ step %d of %d: profile %s ━━\n", i, len(d.o.steps), profile)
	since := time.Now()
	if err := harness.SetNodeLabels(ctx, d.cs, nodeName, map[string]string{"carve.dev/profile": profile}); err != nil {
		return err
	}
	d.printf("  kubectl label node %s carve.dev/profile=%s\n", nodeName, profile)
	// Show the agent's state as it changes (applying while the GPUs are
	// repartitioned); each step starts from success.
	state := carvev1.StateSuccess
	n, err := harness.WaitNodeEvery(ctx, d.cs, nodeName, 10*time.Millisecond, stepLimit, "profile "+profile+" in force", func(n *corev1.Node) bool {
		if s := n.Labels[carvev1.LabelState]; s != state {
			d.printf("    %8s  %s=%s\n", time.Since(since).Round(10*time.Millisecond), carvev1.LabelState, s)
			state = s
		}
		return n.Labels[carvev1.LabelApplied] == profile && n.Labels[carvev1.LabelSource] == "label" &&
			n.Labels[carvev1.LabelState] == carvev1.StateSuccess
	})
	if err != nil {
		return err
	}
	inForce := time.Since(since)
	gpuOps := "none needed"
	if ev, err := harness.WaitEvent(ctx, d.cs, nodeName, carvev1.ReasonRepartitioned, "profile "+profile+" ", since, 10*time.Second); err == nil {
		gpuOps = opsSummary(ev.Message)
	}
	d.printf("  repartition: in force %s after the label; MIG operations: %s\n", inForce.Round(10*time.Millisecond), gpuOps)

	want, gpus, err := d.expected(profile)
	if err != nil {
		return err
	}
	alloc, err := harness.WaitAllocatable(ctx, d.cs, nodeName, want, 2*time.Minute)
	if err != nil {
		return err
	}
	d.printf("  node allocatable (what the scheduler sees):\n")
	for _, k := range slices.Sorted(maps.Keys(alloc)) {
		d.printf("    %-26s %d\n", k, alloc[k])
	}
	d.printf("  carve labels:\n%s", harness.FormatLabels(harness.OwnedLabels(n), "    "))

	// One pod per resource: a container asking for several device-plugin
	// resources gets NVIDIA_VISIBLE_DEVICES from each plugin, and the last
	// one wins (see docs/plugin.md).
	var pods []string
	defer func() {
		for _, pod := range slices.Backward(pods) {
			_ = harness.DeletePod(context.Background(), d.cs, metav1.NamespaceDefault, pod)
		}
	}()
	for _, res := range slices.Sorted(maps.Keys(alloc)) {
		pod := "demo-" + profile + "-" + podSuffix(res)
		if _, err := d.cs.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, harness.DevicePod(pod, res, 1, 0), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create pod %s: %w", pod, err)
		}
		pods = append(pods, pod)
	}
	d.printf("  pods, each asking for one device:\n")
	for i, res := range slices.Sorted(maps.Keys(alloc)) {
		msg, err := harness.PodMessage(ctx, d.cs, metav1.NamespaceDefault, pods[i], 2*time.Minute)
		if err != nil {
			return err
		}
		d.printf("    %-22s %-26s NVIDIA_VISIBLE_DEVICES=%s\n", pods[i], res+": 1", msg)
		for u := range strings.SplitSeq(msg, ",") {
			d.printf("    %-22s %-26s   = %s\n", "", "", describe(gpus, u))
		}
	}

	var counts []string
	for _, k := range slices.Sorted(maps.Keys(alloc)) {
		counts = append(counts, fmt.Sprintf("%s=%d", strings.TrimPrefix(k, harness.ResourcePrefix), alloc[k]))
	}
	d.rows = append(d.rows, summaryRow{fmt.Sprint(i), profile, inForce.Round(10 * time.Millisecond).String(), gpuOps, strings.Join(counts, " ")})
	return nil
}

// stepLimit is how long a step waits for its profile: a repartition of a
// DGX at --sim-latency realistic takes about two minutes.
const stepLimit = 10 * time.Minute

// latencyNote says how long the simulated MIG operations take.
func latencyNote(l sim.Latency) string {
	switch {
	case l.IsZero():
		return "MIG operations take no time"
	case l == sim.RealisticLatency():
		return "MIG operations take as long as on hardware, --sim-latency realistic"
	}
	return "MIG operations timed with --sim-latency " + l.String()
}

// podSuffix turns a resource name into a pod name part: nvidia.com/gpu is
// "gpu", nvidia.com/mig-1g.10gb is "1g-10gb".
func podSuffix(res string) string {
	s := strings.TrimPrefix(strings.TrimPrefix(res, harness.ResourcePrefix), "mig-")
	return strings.NewReplacer(".", "-", "+", "-").Replace(s)
}

// expected computes, with carve's own packages, what the agent advertises
// for the profile on the simulated GPUs as they now are, and returns the
// GPUs.
func (d *demo) expected(profile string) (map[string]int64, []partition.GPU, error) {
	data, err := os.ReadFile(d.statePath)
	if err != nil {
		return nil, nil, err
	}
	m, err := sim.NewFromState(data)
	if err != nil {
		return nil, nil, err
	}
	if err := m.Init(); err != nil {
		return nil, nil, err
	}
	node, err := partition.ReadNode(m)
	if err != nil {
		return nil, nil, err
	}
	want, err := desired.For(d.file, profile, node)
	if err != nil {
		return nil, nil, err
	}
	res, err := timeslice.Expand(node.GPUs, want.Sharing)
	if err != nil {
		return nil, nil, err
	}
	counts := map[string]int64{}
	for k, v := range res.Counts() {
		counts[k] = int64(v)
	}
	return counts, node.GPUs, nil
}

// describe says which GPU or MIG device a UUID is.
func describe(gpus []partition.GPU, uuid string) string {
	for _, g := range gpus {
		if g.UUID == uuid {
			return fmt.Sprintf("GPU %d, whole (%s)", g.Index, g.Product)
		}
		for _, in := range g.Instances {
			if in.UUID() == uuid {
				return fmt.Sprintf("GPU %d, MIG %s at memory slices %d-%d", g.Index, in.Profile, in.Placement.Start, in.Placement.Start+in.Placement.Size-1)
			}
		}
	}
	return "(unknown device)"
}

// opsSummary shortens the Repartitioned Event's message ("profile p
// (label) applied in 3ms: 40 ops on GPUs 0-1") to "40 ops in 3ms on GPUs
// 0-1".
func opsSummary(msg string) string {
	_, rest, ok := strings.Cut(msg, " applied in ")
	if !ok {
		return msg
	}
	dur, ops, ok := strings.Cut(rest, ": ")
	if !ok {
		return msg
	}
	n, gpus, _ := strings.Cut(ops, " on ")
	return fmt.Sprintf("%s in %s on %s", n, dur, gpus)
}

func (d *demo) summary() {
	d.printf("\n━━ summary ━━\n")
	tw := tabwriter.NewWriter(d.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  STEP\tPROFILE\tIN FORCE AFTER\tMIG OPERATIONS\tALLOCATABLE")
	for _, r := range d.rows {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", r.step, r.profile, r.inForce, r.gpuOps, r.allocatable)
	}
	_ = tw.Flush()
}

// indent prefixes every line written to w.
func indent(w io.Writer, prefix string) io.Writer {
	return &indentWriter{w: w, prefix: prefix, bol: true}
}

type indentWriter struct {
	w      io.Writer
	prefix string
	bol    bool
}

func (iw *indentWriter) Write(b []byte) (int, error) {
	var out []byte
	for _, c := range b {
		if iw.bol {
			out = append(out, iw.prefix...)
		}
		out = append(out, c)
		iw.bol = c == '\n'
	}
	if _, err := iw.w.Write(out); err != nil {
		return 0, err
	}
	return len(b), nil
}
