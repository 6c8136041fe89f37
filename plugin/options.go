package plugin

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/xidhealth"
)

// ReplicaPolicy says how GetPreferredAllocation picks replicas of
// time-sliced devices.
type ReplicaPolicy int

const (
	// Spread picks replicas on as many distinct physical devices (and GPUs)
	// as possible, so that containers of one pod share as little as
	// possible. It is the default.
	Spread ReplicaPolicy = iota
	// Pack picks replicas on as few physical devices as possible, keeping
	// other devices free for later requests.
	Pack
)

// String returns "spread" or "pack".
func (p ReplicaPolicy) String() string {
	if p == Pack {
		return "pack"
	}
	return "spread"
}

// Defaults of Options.
const (
	// DefaultKubeletSocket is the kubelet's registration socket name inside
	// the device-plugin directory.
	DefaultKubeletSocket = "kubelet.sock"
	// DefaultCDIKind is the CDI vendor/class of the device names Allocate
	// returns when CDI is enabled ("nvidia.com/gpu=<uuid>").
	DefaultCDIKind = "nvidia.com/gpu"
	// DefaultTimeout bounds one registration with the kubelet.
	DefaultTimeout = 5 * time.Second
	// DefaultRetryInterval is how often Run retries registrations that
	// failed and checks that every server's socket is still in place.
	DefaultRetryInterval = 5 * time.Second
)

// HealthOptions configures the XID health watch (package xidhealth).
type HealthOptions = xidhealth.Options

// Options configures a Manager. The zero value is usable: the kubelet's
// default directory, no NVML (no topology, no health loop), no metrics.
type Options struct {
	// DevicePluginDir is the kubelet's device-plugin directory (agent flag
	// --device-plugin-dir); default /var/lib/kubelet/device-plugins.
	DevicePluginDir string
	// KubeletSocket is the name of the kubelet's registration socket in
	// DevicePluginDir; default "kubelet.sock".
	KubeletSocket string
	// NVML gives the GPU topology for GetPreferredAllocation and the XID
	// events for health. nil disables both.
	NVML partition.NVML
	// CDI makes Allocate also return CDI device names CDIKind=<uuid>.
	CDI bool
	// CDIKind is the CDI kind of those names; default "nvidia.com/gpu".
	CDIKind string
	// FailRequestsGreaterThanOne makes Allocate refuse a container request
	// for more than one device of a shared (time-sliced) resource.
	FailRequestsGreaterThanOne bool
	// ReplicaPolicy picks replicas in GetPreferredAllocation; default Spread.
	ReplicaPolicy ReplicaPolicy
	// NUMANode, if set, gives the NUMA node of a GPU by index; devices of
	// GPUs with a known node carry it as a topology hint in ListAndWatch.
	NUMANode func(gpu int) (node int, ok bool)
	// Health configures the XID health loop Run starts when NVML is set.
	Health HealthOptions
	// Registerer receives the plugin's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Logger logs; default slog.Default().
	Logger *slog.Logger
	// Timeout bounds one registration with the kubelet and the probe of an
	// existing socket; default DefaultTimeout.
	Timeout time.Duration
	// RetryInterval is how often Run retries failed registrations and
	// checks sockets; default DefaultRetryInterval.
	RetryInterval time.Duration
}

// withDefaults fills in defaults and checks the options.
func (o Options) withDefaults() (Options, error) {
	if o.DevicePluginDir == "" {
		o.DevicePluginDir = pluginapi.DevicePluginPath
	}
	if o.KubeletSocket == "" {
		o.KubeletSocket = DefaultKubeletSocket
	}
	if o.CDIKind == "" {
		o.CDIKind = DefaultCDIKind
	}
	if o.ReplicaPolicy != Spread && o.ReplicaPolicy != Pack {
		return o, fmt.Errorf("plugin options: unknown replica policy %d", o.ReplicaPolicy)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.RetryInterval <= 0 {
		o.RetryInterval = DefaultRetryInterval
	}
	h, err := o.Health.WithDefaults()
	if err != nil {
		return o, fmt.Errorf("plugin options: %w", err)
	}
	o.Health = h
	return o, nil
}
