package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/record"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/dra"
	"github.com/carve-dev/carve/internal/buildinfo"
	"github.com/carve-dev/carve/kubeclient"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/plugin"
	"github.com/carve-dev/carve/xidhealth"
	"github.com/carve-dev/carve/xidpolicy"
)

// Config is what an Agent is built from: cmd/carve-agent fills it from its
// flags; tests fill it with a simulated machine and their own hooks.
type Config struct {
	// NodeName is the Node the agent owns (required).
	NodeName string
	// Client talks to the API server (required).
	Client kubeclient.Interface
	// ConfigMapNamespace and ConfigMapName name the profile ConfigMap
	// (required).
	ConfigMapNamespace, ConfigMapName string
	// GPUs is the NVML, real or simulated, already initialised, or a
	// *partition.Gate over it, released when the driver could not be
	// opened at start (required). The agent reaches NVML through a Gate
	// only, which it releases while the driver is replaced
	// (nvidia.com/gpu-driver-upgrade-state).
	GPUs partition.NVML
	// Advertise says how the devices carve makes reach the kubelet:
	// AdvertiseDevicePlugin (carve's own device-plugin servers; "" means
	// it too) or AdvertiseNone (no device-plugin server at all: the
	// partitions are realised and recorded, and another device plugin,
	// such as NVIDIA's, advertises; or nobody, in scale tests), or
	// AdvertiseDRA (carve's DRA driver). Any other value is an error
	// (CheckAdvertise).
	Advertise string
	// KubeletRootDir is the kubelet's root directory, where the DRA driver
	// registers and serves; default dra.DefaultKubeletRootDir. Only with
	// Advertise dra.
	KubeletRootDir string
	// CDIDir is where the DRA driver writes claims' CDI specs; default
	// dra.DefaultCDIDir. Only with Advertise dra.
	CDIDir string
	// DevicePluginDir is the kubelet's device-plugin directory; default
	// plugin's default. Unused with Advertise none.
	DevicePluginDir string
	// PodResourcesSocket is the kubelet's PodResources socket; default
	// plugin.DefaultPodResourcesSocket. PodResourcesNone declares a node
	// without a kubelet, where nothing is ever in use (NothingInUse): for
	// tests only.
	PodResourcesSocket string
	// StateDir keeps the checkpoint of the apply in progress; empty keeps
	// none (crash safety is then lost: only for tests).
	StateDir string
	// CDI makes Allocate also answer CDI device names (nvidia.com/gpu=<uuid>).
	// Only with carve's device plugin: CDI with Advertise none is an error.
	CDI bool
	// Registerer receives the agent's and the device plugin's metrics; nil
	// registers none.
	Registerer prometheus.Registerer
	// Logger logs; default slog.Default().
	Logger *slog.Logger
	// Clock is the time profiles and windows are selected for; default
	// time.Now. Tests move it to reach a window boundary quickly.
	Clock func() time.Time
	// AfterOp runs after each NVML op is done and checkpointed (a
	// profile's change, and with Advertise dra the making and destroying of
	// claims' MIG devices); an error stops the apply as a crash would. A
	// fault-injection hook for tests.
	AfterOp func(gpu, step int, op partition.Op) error
	// DrainRetry is how often a change blocked by devices in use is
	// retried; default DefaultDrainRetry.
	DrainRetry time.Duration
	// PluginRetryInterval is how often the device plugin retries a failed
	// registration and checks its sockets; default plugin's default. Unused
	// with Advertise none.
	PluginRetryInterval time.Duration
	// ProfileLabel is the node label that pins a profile; default
	// carve.dev/profile. nvidia.com/mig.config keeps the habit of nodes
	// labelled for NVIDIA's MIG manager.
	ProfileLabel string
	// Labels choose the optional node label keys.
	Labels LabelOptions
	// PauseOperands are the GPU Operator operands paused during a
	// disruptive change where the node has their deploy labels
	// (nvidia.com/gpu.deploy.<operand>); nil pauses none. carve-agent's
	// default is DefaultPauseOperands(Advertise).
	PauseOperands []string
	// OperandTimeout bounds the wait for paused operands' pods to leave
	// the node; default DefaultOperandTimeout.
	OperandTimeout time.Duration
	// RolloutSlotDuration is how long a rollout slot holds without
	// renewal; default DefaultSlotDuration. RolloutRetry is how often a
	// change waiting for a slot asks again; default DefaultSlotRetry.
	// Tests shorten both.
	RolloutSlotDuration, RolloutRetry time.Duration
	// XIDPolicy is the device plugin's XID policy (which XIDs are ignored,
	// which recover after a quiet period, which keep a device unhealthy
	// until a reset or reboot); a zero one is xidpolicy.Default(). With
	// StateDir set, the devices critical XIDs made unhealthy are kept
	// there across restarts. Unused with Advertise none and dra.
	XIDPolicy xidpolicy.Policy
	// Version is the build of the agent: recorded in the node record
	// (NodeRecord.AgentVersion), exported as carve_agent_build_info and
	// logged at start. cmd/carve-agent gives buildinfo.Get(); tests may
	// leave it empty.
	Version buildinfo.Info
}

// Agent is carve's node agent: the device-plugin servers and the
// Controller that reconciles the Node, wired together. With Advertise none
// it is the Controller alone.
type Agent struct {
	cfg  Config
	ctrl *Controller
	// plugin is nil unless Advertise is device-plugin, driver unless dra.
	plugin  *plugin.Manager
	driver  *dra.Driver
	rollout *LeaseRollout
	// scheme names the objects Events are about.
	scheme *runtime.Scheme
}

// New builds an Agent; Run starts it.
func New(cfg Config) (*Agent, error) {
	if err := checkConfig(cfg); err != nil {
		return nil, err
	}
	cfg = withDefaults(cfg)
	gate, ok := cfg.GPUs.(*partition.Gate)
	if !ok {
		gate = partition.NewGate(cfg.GPUs)
		cfg.GPUs = gate
	}
	var metrics *Metrics
	if cfg.Registerer != nil {
		var err error
		if metrics, err = NewMetrics(cfg.Registerer, cfg.Version); err != nil {
			return nil, fmt.Errorf("agent: metrics: %w", err)
		}
	}
	side, err := newKubeletSide(cfg, metrics.DRA())
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	ctrl, ro := newController(cfg, side, metrics)
	ctrl.Reconciler.Driver = gate
	metrics.watch(ctrl.Ready, advertisedOf(side.plugin))
	if side.driver != nil {
		metrics.watchDRA(side.driver)
	}
	scheme, err := kubeclient.NewScheme()
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	return &Agent{cfg: cfg, ctrl: ctrl, plugin: side.plugin, driver: side.driver, rollout: ro, scheme: scheme}, nil
}

// checkConfig refuses a Config New cannot build an Agent from: a required
// field missing, or settings that contradict each other.
func checkConfig(cfg Config) error {
	switch {
	case cfg.NodeName == "":
		return errors.New("agent: NodeName is required")
	case cfg.Client == nil:
		return errors.New("agent: Client is required")
	case cfg.ConfigMapNamespace == "" || cfg.ConfigMapName == "":
		return errors.New("agent: ConfigMap namespace and name are required")
	case cfg.GPUs == nil:
		return errors.New("agent: GPUs is required")
	}
	if err := CheckProfileLabel(cfg.ProfileLabel); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	if err := CheckOperands(cfg.PauseOperands); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	if err := CheckAdvertise(cfg.Advertise); err != nil {
		return fmt.Errorf("agent: Advertise %w", err)
	}
	switch {
	case cfg.CDI && cfg.Advertise == AdvertiseNone:
		return fmt.Errorf("agent: %w", errCDIWithoutAdvertising)
	case cfg.CDI && cfg.Advertise == AdvertiseDRA:
		return fmt.Errorf("agent: %w", errCDIWithDRA)
	}
	return nil
}

// withDefaults fills the Config's defaults that New needs before it
// builds the parts (the parts default the rest themselves).
func withDefaults(cfg Config) Config {
	if cfg.Advertise == "" {
		cfg.Advertise = AdvertiseDevicePlugin
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.PodResourcesSocket == "" {
		cfg.PodResourcesSocket = plugin.DefaultPodResourcesSocket
	}
	return cfg
}

// kubeletSide is what faces the kubelet: what advertises the devices and
// what says which are in use.
type kubeletSide struct {
	// plugin is nil unless Advertise is device-plugin, driver unless dra.
	plugin  *plugin.Manager
	driver  *dra.Driver
	devices Advertiser
	inUse   InUseSource
}

// newKubeletSide builds the device plugin or the DRA driver (or neither,
// with Advertise none) and the source of the devices in use; the driver
// tells draMetrics (nil: nothing) of its prepares.
func newKubeletSide(cfg Config, draMetrics dra.Metrics) (kubeletSide, error) {
	s := kubeletSide{devices: NoAdvertiser{}, inUse: NothingInUse{}}
	if cfg.PodResourcesSocket != PodResourcesNone {
		s.inUse = plugin.NewPodResourcesClient(cfg.PodResourcesSocket, 0)
	}
	switch cfg.Advertise {
	case AdvertiseDevicePlugin:
		mgr, err := plugin.New(plugin.Options{
			DevicePluginDir: cfg.DevicePluginDir, NVML: cfg.GPUs, CDI: cfg.CDI,
			Registerer: cfg.Registerer, Logger: cfg.Logger, RetryInterval: cfg.PluginRetryInterval,
			Health: healthOptions(cfg),
		})
		if err != nil {
			return kubeletSide{}, fmt.Errorf("device plugin: %w", err)
		}
		s.plugin, s.devices = mgr, mgr
	case AdvertiseDRA:
		var countXID func(ignored bool)
		if cfg.Registerer != nil {
			var err error
			if countXID, err = plugin.XIDCounter(cfg.Registerer); err != nil {
				return kubeletSide{}, fmt.Errorf("DRA driver: %w", err)
			}
		}
		driver, err := dra.New(dra.Config{
			Client: cfg.Client, NodeName: cfg.NodeName, KubeletRootDir: cfg.KubeletRootDir,
			CDIDir: cfg.CDIDir, StateDir: cfg.StateDir, GPUs: cfg.GPUs, Logger: cfg.Logger,
			Health: healthOptions(cfg), CountXID: countXID, AfterOp: cfg.AfterOp, Metrics: draMetrics,
		})
		if err != nil {
			return kubeletSide{}, err
		}
		s.driver, s.devices, s.inUse = driver, driver, claimsInUse{pods: s.inUse, driver: driver}
	}
	return s, nil
}

// healthOptions is the XID watch of the device plugin or the DRA driver:
// the policy, and the state file that keeps critical XIDs across restarts.
func healthOptions(cfg Config) xidhealth.Options {
	h := xidhealth.Options{Policy: cfg.XIDPolicy}
	if cfg.StateDir != "" {
		h.StateFile = filepath.Join(cfg.StateDir, carvev1.XIDHealthFile)
	}
	return h
}

// newController builds the Controller with its Reconciler, and the
// rollout member that bounds the disruptive changes.
func newController(cfg Config, side kubeletSide, metrics *Metrics) (*Controller, *LeaseRollout) {
	ctrl := &Controller{
		Client: cfg.Client, NodeName: cfg.NodeName,
		ConfigMapNamespace: cfg.ConfigMapNamespace, ConfigMapName: cfg.ConfigMapName,
		Metrics: metrics, Clock: cfg.Clock, Logger: cfg.Logger, ProfileLabel: cfg.ProfileLabel,
		InUsePoll: InUsePollInterval,
	}
	var cps *Checkpoints
	if cfg.StateDir != "" {
		cps = &Checkpoints{Dir: cfg.StateDir}
	}
	ro := &LeaseRollout{
		Client: cfg.Client, Namespace: cfg.ConfigMapNamespace, ConfigMap: cfg.ConfigMapName, Node: cfg.NodeName,
		SlotDuration: cfg.RolloutSlotDuration, Logger: cfg.Logger,
	}
	ctrl.Reconciler = &Reconciler{
		Lib: cfg.GPUs, InUse: side.inUse, Devices: side.devices, Advertise: cfg.Advertise,
		Checkpoints: cps, Logger: cfg.Logger, Clock: cfg.Clock, DrainRetry: cfg.DrainRetry,
		Hooks:  Hooks{BeforeApply: ctrl.RecordApplying, AfterOp: cfg.AfterOp, RecordChange: ctrl.RecordChange},
		Labels: cfg.Labels, Operands: operandsOf(cfg), OperandNames: cfg.PauseOperands,
		Rollout: ro, SlotRetry: cfg.RolloutRetry, AgentVersion: cfg.Version.Version, Hold: ctrl.Held,
		ConfigMap: cfg.ConfigMapNamespace + "/" + cfg.ConfigMapName,
	}
	return ctrl, ro
}

// operandsOf pauses the GPU Operator operands of cfg.PauseOperands on the
// node; nil when there are none to pause.
func operandsOf(cfg Config) Operands {
	if len(cfg.PauseOperands) == 0 {
		return nil
	}
	timeout := cfg.OperandTimeout
	if timeout <= 0 {
		timeout = DefaultOperandTimeout
	}
	return &nodeOperands{client: cfg.Client, node: cfg.NodeName, timeout: timeout, every: time.Second}
}

// servers are the parts that serve the kubelet, by name: the device plugin
// or the DRA driver, or none.
func (a *Agent) servers() map[string]func(context.Context) error {
	switch {
	case a.plugin != nil:
		return map[string]func(context.Context) error{"device plugin": a.plugin.Run}
	case a.driver != nil:
		return map[string]func(context.Context) error{"DRA driver": a.driver.Run}
	}
	return nil
}

// InFlight names the NVML operation the agent is running now ("GPU 0 op 3
// reset-gpu"), "" when none is: what a shutdown waits for.
func (a *Agent) InFlight() string { return a.ctrl.Reconciler.InFlight() }

// Ready reports whether the agent has synced its caches and finished a
// reconcile (the /readyz answer).
func (a *Agent) Ready() bool { return a.ctrl.Ready() }

// Run serves devices (unless Advertise is none) and reconciles until ctx
// ends (nil) or a part fails for good (its error). The device plugin keeps
// serving while the API server is unreachable; the Controller retries with
// backoff.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	defer broadcaster.Shutdown()
	broadcaster.StartRecordingToSink(kubeclient.EventSink{Client: a.cfg.Client})
	a.ctrl.Events = broadcaster.NewRecorder(a.scheme, corev1.EventSource{Component: "carve-agent", Host: a.cfg.NodeName})

	servers := a.servers()
	errc := make(chan error, 1+len(servers))
	parts := 1 + len(servers)
	for name, run := range servers {
		go func() {
			err := run(ctx)
			if ctx.Err() == nil {
				if err == nil {
					err = errors.New("stopped unexpectedly")
				}
				errc <- fmt.Errorf("%s: %w", name, err)
				return
			}
			errc <- nil
		}()
	}
	go func() { errc <- a.ctrl.Run(ctx) }()
	rolloutDone := make(chan struct{})
	go func() {
		defer close(rolloutDone)
		if err := a.rollout.Run(ctx); err != nil {
			a.cfg.Logger.Warn("rollout member Lease", "err", err)
		}
	}()
	a.cfg.Logger.Info("carve-agent started", "version", a.cfg.Version.Version, "revision", a.cfg.Version.Revision,
		"go", a.cfg.Version.GoVersion, "node", a.cfg.NodeName,
		"configMap", a.cfg.ConfigMapNamespace+"/"+a.cfg.ConfigMapName, "advertise", a.cfg.Advertise, "cdi", a.cfg.CDI)

	var err error
	got := 0
	select {
	case <-ctx.Done():
	case err = <-errc:
		got++
	}
	cancel()
	// Wait for the other part; what it says after the stop is not news.
	for ; got < parts; got++ {
		if late := <-errc; late != nil {
			a.cfg.Logger.Debug("stopped after the first part", "err", late)
		}
	}
	if a.plugin != nil {
		a.plugin.Stop()
	}
	<-rolloutDone
	return err
}

// CheckProfileLabel checks a key for Config.ProfileLabel: a valid label
// key, and not one carve may write itself ("" is the default,
// carve.dev/profile).
func CheckProfileLabel(key string) error {
	if key == "" {
		return nil
	}
	if errs := validation.IsQualifiedName(key); len(errs) > 0 {
		return fmt.Errorf("profile label %q: %s", key, strings.Join(errs, "; "))
	}
	if carvev1.MayWrite(key) {
		return fmt.Errorf("profile label %q: a key carve writes itself; an operator's label must be another (carve.dev/profile, nvidia.com/mig.config, or one of your own)", key)
	}
	return nil
}

// CheckOperands checks operand names for Config.PauseOperands: each must
// make a valid label key nvidia.com/gpu.deploy.<operand>.
func CheckOperands(names []string) error {
	for _, n := range names {
		if n == "" {
			return errors.New("an empty operand name")
		}
		key := carvev1.OperandLabel(n)
		if errs := validation.IsQualifiedName(key); len(errs) > 0 {
			return fmt.Errorf("operand %q: label %s is not a valid label key: %s", n, key, strings.Join(errs, "; "))
		}
	}
	return nil
}
