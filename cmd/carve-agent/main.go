package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/carve-dev/carve/agent"
	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/dra"
	"github.com/carve-dev/carve/internal/buildinfo"
	"github.com/carve-dev/carve/kubeclient"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/gpus"
	"github.com/carve-dev/carve/plugin"
	"github.com/carve-dev/carve/xidpolicy"
)

// DefaultShutdownTimeout is --shutdown-timeout's default: the slowest
// NVML operation (a GPU reset, up to 2 minutes on some platforms) and the
// shutdown's own work, with margin. The DaemonSet's
// terminationGracePeriodSeconds (180 in configs/deploy and the chart) is
// above it, so that the kubelet's SIGKILL never comes first.
const DefaultShutdownTimeout = 150 * time.Second

// options are the agent's settings from flags and environment.
type options struct {
	nodeName           string
	kubeconfig         string
	configMapNamespace string
	configMapName      string
	gpus               string
	simState           string
	simLatency         string
	advertise          string
	kubeletRootDir     string
	cdiDir             string
	devicePluginDir    string
	podResourcesSocket string
	stateDir           string
	metricsAddr        string
	profileLabel       string
	pauseOperands      []string
	cdi                bool
	migManagerState    bool
	gfdLabels          bool
	logLevel           slog.Level
	// shutdownTimeout bounds the wait for the agent to stop after SIGTERM
	// (--shutdown-timeout).
	shutdownTimeout time.Duration
	xidPolicy       xidpolicy.Policy
	// version: print the build and exit (--version); nothing else is
	// checked.
	version bool
}

// boolSpec is one boolean flag: its name, environment variable, default
// and use.
type boolSpec struct {
	name, env, usage string
	def              bool
	dst              *bool
}

// flagSpec is one flag: its name, environment variable, default and use.
type flagSpec struct {
	name, env, def, usage string
	dst                   *string
}

// parseOptions reads the flags; a flag not given on the command line is
// taken from its environment variable, else its default.
func parseOptions(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	var o options
	var configMap, logLevel, operands, shutdownTimeout, xidQuiet string
	xid := xidpolicy.DefaultSettings()
	specs := []flagSpec{
		{"node-name", "NODE_NAME", "", "the Node this agent owns (required)", &o.nodeName},
		{"kubeconfig", "KUBECONFIG", "", "kubeconfig file; empty: in-cluster", &o.kubeconfig},
		{"config-map", "CARVE_CONFIG_MAP", "carve-system/carve-profiles", "namespace/name of the profile ConfigMap (key profiles.yaml)", &configMap},
		{"gpus", "CARVE_GPUS", "nvml", "nvml, or sim:<machine> for simulated GPUs", &o.gpus},
		{"sim-state", "CARVE_SIM_STATE", "", "file where the simulator keeps its MIG state across restarts", &o.simState},
		{"sim-latency", "CARVE_SIM_LATENCY", "none", "how long simulated GPUs take for a MIG change: none, realistic (as on hardware), a duration for every operation (200ms), or op=duration,... (create-gi=1s,reset-gpu=5s)", &o.simLatency},
		{"advertise", "CARVE_ADVERTISE", agent.AdvertiseDevicePlugin, "how devices reach the kubelet: device-plugin (carve's own device plugin), dra (carve's Dynamic Resource Allocation driver gpu.carve.dev: a ResourceSlice per node, claims prepared with CDI), or none (carve partitions and records, another device plugin such as NVIDIA's advertises)", &o.advertise},
		{"device-plugin-dir", "CARVE_DEVICE_PLUGIN_DIR", "/var/lib/kubelet/device-plugins", "kubelet's device-plugin socket directory (unused with --advertise none)", &o.devicePluginDir},
		{"kubelet-root-dir", "CARVE_KUBELET_ROOT_DIR", dra.DefaultKubeletRootDir, "kubelet's root directory: with --advertise dra the driver registers in its plugins_registry/ and serves in plugins/gpu.carve.dev/", &o.kubeletRootDir},
		{"cdi-dir", "CARVE_CDI_DIR", dra.DefaultCDIDir, "with --advertise dra, the directory of CDI specs the container runtime reads; the driver writes one spec per prepared claim there", &o.cdiDir},
		{"pod-resources-socket", "CARVE_POD_RESOURCES_SOCKET", plugin.DefaultPodResourcesSocket, "kubelet PodResources API socket; \"none\" for a node without a kubelet, where nothing is ever in use (for tests)", &o.podResourcesSocket},
		{"state-dir", "CARVE_STATE_DIR", "/var/lib/carve", "directory for the checkpoint of the apply in progress", &o.stateDir},
		{"metrics-addr", "CARVE_METRICS_ADDR", ":9465", "address of /metrics, /healthz and /readyz", &o.metricsAddr},
		{"pause-operands", "CARVE_PAUSE_OPERANDS", "", "GPU Operator operands paused (nvidia.com/gpu.deploy.<operand>=paused-for-mig-change) during a disruptive change, where the node has those labels; comma-separated, \"none\" for none; empty: " + strings.Join(agent.DefaultPauseOperands(agent.AdvertiseDevicePlugin), ",") + ", and with --advertise none also device-plugin", &operands},
		{"profile-label", "CARVE_PROFILE_LABEL", carvev1.LabelProfile, "the node label that pins a profile; nvidia.com/mig.config for nodes labelled for NVIDIA's MIG manager", &o.profileLabel},
		{"log-level", "CARVE_LOG_LEVEL", "info", "debug, info, warn or error", &logLevel},
		{"shutdown-timeout", "CARVE_SHUTDOWN_TIMEOUT", DefaultShutdownTimeout.String(), "on SIGTERM, how long the agent waits for the GPU operation in flight to finish (then it checkpoints and exits); past it, it exits with the operation still running. Keep it below the pod's terminationGracePeriodSeconds", &shutdownTimeout},
		{"xid-ignored", "CARVE_XID_IGNORED", xid.Ignored, "XIDs that leave device health alone (errors an application causes), comma-separated; \"\" for none", &xid.Ignored},
		{"xid-recoverable", "CARVE_XID_RECOVERABLE", xid.Recoverable, "XIDs that make a device unhealthy only until --xid-recovery-quiet passes without another, comma-separated; every XID neither ignored nor recoverable keeps the device unhealthy until its GPU is reset or the node reboots", &xid.Recoverable},
		{"xid-recovery-quiet", "CARVE_XID_RECOVERY_QUIET", xid.Quiet.String(), "how long a device a recoverable XID hit stays unhealthy after the last one", &xidQuiet},
		{"xid-taint-recoverable", "CARVE_XID_TAINT_RECOVERABLE", xid.RecoverableTaint, "with --advertise dra, the device taint effect of a recoverable XID: NoSchedule, NoExecute or None", &xid.RecoverableTaint},
		{"xid-taint-critical", "CARVE_XID_TAINT_CRITICAL", xid.CriticalTaint, "with --advertise dra, the device taint effect of a critical XID: NoSchedule, NoExecute or None", &xid.CriticalTaint},
	}
	fs := flag.NewFlagSet("carve-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	for _, s := range specs {
		def := s.def
		if v := getenv(s.env); v != "" {
			def = v
		}
		fs.StringVar(s.dst, s.name, def, fmt.Sprintf("%s [%s]", s.usage, s.env))
	}
	bools := []boolSpec{
		{"cdi", "CARVE_CDI", "also answer Allocate with CDI device names nvidia.com/gpu=<uuid>", false, &o.cdi},
		{"mig-manager-state-label", "CARVE_MIG_MANAGER_STATE_LABEL", "also mirror the state into nvidia.com/mig.config.state with NVIDIA's MIG manager's values (pending, rebooting, success, failed)", false, &o.migManagerState},
		{"gfd-labels", "CARVE_GFD_LABELS", "write GPU feature discovery's nvidia.com/* keys; false where GFD runs (carve then writes only carve.dev/*)", true, &o.gfdLabels},
	}
	for _, s := range bools {
		def := s.def
		if v := getenv(s.env); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return o, fmt.Errorf("%s=%q: want true or false", s.env, v)
			}
			def = b
		}
		fs.BoolVar(s.dst, s.name, def, fmt.Sprintf("%s [%s]", s.usage, s.env))
	}
	fs.BoolVar(&o.version, "version", false, "print the version, revision and Go version, and exit")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if o.version {
		return o, nil
	}
	if o.nodeName == "" {
		return o, errors.New("--node-name (or NODE_NAME) is required")
	}
	ns, name, ok := strings.Cut(configMap, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return o, fmt.Errorf("--config-map %q: want namespace/name", configMap)
	}
	o.configMapNamespace, o.configMapName = ns, name
	if err := gpus.Check(o.gpus, o.gpuOptions()); err != nil {
		return o, err
	}
	if err := agent.CheckProfileLabel(o.profileLabel); err != nil {
		return o, fmt.Errorf("--profile-label: %w", err)
	}
	if err := o.checkAdvertise(); err != nil {
		return o, err
	}
	switch operands {
	case "none":
	case "":
		o.pauseOperands = agent.DefaultPauseOperands(o.advertise)
	default:
		o.pauseOperands = strings.Split(operands, ",")
	}
	if err := agent.CheckOperands(o.pauseOperands); err != nil {
		return o, fmt.Errorf("--pause-operands %q: %w", operands, err)
	}
	if err := o.logLevel.UnmarshalText([]byte(logLevel)); err != nil {
		return o, fmt.Errorf("--log-level %q: %w", logLevel, err)
	}
	d, err := time.ParseDuration(shutdownTimeout)
	if err != nil || d <= 0 {
		return o, fmt.Errorf("--shutdown-timeout %q: want a positive duration such as 150s", shutdownTimeout)
	}
	o.shutdownTimeout = d
	q, err := time.ParseDuration(xidQuiet)
	if err != nil {
		return o, fmt.Errorf("%s %q: want a duration such as 5m", xidpolicy.FlagRecoveryQuiet, xidQuiet)
	}
	xid.Quiet = q
	if o.xidPolicy, err = xidpolicy.Parse(xid); err != nil {
		return o, err
	}
	return o, nil
}

// checkAdvertise checks --advertise and the flags that only matter while
// carve advertises.
func (o options) checkAdvertise() error {
	if o.advertise == "" {
		// The Config's "" means device-plugin; on the command line an
		// empty value is more likely an unset template variable.
		return fmt.Errorf("--advertise \"\": want %s, %s or %s", agent.AdvertiseDevicePlugin, agent.AdvertiseDRA, agent.AdvertiseNone)
	}
	if err := agent.CheckAdvertise(o.advertise); err != nil {
		return fmt.Errorf("--advertise %w", err)
	}
	if o.cdi && o.advertise == agent.AdvertiseNone {
		return errors.New("--cdi with --advertise none: CDI device names are part of carve's Allocate answers, and with none carve answers none; drop --cdi and configure CDI in the device plugin that advertises")
	}
	if o.cdi && o.advertise == agent.AdvertiseDRA {
		return errors.New("--cdi with --advertise dra: the DRA driver always answers with CDI devices (a spec per claim in --cdi-dir); --cdi is for the device plugin's Allocate answers: drop it")
	}
	return nil
}

// gpuOptions are the flags that go with --gpus.
func (o options) gpuOptions() gpus.Options {
	return gpus.Options{SimState: o.simState, SimLatency: o.simLatency}
}

// openGPUs opens and initialises the GPUs --gpus names. It returns them
// twice: as opened, and as the agent is to use them. Where the driver
// cannot be opened because it is not loaded, or its library is missing (as
// while NVIDIA's GPU Operator replaces a containerized driver), the second
// is a released partition.Gate: the agent starts, advertises nothing, and
// opens the GPUs once the driver is there, instead of failing at every
// restart.
func openGPUs(spec string, opts gpus.Options, log *slog.Logger) (lib, use partition.NVML, err error) {
	lib, err = gpus.Open(spec, opts)
	if err != nil {
		return nil, nil, err
	}
	err = lib.Init()
	switch {
	case errors.Is(err, partition.ErrDriverNotLoaded) || errors.Is(err, partition.ErrLibraryNotFound):
		log.Warn("the GPU driver cannot be opened; starting without it, retrying until it is loaded", "gpus", spec, "err", err)
		return lib, partition.NewReleasedGate(lib), nil
	case err != nil:
		return nil, nil, fmt.Errorf("--gpus %s: initialise: %w", spec, err)
	}
	return lib, lib, nil
}

// newServeMux serves /metrics from reg, /healthz, and /readyz from ready.
func newServeMux(reg *prometheus.Registry, ready func() bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			http.Error(w, "not ready: caches not synced or no reconcile finished yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		return rest.InClusterConfig()
	}
	return clientcmd.BuildConfigFromFlags("", kubeconfig)
}

func run(ctx context.Context, o options, getenv func(string) string, log *slog.Logger) error {
	afterOp, err := afterOpHook(getenv, log, os.Exit)
	if err != nil {
		return err
	}
	slotDuration, slotRetry, err := rolloutTiming(getenv)
	if err != nil {
		return err
	}
	lib, use, err := openGPUs(o.gpus, o.gpuOptions(), log)
	if err != nil {
		return err
	}
	abandon := false
	defer func() {
		if !abandon {
			_ = lib.Shutdown()
		}
	}()
	closeJournal, err := simOpJournal(getenv, lib)
	if err != nil {
		return err
	}
	if closeJournal != nil {
		defer func() { _ = closeJournal() }()
	}

	cfg, err := restConfig(o.kubeconfig)
	if err != nil {
		return fmt.Errorf("API access: %w", err)
	}
	client, err := kubeclient.New(cfg)
	if err != nil {
		return fmt.Errorf("API client: %w", err)
	}
	reg := agent.NewRegistry()
	a, err := agent.New(agent.Config{
		NodeName: o.nodeName, Client: client,
		ConfigMapNamespace: o.configMapNamespace, ConfigMapName: o.configMapName,
		GPUs: use, Advertise: o.advertise, DevicePluginDir: o.devicePluginDir, PodResourcesSocket: o.podResourcesSocket,
		KubeletRootDir: o.kubeletRootDir, CDIDir: o.cdiDir,
		StateDir: o.stateDir, CDI: o.cdi, Registerer: reg, Logger: log, AfterOp: afterOp,
		ProfileLabel: o.profileLabel, Labels: agent.LabelOptions{MIGManagerState: o.migManagerState, CarveOnly: !o.gfdLabels},
		PauseOperands: o.pauseOperands, RolloutSlotDuration: slotDuration, RolloutRetry: slotRetry,
		XIDPolicy: o.xidPolicy, Version: buildinfo.Get(),
	})
	if err != nil {
		return err
	}

	srv := &http.Server{Addr: o.metricsAddr, Handler: newServeMux(reg, a.Ready), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 2)
	go func() {
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("metrics server on %s: %w", o.metricsAddr, err)
		}
	}()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	if o.gpus == gpus.NVML {
		log.Info("carve-agent running", "gpus", o.gpus, "advertise", o.advertise, "metrics", o.metricsAddr)
	} else {
		log.Info("carve-agent running", "gpus", o.gpus, "simLatency", o.simLatency, "advertise", o.advertise, "metrics", o.metricsAddr)
	}

	runErr := waitForAgent(ctx, done, errc, cancel, a.InFlight, o.shutdownTimeout, log)
	// After a shutdown that timed out an NVML call is still running:
	// shutting the library down under it could hang as well.
	abandon = errors.Is(runErr, errShutdownTimeout)
	shutdown, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	_ = srv.Shutdown(shutdown)
	return runErr
}

// waitForAgent waits for the agent (done) to stop: on its own, after the
// metrics server failed (errc; then it cancels the agent), or after the
// signal (ctx), for at most timeout (awaitShutdown).
func waitForAgent(ctx context.Context, done, errc <-chan error, cancel func(), inFlight func() string, timeout time.Duration, log *slog.Logger) error {
	select {
	case err := <-done:
		if ctx.Err() == nil {
			return err
		}
		// The signal came and the agent stopped before this select saw
		// it: still say so.
		stopped := make(chan error, 1)
		stopped <- err
		return awaitShutdown(stopped, "", timeout, log)
	case err := <-errc:
		cancel()
		if err := <-done; err != nil {
			log.Debug("agent stopped after the metrics server failed", "err", err)
		}
		return err
	case <-ctx.Done():
		return awaitShutdown(done, inFlight(), timeout, log)
	}
}

// errShutdownTimeout is the error of a shutdown that outlasted
// --shutdown-timeout.
var errShutdownTimeout = errors.New("shutdown timed out")

// awaitShutdown waits, after the signal, for the agent to stop (done), at
// most timeout, and logs one line saying what it waited for (inFlight: the
// NVML operation running at the signal, if any) and how long. Past the
// timeout it gives up with errShutdownTimeout: the process exits with the
// operation still running; the checkpoint has every operation done before
// it, and the next start reads the GPUs back and goes on from there.
func awaitShutdown(done <-chan error, inFlight string, timeout time.Duration, log *slog.Logger) error {
	start := time.Now()
	waitedFor := "no GPU operation in flight"
	if inFlight != "" {
		waitedFor = "the GPU operation in flight: " + inFlight
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case err := <-done:
		log.Info("shutdown: stopped", "waitedFor", waitedFor, "took", time.Since(start).Round(time.Millisecond).String(), "timeout", timeout.String())
		return err
	case <-timer.C:
		return fmt.Errorf("%w: waited %s for %s; exiting without it, the next start reads the GPUs back and goes on from the checkpoint",
			errShutdownTimeout, timeout, waitedFor)
	}
}

func main() {
	o, err := parseOptions(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "carve-agent:", err)
		os.Exit(2)
	}
	if o.version {
		fmt.Println(buildinfo.Get().Line("carve-agent"))
		os.Exit(0)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: o.logLevel}))
	slog.SetDefault(log)
	log.Debug("garbage collector", "gogc", tuneGC(os.Getenv))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err = run(ctx, o, os.Getenv, log)
	stop()
	if err != nil {
		log.Error("carve-agent stopped", "err", err)
		os.Exit(1)
	}
}
