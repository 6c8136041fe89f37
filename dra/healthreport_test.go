package dra

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"

	"github.com/carve-dev/carve/kubeclient/clientset"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/timeslice"
	"github.com/carve-dev/carve/xidhealth"
)

// migSim is a simulated node: GPU 0 whole, GPU 1 in MIG mode with two
// MIG devices of its first profile. It returns the (GI, CI) IDs of GPU
// 1's first MIG device.
func migSim(t *testing.T) (*sim.Machine, []partition.GPU, [2]int) {
	t.Helper()
	m, err := sim.New("h100-80gb*2")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Init(); err != nil {
		t.Fatal(err)
	}
	dev, err := m.Device(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.SetMIGMode(partition.MIGEnabled); err != nil {
		t.Fatal(err)
	}
	if err := dev.Reset(); err != nil {
		t.Fatal(err)
	}
	profiles, err := dev.GPUInstanceProfiles()
	if err != nil || len(profiles) == 0 || len(profiles[0].Placements) < 2 {
		t.Fatalf("profiles: %v %v", profiles, err)
	}
	var first [2]int
	for i, pl := range profiles[0].Placements[:2] {
		gi, err := dev.CreateGPUInstance(profiles[0].ID, pl)
		if err != nil {
			t.Fatal(err)
		}
		ci, err := dev.CreateComputeInstance(gi.ID)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = [2]int{gi.ID, ci.ID}
		}
	}
	gpus, err := partition.ReadInventory(m)
	if err != nil {
		t.Fatal(err)
	}
	return m, gpus, first
}

// healthStream reads the kubelet's side of the health service: each report
// as device name to "Health" or "Health: message".
type healthStream struct {
	t       *testing.T
	reports chan map[string]string
}

// watchHealth opens the health stream on the driver's socket as the
// kubelet does.
func watchHealth(ctx context.Context, t *testing.T, socket string) *healthStream {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	var stream grpc.ServerStreamingClient[drahealthv1.NodeWatchResourcesResponse]
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if stream, err = drahealthv1.NewDRAResourceHealthClient(conn).NodeWatchResources(ctx, &drahealthv1.NodeWatchResourcesRequest{}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("open the health stream: %v", err)
		}
	}
	h := &healthStream{t: t, reports: make(chan map[string]string, 100)}
	go func() {
		defer close(h.reports)
		for {
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			got := map[string]string{}
			for _, dev := range resp.GetDevices() {
				if dev.GetDevice().GetPoolName() != node || dev.GetHealthCheckTimeoutSeconds() != int64(HealthCheckTimeout/time.Second) {
					t.Errorf("device %v: want pool %s and timeout %v", dev, node, HealthCheckTimeout)
				}
				s := dev.GetHealth().String()
				if dev.GetMessage() != "" {
					s += ": " + dev.GetMessage()
				}
				got[dev.GetDevice().GetDeviceName()] = s
			}
			select {
			case h.reports <- got:
			case <-ctx.Done():
				return
			}
		}
	}()
	return h
}

// until reads reports until one matches want (messages compared by
// prefix), calling act again every 100ms meanwhile: the XID watch may not
// have its event set yet when act first raises an XID.
func (h *healthStream) until(what string, want map[string]string, act func()) {
	h.t.Helper()
	deadline := time.After(10 * time.Second)
	again := time.NewTicker(100 * time.Millisecond)
	defer again.Stop()
	act()
	var last map[string]string
	for {
		select {
		case got, ok := <-h.reports:
			if !ok {
				h.t.Fatalf("%s: the health stream ended", what)
			}
			last = got
			if matchPrefix(want, got) {
				return
			}
		case <-again.C:
			act()
		case <-deadline:
			h.t.Fatalf("%s: last report (-want +got):\n%s", what, cmp.Diff(want, last))
		}
	}
}

// matchPrefix reports whether got has want's devices, each value starting
// with want's.
func matchPrefix(want, got map[string]string) bool {
	if len(want) != len(got) {
		return false
	}
	for k, v := range want {
		if !strings.HasPrefix(got[k], v) {
			return false
		}
	}
	return true
}

// TestHealthStream serves the driver on a real kubelet plugin socket and
// watches device health as the kubelet does: every published device is
// healthy at first (the whole GPU shared by time-slicing, the MIG
// devices); an XID on one MIG device makes it alone unhealthy, with a
// message naming the XID; one on the whole GPU makes it unhealthy; the
// GPU's reset makes it healthy again; a withdrawn device is unknown; and
// the stream ends when the driver stops.
func TestHealthStream(t *testing.T) {
	m, gpus, mig := migSim(t)
	root := t.TempDir()
	d, err := New(Config{Client: clientset.Wrap(newFake()), NodeName: node, KubeletRootDir: root, CDIDir: t.TempDir(), GPUs: m,
		Logger: slog.New(slog.DiscardHandler), HealthResendInterval: 20 * time.Second,
		Health: xidhealth.Options{Poll: 10 * time.Millisecond, BootID: func() (string, error) { return "b", nil }}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if err := d.Advertise(ctx, gpus, expand(t, gpus, map[int]timeslice.Sharing{0: {Replicas: 2}})); err != nil {
		t.Fatal(err)
	}
	devs := names(d.published)
	if len(devs) != 3 {
		t.Fatalf("published %v, want GPU 0 and two MIG devices", devs)
	}
	ran := make(chan error, 1)
	go func() { ran <- d.Run(ctx) }()
	h := watchHealth(ctx, t, filepath.Join(root, "plugins", DriverName, "dra.sock"))
	all := func(health string) map[string]string {
		out := map[string]string{}
		for _, n := range devs {
			out[n] = health
		}
		return out
	}
	h.until("at first", all("HEALTHY"), func() {})

	want := all("HEALTHY")
	want[devs[1]] = "UNHEALTHY: XID 94 (critical) on MIG device MIG-"
	h.until("XID 94 on a MIG device", want, func() {
		if err := m.RaiseXID(1, 94, mig[0], mig[1]); err != nil {
			t.Fatal(err)
		}
	})
	want["gpu-0"] = "UNHEALTHY: XID 79 (critical) on GPU " + gpus[0].UUID + " at "
	h.until("XID 79 on GPU 0", want, func() {
		if err := m.RaiseXID(0, 79, -1, -1); err != nil {
			t.Fatal(err)
		}
	})
	want["gpu-0"] = "HEALTHY"
	h.until("GPU 0 reset", want, func() { d.GPUReset(gpus[0].UUID) })
	want[devs[2]] = "UNKNOWN: withdrawn"
	h.until("a MIG device withdrawn", want, func() {
		if err := d.Withdraw(ctx, []string{devs[2]}); err != nil {
			t.Fatal(err)
		}
	})

	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	for range h.reports { // drained until the stream ends
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		d.watchers.mu.Lock()
		left := len(d.watchers.kicks)
		d.watchers.mu.Unlock()
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d health streams still registered after the driver stopped", left)
		}
	}
}

// TestHealthReportUnknown: without an XID watch (no GPU library, or the
// watch turned off) carve cannot vouch for a device: its health is Unknown.
func TestHealthReportUnknown(t *testing.T) {
	m, gpus := simGPUs(t, "h100-80gb")
	for _, lib := range []partition.NVML{nil, m} {
		d, err := New(Config{Client: clientset.Wrap(newFake()), NodeName: node, CDIDir: t.TempDir(), GPUs: lib,
			Health: xidhealth.Options{Disabled: true}})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Advertise(t.Context(), gpus, expand(t, gpus, nil)); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, dev := range d.healthReport().Devices {
			got = append(got, dev.GetDevice().GetDeviceName()+" "+dev.GetHealth().String())
		}
		if diff := cmp.Diff([]string{"gpu-0 UNKNOWN"}, got); diff != "" {
			t.Errorf("GPUs %v: health (-want +got):\n%s", lib != nil, diff)
		}
	}
}

// TestHealthStreamBounded: a stream the kubelet does not read holds no
// queue: changes while it waits fold into one pending wake-up, and the
// stream returns once its context ends.
func TestHealthStreamBounded(t *testing.T) {
	d := newDriver(t, newFake(), "", t.TempDir())
	ctx, cancel := context.WithCancel(t.Context())
	reports := make(chan *drahealthv1.NodeWatchResourcesResponse)
	done := make(chan error, 1)
	go func() {
		done <- (&healthServer{d: d}).NodeWatchResources(nil, &stalledStream{ctx: ctx, sent: reports})
	}()
	<-reports
	kicked := make(chan struct{})
	go func() {
		defer close(kicked)
		for range 1000 {
			d.watchers.kick()
		}
	}()
	select {
	case <-kicked:
	case <-time.After(10 * time.Second):
		t.Fatal("changes waited for a stream the kubelet does not read")
	}
	d.watchers.mu.Lock()
	for kick := range d.watchers.kicks {
		if cap(kick) != 1 {
			t.Errorf("wake-up channel of %d slots, want 1", cap(kick))
		}
	}
	d.watchers.mu.Unlock()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("NodeWatchResources did not return after its context ended")
	}
}

// stalledStream is a health stream whose kubelet reads one report at a
// time from sent, and then no more unless the test reads again.
type stalledStream struct {
	grpc.ServerStream
	ctx  context.Context
	sent chan *drahealthv1.NodeWatchResourcesResponse
}

func (s *stalledStream) Context() context.Context { return s.ctx }

func (s *stalledStream) Send(r *drahealthv1.NodeWatchResourcesResponse) error {
	select {
	case s.sent <- r:
		return nil
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
}
