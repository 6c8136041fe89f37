package allocate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	stubplugin "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/plugin/v1beta1"

	"github.com/carve-dev/carve/plugin"
	"github.com/carve-dev/carve/test/bench/report"
)

// stubSocket is the name of the stub's socket in the plugin directory.
const stubSocket = "kubelet-stub.sock"

// servers are carve's plugin and the kubelet's stub serving the same
// devices of one node from one directory, with a client connection to each.
type servers struct {
	node    *node
	dir     string
	kubelet *kubelet
	mgr     *plugin.Manager
	cancel  context.CancelFunc
	runDone chan error
	stub    *stubplugin.Stub
	// stubDevs is the stub's device list.
	stubDevs []*pluginapi.Device
	conns    []*grpc.ClientConn
	// carve and stub are the clients, dialled once.
	carve, stubClient pluginapi.DevicePluginClient
}

// startServers starts a kubelet stand-in, carve's Manager (updated with the
// node's resources, then run as the agent runs it) and the stub with the
// devices carve advertises, and dials both.
func startServers(ctx context.Context, n *node) (_ *servers, err error) {
	// A short path: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "cvbench")
	if err != nil {
		return nil, fmt.Errorf("plugin directory: %w", err)
	}
	s := &servers{node: n, dir: dir}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.close())
		}
	}()
	if s.kubelet, err = startKubelet(dir); err != nil {
		return nil, err
	}
	if err := s.startCarve(ctx); err != nil {
		return nil, err
	}
	if err := s.startStub(); err != nil {
		return nil, err
	}
	if s.carve, err = s.dial(s.mgr.SocketPath(n.resource)); err != nil {
		return nil, err
	}
	if s.stubClient, err = s.dial(filepath.Join(dir, stubSocket)); err != nil {
		return nil, err
	}
	return s, nil
}

// carveOptions are the plugin options of the agent's defaults (cmd/carve-agent
// without flags: NVML on, CDI off, metrics registered), in dir.
func carveOptions(dir string, n *node) plugin.Options {
	return plugin.Options{
		DevicePluginDir: dir,
		NVML:            n.lib,
		CDI:             false,
		Registerer:      prometheus.NewRegistry(),
		Logger:          slog.New(slog.DiscardHandler),
	}
}

// startCarve creates the Manager, advertises the node's resources (which
// registers the server) and runs the Manager in the background.
func (s *servers) startCarve(ctx context.Context) error {
	m, err := plugin.New(carveOptions(s.dir, s.node))
	if err != nil {
		return fmt.Errorf("carve's device plugin: %w", err)
	}
	s.mgr = m
	if err := m.Update(ctx, s.node.res); err != nil {
		return fmt.Errorf("carve's device plugin: update: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel, s.runDone = cancel, make(chan error, 1)
	go func() { s.runDone <- m.Run(runCtx) }()
	return nil
}

// startStub starts the kubelet's stub plugin with the devices carve
// advertises and the minimal Allocate answer, and registers it.
func (s *servers) startStub() error {
	adv := s.mgr.Advertised()[s.node.resource]
	if len(adv) == 0 {
		return fmt.Errorf("carve advertises no %s devices", s.node.resource)
	}
	s.stubDevs = stubDevices(adv)
	st := stubplugin.NewDevicePluginStub(klog.Background(), s.stubDevs, filepath.Join(s.dir, stubSocket), s.node.resource, false, true)
	st.SetAllocFunc(stubAllocate)
	if err := st.Start(context.Background()); err != nil {
		return fmt.Errorf("the kubelet's stub plugin: %w", err)
	}
	s.stub = st
	if err := st.Register(context.Background(), s.kubelet.socket(), s.node.resource, ""); err != nil {
		return fmt.Errorf("the kubelet's stub plugin: register: %w", err)
	}
	return nil
}

// stubDevices turns what carve advertises into the stub's device list:
// the same IDs, health and NUMA hints.
func stubDevices(adv []plugin.AdvertisedDevice) []*pluginapi.Device {
	out := make([]*pluginapi.Device, len(adv))
	for i, a := range adv {
		d := &pluginapi.Device{ID: a.ID, Health: pluginapi.Healthy}
		if !a.Healthy {
			d.Health = pluginapi.Unhealthy
		}
		if a.NUMANode >= 0 {
			d.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(a.NUMANode)}}}
		}
		out[i] = d
	}
	return out
}

// stubAllocate is the least a device plugin must answer: per container,
// the requested device IDs in one environment variable.
func stubAllocate(r *pluginapi.AllocateRequest, _ map[string]*pluginapi.Device) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{ContainerResponses: make([]*pluginapi.ContainerAllocateResponse, 0, len(r.GetContainerRequests()))}
	for _, cr := range r.GetContainerRequests() {
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{plugin.VisibleDevicesEnv: strings.Join(cr.GetDevicesIds(), ",")},
		})
	}
	return resp, nil
}

// dial opens a client connection to a plugin socket, as the kubelet does.
func (s *servers) dial(path string) (pluginapi.DevicePluginClient, error) {
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", path, err)
	}
	s.conns = append(s.conns, conn)
	return pluginapi.NewDevicePluginClient(conn), nil
}

// close stops everything startServers started and removes the directory.
func (s *servers) close() error {
	var errs []error
	for _, c := range s.conns {
		errs = append(errs, c.Close())
	}
	if s.kubelet != nil {
		errs = append(errs, s.kubelet.stop())
	}
	if s.stub != nil {
		errs = append(errs, s.stub.Stop(klog.Background()))
	}
	errs = append(errs, s.stopCarve())
	if s.node != nil {
		errs = append(errs, s.node.lib.Shutdown())
	}
	errs = append(errs, os.RemoveAll(s.dir))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stop the servers: %w", err)
	}
	return nil
}

// stopCarve ends the Manager's Run (which stops its servers).
func (s *servers) stopCarve() error {
	switch {
	case s.cancel != nil:
		s.cancel()
		select {
		case err := <-s.runDone:
			return err
		case <-time.After(10 * time.Second):
			return errors.New("carve's device plugin did not stop within 10s")
		}
	case s.mgr != nil:
		s.mgr.Stop()
	}
	return nil
}

// stubMapCost is the median time of what the stub does on every call
// before answering, alone: a map of its device list by ID (n times).
func stubMapCost(devs []*pluginapi.Device, n int) time.Duration {
	samples := make([]time.Duration, n)
	for i := range n {
		t0 := time.Now()
		m := make(map[string]*pluginapi.Device)
		for _, d := range devs {
			m[d.ID] = d
		}
		samples[i] = time.Since(t0)
		if len(m) != len(devs) {
			return 0 // duplicate IDs: not the stub's usual work
		}
	}
	return report.Percentile(samples, 0.50)
}
