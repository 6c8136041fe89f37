package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/carve-dev/carve/timeslice"
)

// advertised is one device as ListAndWatch reports it.
type advertised struct {
	id      string
	healthy bool
	numa    int // -1: unknown
}

// entry is a device of the resource with what ListAndWatch needs of it.
type entry struct {
	dev  timeslice.Device
	numa int
}

// stream is one open ListAndWatch stream.
type stream struct {
	// notify wakes the stream's sender; buffered so a wake-up is never lost.
	notify chan struct{}
	// sent is the version of the last list Send returned for (under
	// server.mu).
	sent uint64
}

// server is the device-plugin server of one resource.
type server struct {
	pluginapi.UnimplementedDevicePluginServer

	m        *Manager
	resource string

	// regMu serialises registrations of this server.
	regMu sync.Mutex
	// lifeMu serialises starting, restarting and stopping the listener.
	lifeMu sync.Mutex

	mu sync.Mutex
	// entries are all devices Update gave, in order.
	entries []entry
	// adv is what ListAndWatch advertises now, resp the same as a message.
	adv  []advertised
	resp *pluginapi.ListAndWatchResponse
	// known maps the advertised IDs to their devices; replaced, never
	// mutated, so readers may keep it after unlocking.
	known map[string]timeslice.Device
	// shared is true when some device of the resource is a replica.
	shared bool
	// version counts changes of adv; streams send until they reach it.
	version uint64
	streams map[*stream]struct{}
	// progress is closed and replaced whenever a stream sends or ends.
	progress chan struct{}
	// socket is the path of the current (or last) listener's socket; it
	// changes only in startLocked, with lifeMu held too.
	socket string
	// grpc and sockInfo belong to the listener now serving; nil when
	// stopped.
	grpc     *grpc.Server
	sockInfo os.FileInfo
	// registered says the kubelet accepted the last registration of the
	// current listener.
	registered bool
	// regGen counts requests to register again; a registration that
	// started before the latest one does not count.
	regGen uint64
	// regKubelet is the kubelet socket file the last registration went to.
	regKubelet os.FileInfo
	// spent says a registration of the current listener's path was sent
	// and may have reached the kubelet (it succeeded, was refused, timed
	// out): the path is never sent again, the server moves to a new one
	// first (Manager.register), since a second registration on a path the
	// kubelet holds an endpoint at leaves that endpoint stuck.
	spent   bool
	stopped bool
}

func newServer(m *Manager, resource string) *server {
	return &server{
		m:        m,
		resource: resource,
		streams:  map[*stream]struct{}{},
		progress: make(chan struct{}),
		known:    map[string]timeslice.Device{},
	}
}

// setDevices replaces the devices of the resource; refresh must follow.
func (s *server) setDevices(devs []timeslice.Device) {
	entries := make([]entry, len(devs))
	shared := false
	for i, d := range devs {
		numa := -1
		if f := s.m.opts.NUMANode; f != nil {
			if n, ok := f(d.GPU); ok && n >= 0 {
				numa = n
			}
		}
		entries[i] = entry{dev: d, numa: numa}
		if d.Replica >= 0 {
			shared = true
		}
	}
	s.mu.Lock()
	s.entries, s.shared = entries, shared
	s.mu.Unlock()
}

// refresh recomputes what the resource advertises with the manager's
// withdrawals and health (the caller holds m.mu) and, if it changed, bumps
// the version and wakes every stream. It returns the version now current
// and the streams open.
func (s *server) refresh(withdrawn func(timeslice.Device) bool, healthy func(timeslice.Device) bool) (version uint64, open []*stream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	adv := make([]advertised, 0, len(s.entries))
	known := make(map[string]timeslice.Device, len(s.entries))
	for _, e := range s.entries {
		if withdrawn(e.dev) {
			continue
		}
		adv = append(adv, advertised{id: e.dev.ID, healthy: healthy(e.dev), numa: e.numa})
		known[e.dev.ID] = e.dev
	}
	s.known = known
	if s.resp == nil || !slices.Equal(adv, s.adv) {
		s.adv, s.resp = adv, listResponse(adv)
		s.version++
		for st := range s.streams {
			select {
			case st.notify <- struct{}{}:
			default:
			}
		}
	}
	for st := range s.streams {
		open = append(open, st)
	}
	return s.version, open
}

func listResponse(adv []advertised) *pluginapi.ListAndWatchResponse {
	resp := &pluginapi.ListAndWatchResponse{Devices: make([]*pluginapi.Device, len(adv))}
	for i, a := range adv {
		d := &pluginapi.Device{ID: a.id, Health: pluginapi.Healthy}
		if !a.healthy {
			d.Health = pluginapi.Unhealthy
		}
		if a.numa >= 0 {
			d.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(a.numa)}}}
		}
		resp.Devices[i] = d
	}
	return resp
}

// claimSocket makes path free for a listener: a socket another live
// process answers on is an error; a stale file is removed.
func (s *server) claimSocket(path string) error {
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("socket %s: %w", path, err)
	}
	live, err := s.m.removeIfStale(path)
	if live {
		return fmt.Errorf("socket %s is served by another live process; refusing to replace it", path)
	}
	return err
}

// start listens on the socket and serves the device-plugin API.
func (s *server) start() error {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	return s.startLocked()
}

// startLocked is start with lifeMu held; no earlier listener may serve.
// Every listener gets a socket path of its own (Manager.nextSocket).
func (s *server) startLocked() error {
	path := s.m.nextSocket(s.resource)
	if err := s.claimSocket(path); err != nil {
		return err
	}
	// Mode SocketMode from the start; removed by stop, and only while it
	// is still ours.
	ln, err := listenSocket(path)
	if err != nil {
		return err
	}
	info, err := os.Stat(path)
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("stat %s: %w", path, err)
	}
	g := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(g, s)
	s.mu.Lock()
	s.socket, s.grpc, s.sockInfo, s.registered, s.spent, s.stopped = path, g, info, false, false, false
	s.mu.Unlock()
	go func() {
		if err := g.Serve(ln); err != nil {
			s.m.log.Error("device plugin server ended", "resource", s.resource, "socket", path, "err", err)
		}
	}()
	s.m.log.Info("device plugin server started", "resource", s.resource, "socket", path)
	return nil
}

// stop stops serving, ending every stream, and removes the socket file if
// it is still the one this server created. final marks the server dead.
func (s *server) stop(final bool) {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	s.stopLocked(final)
}

func (s *server) stopLocked(final bool) {
	s.mu.Lock()
	g, info, path := s.grpc, s.sockInfo, s.socket
	s.grpc, s.sockInfo, s.registered = nil, nil, false
	if final {
		s.stopped = true
	}
	s.mu.Unlock()
	if g == nil {
		return
	}
	g.Stop()
	if cur, err := os.Lstat(path); err == nil && sameFile(cur, info) {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.m.log.Error("remove device plugin socket", "socket", path, "err", err)
		}
	}
	s.m.log.Info("device plugin server stopped", "resource", s.resource, "socket", path)
}

// socketIntact reports whether the server is serving and its socket file
// is still the one it listens on.
func (s *server) socketIntact() bool {
	s.mu.Lock()
	info, stopped, path := s.sockInfo, s.stopped, s.socket
	s.mu.Unlock()
	if stopped {
		return true // nothing to restore
	}
	if info == nil {
		return false
	}
	cur, err := os.Lstat(path)
	return err == nil && sameFile(cur, info)
}

// sameFile reports whether two stats are of the same file. Inode numbers
// are reused at once after a delete, so a socket deleted and created again
// is told apart by its modification time too.
func sameFile(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.ModTime().Equal(b.ModTime())
}

// socketPath returns the path of the current (or last) listener's socket.
func (s *server) socketPath() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.socket
}

// restart replaces the listener, on a new socket path, after the socket
// file went away or the kubelet refused the endpoint.
func (s *server) restart() error {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	s.mu.Lock()
	stopped := s.stopped
	s.mu.Unlock()
	if stopped {
		return nil
	}
	s.stopLocked(false)
	if err := s.startLocked(); err != nil {
		return fmt.Errorf("restart device plugin server for %s: %w", s.resource, err)
	}
	return nil
}

// reregister makes the next reconcile register the server again.
func (s *server) reregister() {
	s.mu.Lock()
	s.registered = false
	s.regGen++
	s.mu.Unlock()
}

// needsRegistration reports whether the current listener is to be
// registered with the kubelet whose socket file is kubelet: it was never
// registered, or registered with an earlier kubelet socket.
func (s *server) needsRegistration(kubelet os.FileInfo) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped || s.grpc == nil {
		return false
	}
	if s.registered && s.regKubelet != nil && kubelet != nil && !sameFile(s.regKubelet, kubelet) {
		s.registered = false
		s.regGen++
	}
	return !s.registered
}

// holds reports whether some device of the resource matches.
func (s *server) holds(match func(timeslice.Device) bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.entries {
		if match(e.dev) {
			return true
		}
	}
	return false
}

// register registers the server with the kubelet, unless the current
// listener is registered already or its path is spent. A registration that
// cannot have reached the kubelet (unreached: a kubelet that just created
// its socket may not accept yet) is retried a few times within the
// timeout; any other failure marks the path spent and is returned.
func (s *server) register(ctx context.Context) error {
	s.regMu.Lock()
	defer s.regMu.Unlock()
	s.mu.Lock()
	g, gen, done, spent, stopped, path := s.grpc, s.regGen, s.registered, s.spent, s.stopped, s.socket
	s.mu.Unlock()
	if stopped || done {
		return nil // stopped for good meanwhile, or registered by a concurrent call
	}
	kubelet := filepath.Join(s.m.opts.DevicePluginDir, s.m.opts.KubeletSocket)
	if g == nil {
		// Between two listeners (a concurrent restart), or the last
		// restart failed: nothing to register now, and not registered.
		return fmt.Errorf("register %s with kubelet %s: %w", s.resource, kubelet, errNoListener)
	}
	req := &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     filepath.Base(path),
		ResourceName: s.resource,
		Options:      &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true},
	}
	if spent {
		return fmt.Errorf("register %s (socket %s) with kubelet %s: %w", s.resource, req.Endpoint, kubelet, errSpent)
	}
	info, err := registerRetrying(ctx, kubelet, req, s.m.opts.Timeout)
	if err != nil {
		if !unreached(err) {
			s.mu.Lock()
			if s.grpc == g {
				s.spent = true
			}
			s.mu.Unlock()
		}
		return fmt.Errorf("register %s (socket %s) with kubelet %s: %w", s.resource, req.Endpoint, kubelet, err)
	}
	s.mu.Lock()
	if s.grpc == g {
		// Registered: the path is never sent again either. A request to
		// register again (a kubelet.sock created, maybe seen only after
		// this registration went to that very kubelet) moves the server.
		s.spent = true
		if s.regGen == gen {
			s.registered, s.regKubelet = true, info
		}
	}
	s.mu.Unlock()
	s.m.log.Info("registered with kubelet", "resource", s.resource, "endpoint", req.Endpoint)
	return nil
}

// errNoListener marks a registration of a server that has no listener at
// the moment.
var errNoListener = errors.New("the server has no listener now (restarting)")

// errNotSent marks a registration the context ended before.
var errNotSent = errors.New("registration not sent")

// errSpent marks a registration not sent because an earlier one on the
// same path may have reached the kubelet.
var errSpent = errors.New("an earlier registration on this socket may have reached the kubelet; not sending another")

// isSpent reports whether the current listener's path is spent.
func (s *server) isSpent() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.spent && s.grpc != nil
}

// registerRetrying sends req until the kubelet accepts it, a failure other
// than an unreached one comes, five tries were made or timeout passes. A
// context that ends before a try means that try is not sent, so the error
// then is unreached.
func registerRetrying(ctx context.Context, kubelet string, req *pluginapi.RegisterRequest, timeout time.Duration) (os.FileInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", errNotSent, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		info, err := registerOnce(ctx, kubelet, req)
		if err == nil || !unreached(err) || attempt >= 4 {
			return info, err
		}
		select {
		case <-ctx.Done():
			return nil, err // the last try's error: nothing reached the kubelet
		case <-time.After(time.Duration(20<<attempt) * time.Millisecond):
		}
	}
}

// registerOnce sends one registration; it returns the kubelet socket file
// it went to.
func registerOnce(ctx context.Context, kubelet string, req *pluginapi.RegisterRequest) (os.FileInfo, error) {
	info, err := os.Lstat(kubelet)
	if err != nil {
		return nil, fmt.Errorf("kubelet socket: %w", err)
	}
	conn, err := grpc.NewClient("unix://"+kubelet, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	defer conn.Close()
	if _, err := pluginapi.NewRegistrationClient(conn).Register(ctx, req); err != nil {
		return nil, err
	}
	return info, nil
}

// addStream and removeStream track open ListAndWatch streams.
func (s *server) addStream() *stream {
	st := &stream{notify: make(chan struct{}, 1)}
	s.mu.Lock()
	s.streams[st] = struct{}{}
	s.mu.Unlock()
	return st
}

func (s *server) removeStream(st *stream) {
	s.mu.Lock()
	delete(s.streams, st)
	s.wakeWaitersLocked()
	s.mu.Unlock()
}

func (s *server) wakeWaitersLocked() {
	close(s.progress)
	s.progress = make(chan struct{})
}

// next returns the list a stream still has to send, if any.
func (s *server) next(st *stream) (*pluginapi.ListAndWatchResponse, uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.version > st.sent {
		return s.resp, s.version, true
	}
	return nil, 0, false
}

func (s *server) markSent(st *stream, version uint64) {
	s.mu.Lock()
	st.sent = version
	s.wakeWaitersLocked()
	s.mu.Unlock()
}

// waitDelivered waits until each of the streams has sent a list of at least
// version, or has ended.
func (s *server) waitDelivered(ctx context.Context, streams []*stream, version uint64) error {
	for {
		s.mu.Lock()
		pending := 0
		for _, st := range streams {
			if _, open := s.streams[st]; open && st.sent < version {
				pending++
			}
		}
		progress := s.progress
		s.mu.Unlock()
		if pending == 0 {
			return nil
		}
		select {
		case <-progress:
		case <-ctx.Done():
			return fmt.Errorf("resource %s: %d ListAndWatch stream(s) not yet sent the list: %w", s.resource, pending, ctx.Err())
		}
	}
}

// GetDevicePluginOptions tells the kubelet that GetPreferredAllocation is
// available and PreStartContainer is not needed.
func (s *server) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, nil
}

// ListAndWatch sends the resource's device list now and again after every
// change, until the kubelet goes away or the server stops.
func (s *server) ListAndWatch(_ *pluginapi.Empty, ss pluginapi.DevicePlugin_ListAndWatchServer) error {
	st := s.addStream()
	defer s.removeStream(st)
	for {
		if resp, v, ok := s.next(st); ok {
			if err := ss.Send(resp); err != nil {
				return fmt.Errorf("ListAndWatch %s: send: %w", s.resource, err)
			}
			s.markSent(st, v)
			continue
		}
		select {
		case <-st.notify:
		case <-ss.Context().Done():
			return nil
		}
	}
}

// PreStartContainer is not required; it does nothing.
func (s *server) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// snapshot returns the advertised devices and whether the resource is
// shared.
func (s *server) snapshot() (map[string]timeslice.Device, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.known, s.shared
}

// listed returns a copy of what ListAndWatch advertises now.
func (s *server) listed() []AdvertisedDevice {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]AdvertisedDevice, len(s.adv))
	for i, a := range s.adv {
		out[i] = AdvertisedDevice{ID: a.id, Healthy: a.healthy, NUMANode: a.numa}
	}
	return out
}
