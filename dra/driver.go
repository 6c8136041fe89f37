package dra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/carve-dev/carve/kubeclient"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/timeslice"
	"github.com/carve-dev/carve/xidhealth"
)

// DefaultKubeletRootDir is the kubelet's root directory (carve-agent
// --kubelet-root-dir): the driver registers in its plugins_registry and
// serves in plugins/gpu.carve.dev.
const DefaultKubeletRootDir = "/var/lib/kubelet"

// Config configures a Driver.
type Config struct {
	// Client talks to the API server (required).
	Client kubeclient.Interface
	// NodeName is the node the driver serves (required).
	NodeName string
	// KubeletRootDir defaults to DefaultKubeletRootDir.
	KubeletRootDir string
	// CDIDir is where claims' CDI specs go; default DefaultCDIDir.
	CDIDir string
	// StateDir keeps the record of prepared claims; "" keeps none (a
	// restarted driver then forgets them: for tests only).
	StateDir string
	// GPUs is read to know the node's devices when a claim is checked
	// before the first Advertise (a restarted agent's first pass); nil
	// knows only what was advertised.
	GPUs partition.NVML
	// RepublishInterval is how often the slice is checked and written
	// again if someone (the kubelet, at its start) removed or changed it;
	// default DefaultRepublishInterval.
	RepublishInterval time.Duration
	// Health configures the XID watch over GPUs: a device an XID keeps
	// unhealthy carries the taint TaintXID in the slice, with the effect
	// its class has in the policy, and the kubelet is told the device is
	// unhealthy (WatchHealthStatus). Without GPUs there is no watch.
	Health xidhealth.Options
	// CountXID, if set, is called for every XID event the watch sees;
	// ignored says whether the policy ignores it.
	CountXID func(ignored bool)
	// Metrics, if set, is told how each claim's prepare and unprepare
	// went.
	Metrics Metrics
	// HealthResendInterval is how often the devices' health is sent to
	// the kubelet again when nothing changed; default
	// DefaultHealthResendInterval. It must stay below HealthCheckTimeout.
	HealthResendInterval time.Duration
	// AfterOp, when set, runs after each NVML op that makes or destroys a
	// claim's MIG device (the crash tests' hook, as the reconciler's); an
	// error stops the make or removal there.
	AfterOp func(gpu, step int, op partition.Op) error
	// Logger logs; default slog.Default().
	Logger *slog.Logger
}

// DefaultRepublishInterval is Config.RepublishInterval's default.
const DefaultRepublishInterval = 30 * time.Second

// Driver is carve's DRA driver on one node: it publishes the node's
// ResourceSlice (Advertise, Update, Withdraw, as the reconciler asks),
// prepares and unprepares claims for the kubelet (writing their CDI specs),
// reports the devices' health to the kubelet (WatchHealthStatus; a device
// an XID keeps unhealthy is also tainted in the slice, TaintXID), and says
// which devices claims hold (Holders).
type Driver struct {
	cfg     Config
	pub     *Publisher
	cdi     CDI
	claims  *claimStore
	log     *slog.Logger
	mu      sync.Mutex
	gpus    []partition.GPU
	offer   Offer
	dropped map[string]bool // devices withdrawn since the last Advertise
	dynamic []DynamicGPU    // GPUs whose MIG devices are made for claims (SetDynamic)
	// unavailable are the dynamic devices the GPU refused to make, with
	// why; changing the GPUs (UUIDs) changing between static and dynamic.
	unavailable map[string]unavailableMark
	changing    map[string]bool
	// published are the devices of the last publish, as written.
	published []resourceapi.Device
	// health keeps the devices XIDs made unhealthy; nil without GPUs.
	health *xidhealth.Tracker
	// watchers are the kubelet's health streams, told of every change.
	watchers healthWatchers
	// layouts are the dynamic GPUs' layouts, for LargestPlaceable.
	layouts layoutCache
}

// New returns a Driver. It loads the prepared claims and removes CDI specs
// no prepared claim owns.
func New(cfg Config) (*Driver, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("dra: Client is required")
	case cfg.NodeName == "":
		return nil, errors.New("dra: NodeName is required")
	}
	if cfg.KubeletRootDir == "" {
		cfg.KubeletRootDir = DefaultKubeletRootDir
	}
	if cfg.CDIDir == "" {
		cfg.CDIDir = DefaultCDIDir
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.RepublishInterval <= 0 {
		cfg.RepublishInterval = DefaultRepublishInterval
	}
	switch {
	case cfg.HealthResendInterval <= 0:
		cfg.HealthResendInterval = DefaultHealthResendInterval
	case cfg.HealthResendInterval >= HealthCheckTimeout:
		return nil, fmt.Errorf("dra: HealthResendInterval %v: want less than the kubelet's HealthCheckTimeout %v", cfg.HealthResendInterval, HealthCheckTimeout)
	}
	store, err := loadClaims(cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("dra: %w", err)
	}
	d := &Driver{
		cfg: cfg, cdi: CDI{Dir: cfg.CDIDir}, claims: store, log: cfg.Logger,
		pub: &Publisher{Client: cfg.Client, Node: cfg.NodeName},
	}
	if cfg.GPUs != nil {
		if d.health, err = xidhealth.New(cfg.GPUs, cfg.Health, xidhealth.Hooks{Changed: d.healthChanged, XID: cfg.CountXID}, cfg.Logger); err != nil {
			return nil, fmt.Errorf("dra: %w", err)
		}
	}
	gone, err := d.cdi.Sweep(store.has)
	if err != nil {
		return nil, fmt.Errorf("dra: %w", err)
	}
	if len(gone) > 0 {
		d.log.Info("removed CDI specs of claims not prepared", "claims", gone)
	}
	return d, nil
}

// Run registers the driver with the kubelet, with its health service, and
// serves it until ctx ends.
func (d *Driver) Run(ctx context.Context) error {
	registry, data := filepath.Join(d.cfg.KubeletRootDir, "plugins_registry"), filepath.Join(d.cfg.KubeletRootDir, "plugins", DriverName)
	for _, dir := range []string{registry, data} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("dra: kubelet plugin directory: %w", err)
		}
	}
	plugin, err := startKubeletPlugin(ctx, d.cfg.Client, d, registry, data, d.registerHealth, d.log)
	if err != nil {
		return fmt.Errorf("dra: start kubelet plugin: %w", err)
	}
	d.log.Info("DRA kubelet plugin serving", "driver", DriverName, "kubeletRootDir", d.cfg.KubeletRootDir, "cdiDir", d.cfg.CDIDir)
	defer plugin.stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.health.Run(ctx)
	}()
	d.sweepInstances(ctx)
	d.keepPublished(ctx)
	<-done
	return nil
}

// keepPublished republishes the last offer every RepublishInterval until
// ctx ends: the kubelet deletes its node's slices when it starts, and
// nothing else would make the agent write them again before its next
// change. Publish writes only when the slice differs.
func (d *Driver) keepPublished(ctx context.Context) {
	t := time.NewTicker(d.cfg.RepublishInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d.sweepInstances(ctx)
		d.mu.Lock()
		var err error
		if d.offer.UUIDs != nil {
			err = d.publishLocked(ctx)
		}
		d.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			d.log.Warn("republishing the ResourceSlice failed; retrying", "err", err)
		}
	}
}

// Advertise publishes the GPUs' devices as res advertises them (see
// Describe) and ends every withdrawal. When the cluster cannot share a
// device it publishes the unshared ones and returns ErrSharingDropped.
func (d *Driver) Advertise(ctx context.Context, gpus []partition.GPU, res timeslice.Resources) error {
	off, err := Describe(gpus, res, d.Dynamic()...)
	if err != nil {
		return fmt.Errorf("dra: describe devices: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.gpus, d.offer, d.dropped = slices.Clone(gpus), off, nil
	return d.publishLocked(ctx)
}

// Update publishes res over the GPUs last advertised.
func (d *Driver) Update(ctx context.Context, res timeslice.Resources) error {
	d.mu.Lock()
	gpus := d.gpus
	d.mu.Unlock()
	return d.Advertise(ctx, gpus, res)
}

// Withdraw stops publishing devices named by ids (device names, device
// UUIDs or GPU UUIDs, whose devices all go) and returns once the API
// server holds the reduced slice.
func (d *Driver) Withdraw(ctx context.Context, ids []string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dropped == nil {
		d.dropped = map[string]bool{}
	}
	for _, dev := range d.offer.Devices {
		if matches(dev, ids) {
			d.dropped[dev.Name] = true
		}
	}
	return d.publishLocked(ctx)
}

// matches reports whether ids name the device, its UUID or its GPU's.
func matches(dev resourceapi.Device, ids []string) bool {
	for _, attr := range []resourceapi.QualifiedName{AttrUUID, AttrParentUUID} {
		if v := dev.Attributes[attr].StringValue; v != nil && slices.Contains(ids, *v) {
			return true
		}
	}
	return slices.Contains(ids, dev.Name)
}

func (d *Driver) publishLocked(ctx context.Context) error {
	devs := slices.DeleteFunc(slices.Clone(d.offer.Devices), func(dev resourceapi.Device) bool { return d.dropped[dev.Name] })
	devs = d.taintLocked(devs)
	devs = d.taintUnavailableLocked(devs)
	d.published = devs
	d.watchers.kick()
	if err := d.pub.Publish(ctx, devs, d.offer.CounterSets...); err != nil {
		return fmt.Errorf("dra: publish ResourceSlice: %w", err)
	}
	return nil
}

var _ claimPreparer = (*Driver)(nil)
