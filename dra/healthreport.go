package dra

import (
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	resourceapi "k8s.io/api/resource/v1"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drahealthv1alpha1 "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"

	"github.com/carve-dev/carve/xidhealth"
	"github.com/carve-dev/carve/xidpolicy"
)

// Health reporting to the kubelet (KEP-4680): the kubelet shows it in the
// status of the pods whose claims hold a device.
const (
	// DefaultHealthResendInterval is Config.HealthResendInterval's default:
	// the health of every device is sent again this often even when
	// nothing changed, well within HealthCheckTimeout.
	DefaultHealthResendInterval = 10 * time.Second
	// HealthCheckTimeout is how long the kubelet trusts a report: a device
	// not reported again within it turns Unknown in pod status (the
	// driver stopped, or its stream broke).
	HealthCheckTimeout = 30 * time.Second
)

// healthWatchers are the kubelet's open health streams, each woken through
// a channel of one slot: a wake-up while one is pending is folded into it,
// so a stream that is slow to send never makes the driver wait or queue.
type healthWatchers struct {
	mu    sync.Mutex
	kicks map[chan struct{}]struct{}
}

// add returns the wake-up channel of a new stream.
func (w *healthWatchers) add() chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.kicks == nil {
		w.kicks = map[chan struct{}]struct{}{}
	}
	kick := make(chan struct{}, 1)
	w.kicks[kick] = struct{}{}
	return kick
}

// remove forgets a stream that ended.
func (w *healthWatchers) remove(kick chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.kicks, kick)
}

// kick wakes every stream to send the devices' health now.
func (w *healthWatchers) kick() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for kick := range w.kicks {
		select {
		case kick <- struct{}{}:
		default: // one is pending already
		}
	}
}

// healthServer serves the kubelet's health watch (the DRAResourceHealth
// service) from the driver.
type healthServer struct {
	drahealthv1.UnsafeDRAResourceHealthServer
	d *Driver
}

// registerHealth adds the health service, versions v1 and v1alpha1, to the
// DRA gRPC server and returns their names for the registration.
func (d *Driver) registerHealth(srv *grpc.Server) []string {
	h := &healthServer{d: d}
	drahealthv1.RegisterDRAResourceHealthServer(srv, h)
	drahealthv1alpha1.RegisterDRAResourceHealthServer(srv, drahealthv1.V1ServerWrapper{Server: h})
	return []string{drahealthv1.DRAResourceHealthService, drahealthv1alpha1.DRAResourceHealthService}
}

// NodeWatchResources streams the health of every device the driver
// publishes, and of those it withdrew, to the kubelet: at once, whenever
// it changes (an XID, a recovery, a reset, a new offer), and every
// HealthResendInterval, until the stream ends. The kubelet may hold
// several streams; each is served by the call that opened it.
func (h *healthServer) NodeWatchResources(_ *drahealthv1.NodeWatchResourcesRequest, stream drahealthv1.DRAResourceHealth_NodeWatchResourcesServer) error {
	d := h.d
	kick := d.watchers.add()
	defer d.watchers.remove(kick)
	resend := time.NewTicker(d.cfg.HealthResendInterval)
	defer resend.Stop()
	ctx := stream.Context()
	for {
		if err := stream.Send(d.healthReport()); err != nil {
			if ctx.Err() != nil {
				return nil // the kubelet closed the stream
			}
			return fmt.Errorf("send device health: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-kick:
		case <-resend.C:
		}
	}
}

// healthReport is the health of the devices published now (Healthy, or
// Unhealthy while an XID keeps them so) and of those withdrawn (Unknown).
// Without an XID watch every device's health is Unknown.
func (d *Driver) healthReport() *drahealthv1.NodeWatchResourcesResponse {
	d.mu.Lock()
	published := d.published
	var withdrawn []resourceapi.Device
	for _, dev := range d.offer.Devices {
		if d.dropped[dev.Name] {
			withdrawn = append(withdrawn, dev)
		}
	}
	made := map[string]string{}
	for name, rec := range d.claims.rec.Instances {
		made[name] = rec.UUID
	}
	d.mu.Unlock()

	sick := map[string]xidhealth.Sick{}
	for _, s := range d.health.Sick() {
		sick[s.UUID] = s
	}
	watched := d.health != nil && !d.cfg.Health.Disabled
	policy := d.health.Policy()
	now := time.Now()
	report := &drahealthv1.NodeWatchResourcesResponse{Devices: make([]*drahealthv1.DeviceHealth, 0, len(published)+len(withdrawn))}
	entry := func(dev resourceapi.Device, health drahealthv1.HealthStatus, msg string) {
		report.Devices = append(report.Devices, &drahealthv1.DeviceHealth{
			Device: &drahealthv1.DeviceIdentifier{PoolName: d.cfg.NodeName, DeviceName: dev.Name},
			Health: health, Message: msg, LastUpdatedTime: now.Unix(),
			HealthCheckTimeoutSeconds: int64(HealthCheckTimeout / time.Second),
		})
	}
	for _, dev := range published {
		switch s, ok := sickOf(dev, sick, made[dev.Name]); {
		case !watched:
			entry(dev, drahealthv1.HealthStatus_UNKNOWN, "carve does not watch this device's XIDs (no GPU library, or the XID watch is off)")
		case ok:
			entry(dev, drahealthv1.HealthStatus_UNHEALTHY, sickMessage(s, policy))
		default:
			entry(dev, drahealthv1.HealthStatus_HEALTHY, "")
		}
	}
	for _, dev := range withdrawn {
		entry(dev, drahealthv1.HealthStatus_UNKNOWN, "withdrawn: carve is changing this device's GPU")
	}
	return report
}

// sickMessage says which XID keeps a device unhealthy, on what, since
// when, and until when.
func sickMessage(s xidhealth.Sick, policy xidpolicy.Policy) string {
	on := "GPU " + s.GPU
	if s.UUID != s.GPU {
		on = "MIG device " + s.UUID
	}
	until := "until the GPU is reset or the node reboots"
	if s.Class == xidpolicy.Recoverable {
		until = fmt.Sprintf("until %s pass without another XID", policy.Quiet)
	}
	return fmt.Sprintf("XID %d (%s) on %s at %s; unhealthy %s", s.XID, s.Class, on, s.At.UTC().Format(time.RFC3339), until)
}
