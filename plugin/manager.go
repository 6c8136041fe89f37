package plugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/carve-dev/carve/timeslice"
	"github.com/carve-dev/carve/xidhealth"
)

// AdvertisedDevice is a device as ListAndWatch reports it now.
type AdvertisedDevice struct {
	// ID is the device-plugin device ID.
	ID string
	// Healthy is false while a critical XID keeps the device unhealthy.
	Healthy bool
	// NUMANode is the NUMA node hint, or -1 when unknown.
	NUMANode int
}

// Manager runs carve's device-plugin servers, one per resource name. Its
// methods are safe for concurrent use.
type Manager struct {
	opts    Options
	log     *slog.Logger
	metrics *metrics
	topo    *topology

	mu      sync.Mutex
	servers map[string]*server // by resource name
	// withdrawn holds device IDs, device UUIDs and GPU UUIDs Withdraw took
	// out of ListAndWatch until the next Update.
	withdrawn timeslice.IDSet
	// health keeps the devices XIDs made unhealthy; nil without NVML.
	health *xidhealth.Tracker

	// token is random per Manager and part of every socket name, so that
	// no listener takes the path of an earlier Manager's (nextSocket).
	token string
	// socketsMu guards listeners.
	socketsMu sync.Mutex
	// listeners counts the listeners started per resource name, which
	// numbers their socket paths (nextSocket).
	listeners map[string]uint64

	// kick asks the reconcile loop of Run to check sockets and
	// registrations now.
	kick chan struct{}
	// watching is closed once Run watches the directory (for tests).
	watching     chan struct{}
	watchingOnce sync.Once
}

// New returns a Manager with no resources. Nothing listens until Update.
func New(opts Options) (*Manager, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	met, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	token, err := newSocketToken()
	if err != nil {
		return nil, err
	}
	m := &Manager{
		opts:      o,
		log:       o.Logger,
		metrics:   met,
		topo:      newTopology(o.NVML, o.Logger),
		servers:   map[string]*server{},
		withdrawn: timeslice.IDSet{},
		token:     token,
		listeners: map[string]uint64{},
		kick:      make(chan struct{}, 1),
		watching:  make(chan struct{}),
	}
	if o.NVML != nil {
		h, err := xidhealth.New(o.NVML, o.Health, xidhealth.Hooks{Changed: m.refresh, XID: m.countXID}, o.Logger)
		if err != nil {
			return nil, err
		}
		m.health = h
	}
	return m, nil
}

// Update makes the advertised resources equal to res. It diffs res against
// the resources of the last Update:
//   - a resource new in res gets a server on a socket of its own
//     (SocketPath) and is registered with the kubelet;
//   - a resource whose device list (IDs, health, NUMA hints) changed sends
//     the new list on every open ListAndWatch stream, without restarting
//     or re-registering;
//   - a resource whose device list did not change sends nothing;
//   - a resource missing from res (or with no devices) has its server
//     stopped and its socket removed.
//
// Update also ends all withdrawals: devices withdrawn earlier are
// advertised again if res still lists them.
//
// A server that cannot start is an error (the other resources are still
// updated). A registration that fails is an error too, but the server keeps
// serving and Run retries the registration.
func (m *Manager) Update(ctx context.Context, res timeslice.Resources) error {
	var errs []error
	sockets := map[string]string{}
	for name, devs := range res {
		if len(devs) == 0 {
			continue
		}
		sock := socketBase(name)
		if other, dup := sockets[sock]; dup {
			return fmt.Errorf("update: resources %q and %q map to the same socket %s", other, name, sock)
		}
		sockets[sock] = name
	}

	m.mu.Lock()
	// Stop vanished servers first: their sockets are gone before any new
	// server claims one.
	for name, s := range m.servers {
		if len(res[name]) == 0 {
			delete(m.servers, name)
			s.stop(true)
		}
	}
	clear(m.withdrawn)
	var fresh []*server
	for _, name := range res.Names() {
		devs := res[name]
		if len(devs) == 0 {
			continue
		}
		s := m.servers[name]
		if s == nil {
			s = newServer(m, name)
			if err := s.start(); err != nil {
				errs = append(errs, fmt.Errorf("resource %s: %w", name, err))
				continue
			}
			m.servers[name] = s
			fresh = append(fresh, s)
		}
		s.setDevices(devs)
	}
	m.refreshLocked()
	m.mu.Unlock()

	for _, s := range fresh {
		if err := m.register(ctx, s); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		m.poke()
	}
	return errors.Join(errs...)
}

// refreshLocked recomputes every server's list; m.mu is held.
func (m *Manager) refreshLocked() {
	for _, s := range m.servers {
		s.refresh(m.isWithdrawnLocked, m.isHealthyLocked)
	}
}

func (m *Manager) isWithdrawnLocked(d timeslice.Device) bool {
	return m.withdrawn.Matches(d)
}

func (m *Manager) isHealthyLocked(d timeslice.Device) bool {
	return m.health.Healthy(d.GPUUUID, d.UUID)
}

// refresh recomputes every server's list, after a change of health.
func (m *Manager) refresh() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refreshLocked()
}

// countXID counts an XID event in carve_device_plugin_xid_events_total.
func (m *Manager) countXID(ignored bool) {
	m.metrics.xids.WithLabelValues(strconv.FormatBool(!ignored)).Inc()
}

// GPUReset makes every device of the GPU with the given UUID healthy
// again: a GPU reset clears what XIDs, critical ones too, did to it. The
// agent calls it after its own reset of the GPU succeeded.
func (m *Manager) GPUReset(gpuUUID string) { m.health.GPUReset(gpuUUID) }

// Withdraw takes devices out of ListAndWatch before the agent destroys the
// GPU instances behind them. Each of ids may be a device ID, a physical
// device UUID (all its replicas) or a GPU UUID (every device on that GPU).
// IDs that no resource holds are ignored.
//
// Withdraw returns nil once it is confirmed that the kubelet has been told:
// for every resource holding one of the devices, every ListAndWatch stream
// that was open when Withdraw was called has had a list without the
// devices (or a later list) handed to gRPC — its Send returned without
// error — or has ended. A resource with no open stream is confirmed at
// once: a kubelet that connects later gets the reduced list first. It does
// not mean the kubelet has processed the list, nor that no pod holds the
// devices: pods admitted earlier keep them (see PodResourcesClient).
// Withdraw returns an error wrapping ctx.Err() when ctx ends first; the
// devices stay withdrawn either way, until the next Update.
func (m *Manager) Withdraw(ctx context.Context, ids []string) error {
	type wait struct {
		s       *server
		version uint64
		streams []*stream
	}
	var waits []wait
	m.mu.Lock()
	set := make(map[string]bool, len(ids))
	for _, id := range ids {
		set[id] = true
	}
	asked := func(d timeslice.Device) bool { return set[d.ID] || set[d.UUID] || set[d.GPUUUID] }
	for id := range set {
		m.withdrawn[id] = true
	}
	for _, name := range m.sortedNamesLocked() {
		s := m.servers[name]
		v, open := s.refresh(m.isWithdrawnLocked, m.isHealthyLocked)
		// Wait also where the devices were withdrawn before: an earlier
		// Withdraw may have given up before its lists were sent.
		if s.holds(asked) {
			waits = append(waits, wait{s, v, open})
		}
	}
	m.mu.Unlock()
	var errs []error
	for _, w := range waits {
		if err := w.s.waitDelivered(ctx, w.streams, w.version); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		what := fmt.Sprint(ids)
		if len(ids) > 8 {
			what = fmt.Sprintf("%d devices", len(ids))
		}
		return fmt.Errorf("withdraw %s: %w", what, errors.Join(errs...))
	}
	return nil
}

func (m *Manager) sortedNamesLocked() []string {
	names := make([]string, 0, len(m.servers))
	for name := range m.servers {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Advertised returns, per resource served, the devices ListAndWatch
// reports now (after withdrawals and health).
func (m *Manager) Advertised() map[string][]AdvertisedDevice {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string][]AdvertisedDevice, len(m.servers))
	for name, s := range m.servers {
		out[name] = s.listed()
	}
	return out
}

// Unhealthy returns the GPU and MIG device UUIDs an XID keeps unhealthy
// now, with the last such XID.
func (m *Manager) Unhealthy() map[string]uint64 { return m.health.Unhealthy() }

// Stop stops every server and removes their sockets. The Manager serves
// again after the next Update.
func (m *Manager) Stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, s := range m.servers {
		s.stop(true)
		delete(m.servers, name)
	}
}

// nextSocket returns the socket path for the next listener of a resource:
// one no listener had before, in this Manager (a counter) or an earlier
// one (the Manager's random token); see listenerSocketName for why.
func (m *Manager) nextSocket(resource string) string {
	m.socketsMu.Lock()
	defer m.socketsMu.Unlock()
	n := m.listeners[resource]
	m.listeners[resource] = n + 1
	return filepath.Join(m.opts.DevicePluginDir, listenerSocketName(resource, m.token, n))
}

// SocketPath returns the path of the socket a resource is served on now,
// or "" when the Manager does not serve it. The path changes whenever the
// server moves to a new listener: after its socket file was deleted, after
// the resource went and came back, and after a failed registration.
func (m *Manager) SocketPath(resource string) string {
	m.mu.Lock()
	s := m.servers[resource]
	m.mu.Unlock()
	if s == nil {
		return ""
	}
	return s.socketPath()
}

// removeStaleSockets removes carve's socket files in the device-plugin
// directory that are not this Manager's and that nothing answers on: those
// an earlier agent process left when it was killed. The kubelet removes
// them only when it starts. One a live process answers on is kept, with a
// warning.
func (m *Manager) removeStaleSockets() {
	paths, err := filepath.Glob(filepath.Join(m.opts.DevicePluginDir, "carve-*.sock"))
	if err != nil {
		return // only a malformed pattern fails, and this one is fixed
	}
	for _, p := range paths {
		if m.isServerSocket(p) {
			continue
		}
		live, err := m.removeIfStale(p)
		if err != nil {
			m.log.Error("remove stale device plugin socket", "socket", p, "err", err)
		}
		if live {
			m.log.Warn("another process serves a carve device plugin socket; is a second agent running on this node?", "socket", p)
		}
	}
}

// removeIfStale removes the socket file at path unless a process answers
// on it, which it reports as live.
func (m *Manager) removeIfStale(path string) (live bool, err error) {
	if answers(path, m.opts.Timeout) {
		return true, nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	m.log.Info("removed stale device plugin socket", "socket", path)
	return false, nil
}

// poke wakes the reconcile loop.
func (m *Manager) poke() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// Run watches the device-plugin directory and, when Options.NVML is set
// and health is not disabled, runs the XID health loop, until ctx ends; it
// then stops every server (Stop) and returns nil. It returns an error only
// when the directory cannot be watched.
//
// Kubelet restarts: when the kubelet socket is (re)created every server is
// registered again; when a server's own socket is deleted (the kubelet
// deletes them on start) the server is restarted on a fresh socket and
// registered again. Every RetryInterval failed registrations are retried
// and sockets checked, in case an event was missed.
func (m *Manager) Run(ctx context.Context) error {
	defer m.Stop()
	if err := os.MkdirAll(m.opts.DevicePluginDir, 0o750); err != nil {
		return fmt.Errorf("device plugin dir: %w", err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch device plugin dir %s: %w", m.opts.DevicePluginDir, err)
	}
	defer w.Close()
	if err := w.Add(m.opts.DevicePluginDir); err != nil {
		return fmt.Errorf("watch device plugin dir %s: %w", m.opts.DevicePluginDir, err)
	}
	m.watchingOnce.Do(func() { close(m.watching) })
	m.removeStaleSockets()
	// Catch up with whatever happened before the watch started.
	m.poke()
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Go(func() { m.reconcileLoop(ctx) })
	if m.health != nil {
		wg.Go(func() { m.health.Run(ctx) })
	}
	kubelet := filepath.Join(m.opts.DevicePluginDir, m.opts.KubeletSocket)
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			switch {
			case ev.Name == kubelet && ev.Has(fsnotify.Create):
				m.log.Info("kubelet socket created; registering again", "socket", kubelet)
				m.markUnregistered()
				m.poke()
			case ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename):
				if m.isServerSocket(ev.Name) {
					m.poke()
				}
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			m.log.Error("watch device plugin dir", "dir", m.opts.DevicePluginDir, "err", err)
			m.poke()
		}
	}
}

// markUnregistered makes the reconcile loop register every server again.
func (m *Manager) markUnregistered() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.servers {
		s.reregister()
	}
}

func (m *Manager) isServerSocket(path string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.servers {
		if s.socketPath() == path {
			return true
		}
	}
	return false
}

// reconcileLoop restarts servers whose socket is gone and registers those
// not registered, when poked and every RetryInterval.
func (m *Manager) reconcileLoop(ctx context.Context) {
	t := time.NewTicker(m.opts.RetryInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.kick:
		case <-t.C:
		}
		m.reconcile(ctx)
	}
}

func (m *Manager) reconcile(ctx context.Context) {
	m.mu.Lock()
	servers := make([]*server, 0, len(m.servers))
	for _, name := range m.sortedNamesLocked() {
		servers = append(servers, m.servers[name])
	}
	m.mu.Unlock()
	kubelet, err := os.Lstat(filepath.Join(m.opts.DevicePluginDir, m.opts.KubeletSocket))
	if err != nil {
		kubelet = nil // no kubelet now; its socket's creation pokes again
	}
	for _, s := range servers {
		if ctx.Err() != nil {
			return
		}
		if !s.socketIntact() {
			m.log.Info("device plugin socket gone; restarting server", "resource", s.resource, "socket", s.socketPath())
			if err := s.restart(); err != nil {
				m.log.Error("restart device plugin server", "resource", s.resource, "err", err)
				continue
			}
		}
		if kubelet != nil && s.needsRegistration(kubelet) {
			if err := m.register(ctx, s); err != nil {
				m.log.Error("register device plugin", "resource", s.resource, "err", err)
			}
		}
	}
}

// register registers a server with the kubelet. A server whose path is
// spent (an earlier registration on it may have reached the kubelet: one
// that succeeded, before the kubelet restarted or seemed to) moves to a new
// path first, and once more when this registration fails after spending
// the path it is on, so that a refusal or a timeout costs no retry
// interval.
func (m *Manager) register(ctx context.Context, s *server) error {
	if err := m.moveIfSpent(s); err != nil {
		return err
	}
	err := s.register(ctx)
	if err == nil || !s.isSpent() {
		return err
	}
	m.log.Warn("registration failed; moving the device plugin server to a new socket", "resource", s.resource, "err", err)
	if err := m.moveIfSpent(s); err != nil {
		return err
	}
	return s.register(ctx)
}

// moveIfSpent restarts a server on a new path when its path is spent.
func (m *Manager) moveIfSpent(s *server) error {
	if !s.isSpent() {
		return nil
	}
	old := s.socketPath()
	if err := s.restart(); err != nil {
		return err
	}
	m.log.Info("device plugin server moved to a new socket", "resource", s.resource, "old", old, "socket", s.socketPath())
	return nil
}
