package plugin

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/carve-dev/carve/partition"
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
	// DefaultHealthQuiet is how long a device stays unhealthy after the
	// last critical XID on it.
	DefaultHealthQuiet = 5 * time.Minute
	// DefaultHealthPoll bounds one wait for XID events; it is also how
	// quickly the health loop notices cancellation.
	DefaultHealthPoll = 500 * time.Millisecond
	// DefaultHealthMinBackoff and DefaultHealthMaxBackoff bound the wait
	// before the health loop retries after an NVML error.
	DefaultHealthMinBackoff = 500 * time.Millisecond
	DefaultHealthMaxBackoff = 30 * time.Second
)

// DefaultIgnoredXIDs returns the XIDs the health loop ignores by default:
// errors an application causes (13 graphics engine exception, 31 memory page
// fault, 43 reset channel, 45 preemptive cleanup, 68 video processor
// exception, 109 context switch timeout) rather than faults of the GPU. It
// returns a new slice on each call.
func DefaultIgnoredXIDs() []uint64 { return []uint64{13, 31, 43, 45, 68, 109} }

// HealthOptions configures the XID health loop.
type HealthOptions struct {
	// Disabled turns the health loop off; every device stays Healthy.
	Disabled bool
	// IgnoredXIDs are XIDs that do not affect health. nil means
	// DefaultIgnoredXIDs(); an empty non-nil slice ignores none.
	IgnoredXIDs []uint64
	// Quiet is how long after the last critical XID on a device it turns
	// Healthy again (default DefaultHealthQuiet).
	Quiet time.Duration
	// Poll bounds one EventSet.Wait (default DefaultHealthPoll).
	Poll time.Duration
	// MinBackoff and MaxBackoff bound the exponential backoff after NVML
	// errors (defaults DefaultHealthMinBackoff, DefaultHealthMaxBackoff).
	MinBackoff, MaxBackoff time.Duration
	// Now is the health loop's clock: when a critical XID hit a device,
	// and whether its quiet period has passed; default time.Now. Tests
	// move it to cross the quiet period at a moment of their choosing.
	Now func() time.Time
}

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
	h := &o.Health
	if h.IgnoredXIDs == nil {
		h.IgnoredXIDs = DefaultIgnoredXIDs()
	}
	if h.Quiet <= 0 {
		h.Quiet = DefaultHealthQuiet
	}
	if h.Poll <= 0 {
		h.Poll = DefaultHealthPoll
	}
	if h.MinBackoff <= 0 {
		h.MinBackoff = DefaultHealthMinBackoff
	}
	if h.MaxBackoff <= 0 {
		h.MaxBackoff = DefaultHealthMaxBackoff
	}
	if h.Now == nil {
		h.Now = time.Now
	}
	if h.MaxBackoff < h.MinBackoff {
		return o, fmt.Errorf("plugin options: health max backoff %v below min backoff %v", h.MaxBackoff, h.MinBackoff)
	}
	return o, nil
}
