package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/timeslice"
)

// shortTempDir returns a temp dir with a path short enough for unix
// sockets (t.TempDir paths can pass the 108-byte limit).
func shortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cv") //nolint:usetesting // t.TempDir's path is too long, as said above
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// stubKubelet is a Registration server on <dir>/kubelet.sock that, like the
// kubelet, dials back every plugin that registers, asks for its options and
// opens ListAndWatch, recording every message.
type stubKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	t      testing.TB
	dir    string
	sock   string
	srv    *grpc.Server
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	regs    []*pluginapi.RegisterRequest
	plugins map[string]*stubPlugin
	conns   []*grpc.ClientConn
	// attempts counts the Register calls per endpoint, failed ones too.
	attempts map[string]int
	// reject makes Register fail.
	reject bool
	// held are endpoints whose registrations are refused as the kubelet
	// refuses a path it still holds an endpoint at.
	held map[string]bool
	// slow is how many of the next registrations the stub completes (dials
	// back, opens ListAndWatch) but answers only after slowBy, as a
	// kubelet under load answers after the plugin's timeout.
	slow   int
	slowBy time.Duration
}

// stubPlugin is the kubelet's side of one registered plugin.
type stubPlugin struct {
	resource string
	endpoint string
	opts     *pluginapi.DevicePluginOptions
	client   pluginapi.DevicePluginClient
	msgs     chan *pluginapi.ListAndWatchResponse
	done     chan struct{}
}

func startStubKubelet(t testing.TB, dir string) *stubKubelet {
	t.Helper()
	sock := filepath.Join(dir, DefaultKubeletSocket)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatalf("stub kubelet: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	k := &stubKubelet{t: t, dir: dir, sock: sock, srv: grpc.NewServer(), ctx: ctx, cancel: cancel,
		plugins: map[string]*stubPlugin{}, attempts: map[string]int{}}
	pluginapi.RegisterRegistrationServer(k.srv, k)
	go func() { _ = k.srv.Serve(ln) }() // returns when stop closes ln
	t.Cleanup(k.stop)
	t.Cleanup(k.checkPathsOnce)
	return k
}

// checkPathsOnce fails the test if a Register call came twice for one
// endpoint: the real kubelet 1.37 can then keep a dead endpoint for good
// (listenerSocketName), so no test may pass while doing it.
func (k *stubKubelet) checkPathsOnce() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for endpoint, n := range k.attempts {
		if n > 1 {
			k.t.Errorf("stub kubelet: %d registrations on endpoint %s; a path is registered once", n, endpoint)
		}
	}
}

// stop stops the stub; its socket file goes away.
func (k *stubKubelet) stop() {
	k.srv.Stop()
	k.cancel()
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, c := range k.conns {
		c.Close()
	}
	k.conns = nil
}

func (k *stubKubelet) Register(ctx context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.mu.Lock()
	k.attempts[req.Endpoint]++
	reject, held := k.reject, k.held[req.Endpoint]
	slow := k.slow > 0
	if slow {
		k.slow--
	}
	k.mu.Unlock()
	if reject {
		return nil, errors.New("stub kubelet rejects registrations")
	}
	if held {
		return nil, fmt.Errorf("device plugin already connected: %s", filepath.Join(k.dir, req.Endpoint))
	}
	if req.Version != pluginapi.Version {
		return nil, fmt.Errorf("unsupported version %q", req.Version)
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(k.dir, req.Endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	client := pluginapi.NewDevicePluginClient(conn)
	opts, err := client.GetDevicePluginOptions(ctx, &pluginapi.Empty{})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("dial back %s: %w", req.Endpoint, err)
	}
	stream, err := client.ListAndWatch(k.ctx, &pluginapi.Empty{})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("ListAndWatch %s: %w", req.Endpoint, err)
	}
	p := &stubPlugin{resource: req.ResourceName, endpoint: req.Endpoint, opts: opts, client: client,
		msgs: make(chan *pluginapi.ListAndWatchResponse, 4096), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			p.msgs <- m
		}
	}()
	k.mu.Lock()
	k.regs = append(k.regs, req)
	k.plugins[req.ResourceName] = p
	k.conns = append(k.conns, conn)
	slowBy := k.slowBy
	k.mu.Unlock()
	if slow {
		select {
		case <-time.After(slowBy):
		case <-k.ctx.Done():
		}
	}
	return &pluginapi.Empty{}, nil
}

// registrations returns how many Register calls succeeded per resource.
func (k *stubKubelet) registrations() map[string]int {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[string]int{}
	for _, r := range k.regs {
		out[r.ResourceName]++
	}
	return out
}

func (k *stubKubelet) requests() []*pluginapi.RegisterRequest {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]*pluginapi.RegisterRequest(nil), k.regs...)
}

// plugin waits up to timeout for a registration of resource.
func (k *stubKubelet) plugin(t testing.TB, resource string, timeout time.Duration) *stubPlugin {
	t.Helper()
	var p *stubPlugin
	eventually(t, timeout, "registration of "+resource, func() bool {
		k.mu.Lock()
		defer k.mu.Unlock()
		p = k.plugins[resource]
		return p != nil
	})
	return p
}

// next returns the next ListAndWatch message, failing after timeout.
func (p *stubPlugin) next(t testing.TB, timeout time.Duration) *pluginapi.ListAndWatchResponse {
	t.Helper()
	select {
	case m := <-p.msgs:
		return m
	case <-time.After(timeout):
		t.Fatalf("%s: no ListAndWatch message within %v", p.resource, timeout)
		return nil
	}
}

// flush waits until every open ListAndWatch stream of each resource has
// sent the resource's current list (its Send returned), so that a message
// an earlier change caused is on its way ahead of any message a later
// change causes. "No message" checks use it before a sentinel change: the
// next message must then be the sentinel's list, and any other message
// would have come first (a sleep could only show that none came in time).
func (e *env) flush(t testing.TB, resources ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), msgWait)
	defer cancel()
	for _, name := range resources {
		e.m.mu.Lock()
		s := e.m.servers[name]
		e.m.mu.Unlock()
		if s == nil {
			t.Fatalf("flush %s: no server", name)
		}
		s.mu.Lock()
		version := s.version
		open := slices.Collect(maps.Keys(s.streams))
		s.mu.Unlock()
		if len(open) == 0 {
			t.Fatalf("flush %s: no open ListAndWatch stream", name)
		}
		if err := s.waitDelivered(ctx, open, version); err != nil {
			t.Fatalf("flush %s: %v", name, err)
		}
	}
}

// sentinelDevice is a whole GPU no fixture has: adding it to a resource is
// a change whose list is known.
var sentinelDevice = wholeGPUs(99)[0]

// withSentinel returns a copy of res with sentinelDevice added to each of
// the resources names.
func withSentinel(res timeslice.Resources, names ...string) timeslice.Resources {
	out := maps.Clone(res)
	for _, name := range names {
		out[name] = append(slices.Clone(res[name]), sentinelDevice)
	}
	return out
}

// deviceIDs returns the sorted IDs of devs.
func deviceIDs(devs []timeslice.Device) []string {
	ids := make([]string, 0, len(devs))
	for _, d := range devs {
		ids = append(ids, d.ID)
	}
	slices.Sort(ids)
	return ids
}

// eventually polls cond every 5ms until it holds or timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// summary maps device ID to health (with "@<numa>" when a hint is set).
func summary(m *pluginapi.ListAndWatchResponse) map[string]string {
	out := map[string]string{}
	for _, d := range m.GetDevices() {
		h := d.Health
		if d.Topology != nil && len(d.Topology.Nodes) > 0 {
			h += fmt.Sprintf("@%d", d.Topology.Nodes[0].ID)
		}
		out[d.ID] = h
	}
	return out
}

func idsOf(m *pluginapi.ListAndWatchResponse) []string {
	var ids []string
	for _, d := range m.GetDevices() {
		ids = append(ids, d.ID)
	}
	sort.Strings(ids)
	return ids
}

// Fixtures: GPU i has UUID "GPU-<i>"; MIG devices are "MIG-<i>-<gi>".

func gpuUUID(i int) string { return fmt.Sprintf("GPU-%d", i) }

// wholeGPUs returns unshared whole GPUs.
func wholeGPUs(idx ...int) []timeslice.Device {
	var out []timeslice.Device
	for _, i := range idx {
		u := gpuUUID(i)
		out = append(out, timeslice.Device{ID: u, UUID: u, GPU: i, GPUUUID: u, Replica: -1, Replicas: 1, MemoryMiB: 81920})
	}
	return out
}

// sharedGPUs returns n replicas of each GPU.
func sharedGPUs(n int, idx ...int) []timeslice.Device {
	var out []timeslice.Device
	for _, i := range idx {
		u := gpuUUID(i)
		for r := range n {
			out = append(out, timeslice.Device{ID: timeslice.ReplicaID(u, r), UUID: u, GPU: i, GPUUUID: u, Replica: r, Replicas: n, MemoryMiB: 81920})
		}
	}
	return out
}

func migUUID(gpu, gi int) string { return fmt.Sprintf("MIG-%d-%d", gpu, gi) }

// migDevs returns MIG devices (GI ids gis) on a GPU, with n replicas each
// when n > 1.
func migDevs(gpu int, profile string, n int, gis ...int) []timeslice.Device {
	var out []timeslice.Device
	for _, gi := range gis {
		u := migUUID(gpu, gi)
		d := timeslice.Device{ID: u, UUID: u, GPU: gpu, GPUUUID: gpuUUID(gpu), Replica: -1, Replicas: max(n, 1), MIGProfile: profile, MemoryMiB: 10240}
		if n <= 1 {
			out = append(out, d)
			continue
		}
		for r := range n {
			d.ID, d.Replica = timeslice.ReplicaID(u, r), r
			out = append(out, d)
		}
	}
	return out
}

// env is a Manager with a stub kubelet in a temp device-plugin dir.
type env struct {
	dir     string
	kubelet *stubKubelet
	m       *Manager
	cancel  context.CancelFunc
	runDone chan error
}

// newEnv starts a stub kubelet and a Manager; with run, Manager.Run too
// (waiting until it watches the directory).
func newEnv(t testing.TB, opts Options, run bool) *env {
	t.Helper()
	dir := shortTempDir(t)
	e := &env{dir: dir, kubelet: startStubKubelet(t, dir)}
	opts.DevicePluginDir = dir
	if opts.Logger == nil {
		opts.Logger = discardLogger()
	}
	if opts.Timeout == 0 {
		opts.Timeout = 2 * time.Second
	}
	m, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e.m = m
	if !run {
		t.Cleanup(m.Stop)
		return e
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel, e.runDone = cancel, make(chan error, 1)
	go func() { e.runDone <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-e.runDone:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Run did not return after cancel")
		}
	})
	select {
	case <-m.watching:
	case err := <-e.runDone:
		t.Fatalf("Run ended early: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not start watching")
	}
	return e
}

func (e *env) update(t testing.TB, res timeslice.Resources) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.m.Update(ctx, res); err != nil {
		t.Fatalf("Update: %v", err)
	}
}

// socket returns the socket path of a resource's current listener, or,
// when the resource has no server, the path of its last listener (of its
// first, when it never had one).
func (e *env) socket(resource string) string {
	if p := e.m.SocketPath(resource); p != "" {
		return p
	}
	e.m.socketsMu.Lock()
	n := max(e.m.listeners[resource], 1) - 1
	e.m.socketsMu.Unlock()
	return filepath.Join(e.dir, listenerSocketName(resource, e.m.token, n))
}

// listener returns the socket name of a resource's n-th listener (from 0)
// in the env's Manager.
func (e *env) listener(resource string, n uint64) string {
	return listenerSocketName(resource, e.m.token, n)
}

// dialPlugin connects to a plugin's socket as the kubelet would.
func dialPlugin(t testing.TB, path string) pluginapi.DevicePluginClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pluginapi.NewDevicePluginClient(conn)
}

// fakeNVML implements the NVML methods the plugin uses: topology, XID
// events, and enough of Device to resolve MIG devices.
type fakeNVML struct {
	mu         sync.Mutex
	uuids      []string
	links      map[[2]int]partition.Link
	cis        map[string]map[int][]partition.ComputeInstance // GPU UUID -> GI -> CIs
	events     chan partition.XIDEvent
	failWatch  int // WatchXIDs calls that fail before one succeeds
	failWait   int // event sets whose first Wait fails
	watchCalls int
	closed     int
}

func newFakeNVML(gpus int) *fakeNVML {
	f := &fakeNVML{links: map[[2]int]partition.Link{}, cis: map[string]map[int][]partition.ComputeInstance{}, events: make(chan partition.XIDEvent, 16)}
	for i := range gpus {
		f.uuids = append(f.uuids, gpuUUID(i))
	}
	return f
}

func (f *fakeNVML) link(a, b int, l partition.Link) {
	if a > b {
		a, b = b, a
	}
	f.links[[2]int{a, b}] = l
}

func (f *fakeNVML) addMIG(gpu, gi int) {
	u := gpuUUID(gpu)
	if f.cis[u] == nil {
		f.cis[u] = map[int][]partition.ComputeInstance{}
	}
	f.cis[u][gi] = append(f.cis[u][gi], partition.ComputeInstance{ID: 0, GIID: gi, ComputeSlices: 1, UUID: migUUID(gpu, gi)})
}

func (f *fakeNVML) Init() error               { return nil }
func (f *fakeNVML) Shutdown() error           { return nil }
func (f *fakeNVML) DeviceCount() (int, error) { return len(f.uuids), nil }
func (f *fakeNVML) Device(i int) (partition.Device, error) {
	if i < 0 || i >= len(f.uuids) {
		return nil, fmt.Errorf("GPU %d: %w", i, partition.ErrInvalidArgument)
	}
	return fakeDevice{f: f, i: i}, nil
}

func (f *fakeNVML) Topology(a, b int) (partition.Link, error) {
	if a > b {
		a, b = b, a
	}
	if l, ok := f.links[[2]int{a, b}]; ok {
		return l, nil
	}
	return partition.Link{PCIe: 50}, nil
}

func (f *fakeNVML) WatchXIDs([]int) (partition.EventSet, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.watchCalls++
	if f.failWatch > 0 {
		f.failWatch--
		return nil, errors.New("fake NVML: event set creation failed")
	}
	fail := f.failWait > 0
	if fail {
		f.failWait--
	}
	return &fakeEvents{f: f, fail: fail}, nil
}

func (f *fakeNVML) calls() (watch, closed int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.watchCalls, f.closed
}

type fakeEvents struct {
	f    *fakeNVML
	fail bool
}

func (e *fakeEvents) Wait(timeout time.Duration) (partition.XIDEvent, error) {
	if e.fail {
		e.fail = false
		return partition.XIDEvent{}, errors.New("fake NVML: wait failed")
	}
	select {
	case ev := <-e.f.events:
		return ev, nil
	case <-time.After(timeout):
		return partition.XIDEvent{}, fmt.Errorf("fake wait: %w", partition.ErrTimeout)
	}
}

func (e *fakeEvents) Close() error {
	e.f.mu.Lock()
	e.f.closed++
	e.f.mu.Unlock()
	return nil
}

// fakeDevice implements Index, UUID and ComputeInstances; the embedded nil
// interface panics on anything else, which the plugin must not call.
type fakeDevice struct {
	partition.Device
	f *fakeNVML
	i int
}

func (d fakeDevice) Index() int            { return d.i }
func (d fakeDevice) UUID() (string, error) { return d.f.uuids[d.i], nil }
func (d fakeDevice) ComputeInstances(gi int) ([]partition.ComputeInstance, error) {
	cis, ok := d.f.cis[d.f.uuids[d.i]][gi]
	if !ok {
		return nil, fmt.Errorf("GI %d: %w", gi, partition.ErrNotFound)
	}
	return cis, nil
}

// liveSocket serves a unix socket at path, as another live process would,
// accepting and closing connections until the test ends.
func liveSocket(t *testing.T, path string) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}

// staleSocket leaves a socket file at path that nothing listens on, as a
// killed process does.
func staleSocket(t *testing.T, path string) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
}
