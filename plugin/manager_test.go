package plugin

import (
	"context"
	"errors"
	"maps"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/timeslice"
)

const (
	migRes    = "nvidia.com/mig-1g.10gb"
	sharedRes = "nvidia.com/gpu.shared"
	msgWait   = 5 * time.Second
)

func TestSocketBase(t *testing.T) {
	tests := []struct{ resource, want string }{
		{"nvidia.com/gpu", "carve-nvidia.com_gpu"},
		{"nvidia.com/gpu.shared", "carve-nvidia.com_gpu.shared"},
		{"nvidia.com/mig-1g.10gb", "carve-nvidia.com_mig-1g.10gb"},
		{"nvidia.com/mig-1g.10gb.me", "carve-nvidia.com_mig-1g.10gb.me"},
		{"odd name/x+y", "carve-odd_name_x_y"},
	}
	for _, tt := range tests {
		if got := socketBase(tt.resource); got != tt.want {
			t.Errorf("socketBase(%q) = %q, want %q", tt.resource, got, tt.want)
		}
	}
}

func TestRegistersEachResource(t *testing.T) {
	e := newEnv(t, Options{}, false)
	res := timeslice.Resources{
		carvev1.GPUResource: wholeGPUs(0, 1),
		sharedRes:           sharedGPUs(2, 2),
		migRes:              migDevs(3, "1g.10gb", 1, 7, 8),
	}
	e.update(t, res)
	reqs := e.kubelet.requests()
	if len(reqs) != len(res) {
		t.Fatalf("got %d registrations, want %d", len(reqs), len(res))
	}
	for _, r := range reqs {
		if r.Version != pluginapi.Version {
			t.Errorf("%s: version %q", r.ResourceName, r.Version)
		}
		if want := e.listener(r.ResourceName, 0); r.Endpoint != want {
			t.Errorf("%s: endpoint %q, want %q", r.ResourceName, r.Endpoint, want)
		}
		if !r.GetOptions().GetGetPreferredAllocationAvailable() {
			t.Errorf("%s: registered without GetPreferredAllocationAvailable", r.ResourceName)
		}
	}
	for name, devs := range res {
		p := e.kubelet.plugin(t, name, msgWait)
		if !p.opts.GetGetPreferredAllocationAvailable() {
			t.Errorf("%s: GetDevicePluginOptions without GetPreferredAllocationAvailable", name)
		}
		got := idsOf(p.next(t, msgWait))
		var want []string
		for _, d := range devs {
			want = append(want, d.ID)
		}
		sort.Strings(want)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: first list %v, want %v", name, got, want)
		}
		if _, err := os.Stat(e.socket(name)); err != nil {
			t.Errorf("%s: socket: %v", name, err)
		}
	}
}

func TestUpdateSendsOnlyChanges(t *testing.T) {
	e := newEnv(t, Options{}, false)
	base := timeslice.Resources{
		carvev1.GPUResource: wholeGPUs(0, 1),
		migRes:              migDevs(2, "1g.10gb", 1, 7, 8),
	}
	e.update(t, base)
	plugins := map[string]*stubPlugin{}
	for name := range base {
		plugins[name] = e.kubelet.plugin(t, name, msgWait)
		plugins[name].next(t, msgWait)
	}
	steps := []struct {
		name    string
		res     timeslice.Resources
		changed map[string][]string // resource -> IDs of the expected message
	}{
		{"same devices", base, nil},
		{"same devices, new slices", timeslice.Resources{
			carvev1.GPUResource: wholeGPUs(0, 1),
			migRes:              migDevs(2, "1g.10gb", 1, 7, 8),
		}, nil},
		{"GPU added", timeslice.Resources{
			carvev1.GPUResource: wholeGPUs(0, 1, 3),
			migRes:              migDevs(2, "1g.10gb", 1, 7, 8),
		}, map[string][]string{carvev1.GPUResource: {"GPU-0", "GPU-1", "GPU-3"}}},
		{"MIG device replaced", timeslice.Resources{
			carvev1.GPUResource: wholeGPUs(0, 1, 3),
			migRes:              migDevs(2, "1g.10gb", 1, 7, 9),
		}, map[string][]string{migRes: {"MIG-2-7", "MIG-2-9"}}},
		{"both change", timeslice.Resources{
			carvev1.GPUResource: wholeGPUs(0),
			migRes:              migDevs(2, "1g.10gb", 1, 9),
		}, map[string][]string{carvev1.GPUResource: {"GPU-0"}, migRes: {"MIG-2-9"}}},
	}
	names := slices.Sorted(maps.Keys(plugins))
	for _, st := range steps {
		e.update(t, st.res)
		for name, want := range st.changed {
			if diff := cmp.Diff(want, idsOf(plugins[name].next(t, msgWait))); diff != "" {
				t.Errorf("%s: %s: list (-want +got):\n%s", st.name, name, diff)
			}
		}
		// Nothing more: once the streams have sent what the step caused,
		// a sentinel device joins every resource, and each one's next list
		// must be the sentinel's. Then the step's devices come back.
		e.flush(t, names...)
		sentinel := withSentinel(st.res, names...)
		e.update(t, sentinel)
		for _, name := range names {
			if diff := cmp.Diff(deviceIDs(sentinel[name]), idsOf(plugins[name].next(t, msgWait))); diff != "" {
				t.Errorf("%s: %s: a list other than the sentinel's came (-sentinel +got):\n%s", st.name, name, diff)
			}
		}
		e.update(t, st.res)
		for _, name := range names {
			if diff := cmp.Diff(deviceIDs(st.res[name]), idsOf(plugins[name].next(t, msgWait))); diff != "" {
				t.Errorf("%s: %s: list after removing the sentinel (-want +got):\n%s", st.name, name, diff)
			}
		}
	}
	// No re-registration for changes.
	for name, n := range e.kubelet.registrations() {
		if n != 1 {
			t.Errorf("%s registered %d times, want 1", name, n)
		}
	}
}

func TestNUMAHints(t *testing.T) {
	e := newEnv(t, Options{NUMANode: func(gpu int) (int, bool) { return gpu / 2, gpu < 2 }}, false)
	e.update(t, timeslice.Resources{carvev1.GPUResource: wholeGPUs(0, 1, 2)})
	got := summary(e.kubelet.plugin(t, carvev1.GPUResource, msgWait).next(t, msgWait))
	want := map[string]string{"GPU-0": "Healthy@0", "GPU-1": "Healthy@0", "GPU-2": "Healthy"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestListenerSocketName: every listener's name is its resource's base,
// the Manager's token and its number; no name of one resource is one of
// another's.
func TestListenerSocketName(t *testing.T) {
	tests := []struct {
		resource, token string
		n               uint64
		want            string
	}{
		{"nvidia.com/gpu", "3f9a1c2e", 0, "carve-nvidia.com_gpu+3f9a1c2e-0.sock"},
		{"nvidia.com/gpu", "3f9a1c2e", 1, "carve-nvidia.com_gpu+3f9a1c2e-1.sock"},
		{"nvidia.com/mig-1g.10gb", "00000000", 12, "carve-nvidia.com_mig-1g.10gb+00000000-12.sock"},
		// A resource whose name looks like a listener's does not take
		// that listener's name.
		{"nvidia.com/gpu+3f9a1c2e-1", "3f9a1c2e", 0, "carve-nvidia.com_gpu_3f9a1c2e-1+3f9a1c2e-0.sock"},
	}
	for _, tt := range tests {
		if got := listenerSocketName(tt.resource, tt.token, tt.n); got != tt.want {
			t.Errorf("listenerSocketName(%q, %q, %d) = %q, want %q", tt.resource, tt.token, tt.n, got, tt.want)
		}
	}
}

// TestHeldEndpointMovesSocket: when the kubelet refuses a socket path it
// still holds an endpoint at ("device plugin already connected", which
// kubelet 1.37 can keep for good), the server moves to a new path and
// registers from there; Update succeeds and the old path is gone.
func TestHeldEndpointMovesSocket(t *testing.T) {
	e := newEnv(t, Options{RetryInterval: time.Hour}, false)
	first := e.listener(migRes, 0)
	e.kubelet.mu.Lock()
	e.kubelet.held = map[string]bool{first: true}
	e.kubelet.mu.Unlock()

	e.update(t, timeslice.Resources{migRes: migDevs(0, "1g.10gb", 1, 7, 8)})
	p := e.kubelet.plugin(t, migRes, msgWait)
	if want := e.listener(migRes, 1); p.endpoint != want {
		t.Errorf("registered endpoint %q, want %q", p.endpoint, want)
	}
	if got := idsOf(p.next(t, msgWait)); len(got) != 2 {
		t.Errorf("list %v, want 2 devices", got)
	}
	if _, err := os.Stat(filepath.Join(e.dir, first)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("refused socket %s: %v, want it removed", first, err)
	}
}

// TestSlowRegistrationMovesSocket: a registration the kubelet completes
// only after the plugin's timeout spends its path: the server moves to a
// new path and registers from there, and never sends the first path
// again (the stub fails the test if it does). The kubelet's stream on the
// first path ends with its listener.
func TestSlowRegistrationMovesSocket(t *testing.T) {
	e := newEnv(t, Options{RetryInterval: time.Hour, Timeout: 200 * time.Millisecond}, false)
	e.kubelet.mu.Lock()
	e.kubelet.slow, e.kubelet.slowBy = 1, time.Second
	e.kubelet.mu.Unlock()

	e.update(t, timeslice.Resources{migRes: migDevs(0, "1g.10gb", 1, 7, 8)})
	var got []string
	for _, r := range e.kubelet.requests() {
		got = append(got, r.Endpoint)
	}
	if diff := cmp.Diff([]string{e.listener(migRes, 0), e.listener(migRes, 1)}, got); diff != "" {
		t.Errorf("completed registrations (-want +got):\n%s", diff)
	}
	p := e.kubelet.plugin(t, migRes, msgWait)
	if want := e.listener(migRes, 1); p.endpoint != want {
		t.Errorf("kubelet's plugin on %q, want %q", p.endpoint, want)
	}
	if got := idsOf(p.next(t, msgWait)); len(got) != 2 {
		t.Errorf("list %v, want 2 devices", got)
	}
}

// TestEachManagerNewSockets: a Manager started after another stopped (an
// agent restart) serves on paths of its own, so a kubelet that has not
// yet noticed the first Manager's streams end refuses nothing.
func TestEachManagerNewSockets(t *testing.T) {
	e := newEnv(t, Options{RetryInterval: time.Hour}, false)
	res := timeslice.Resources{migRes: migDevs(0, "1g.10gb", 1, 7)}
	e.update(t, res)
	first := e.socket(migRes)
	e.m.Stop()
	m2, err := New(Options{DevicePluginDir: e.dir, Logger: discardLogger(), Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m2.Stop)
	if err := m2.Update(context.Background(), res); err != nil {
		t.Fatalf("second Manager's Update: %v", err)
	}
	second := m2.SocketPath(migRes)
	if second == first || second == "" {
		t.Errorf("second Manager serves on %q, the first served on %q; want a path of its own", second, first)
	}
	if got := e.kubelet.registrations()[migRes]; got != 2 {
		t.Errorf("%d registrations, want 2", got)
	}
}

// TestReturningResourceNewSocket: a resource that vanishes and comes back
// is served on a new path, which a kubelet still holding the endpoint of
// the first listener cannot refuse.
func TestReturningResourceNewSocket(t *testing.T) {
	e := newEnv(t, Options{RetryInterval: time.Hour}, false)
	res := timeslice.Resources{migRes: migDevs(0, "1g.10gb", 1, 7)}
	e.update(t, res)
	e.kubelet.plugin(t, migRes, msgWait).next(t, msgWait)
	e.update(t, timeslice.Resources{})
	e.update(t, res)
	reqs := e.kubelet.requests()
	var got []string
	for _, r := range reqs {
		got = append(got, r.Endpoint)
	}
	if diff := cmp.Diff([]string{e.listener(migRes, 0), e.listener(migRes, 1)}, got); diff != "" {
		t.Errorf("registered endpoints (-want +got):\n%s", diff)
	}
}

// TestStaleSocketsRemoved: Run removes carve sockets nothing answers on
// (left by a killed agent) and keeps those a live process serves and
// every other file.
func TestStaleSocketsRemoved(t *testing.T) {
	dir := shortTempDir(t)
	stale := filepath.Join(dir, listenerSocketName(migRes, "0badc0de", 3))
	staleSocket(t, stale)
	live := filepath.Join(dir, listenerSocketName("example.com/other", "0badc0de", 0))
	liveSocket(t, live)
	other := filepath.Join(dir, "someone-else.sock")
	if err := os.WriteFile(other, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := New(Options{DevicePluginDir: dir, Logger: discardLogger(), Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	eventually(t, 5*time.Second, "stale socket removed", func() bool {
		_, err := os.Stat(stale)
		return errors.Is(err, os.ErrNotExist)
	})
	for _, p := range []string{live, other} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v, want it kept", filepath.Base(p), err)
		}
	}
}

func TestVanishedResourceStops(t *testing.T) {
	e := newEnv(t, Options{}, false)
	e.update(t, timeslice.Resources{
		carvev1.GPUResource: wholeGPUs(0),
		migRes:              migDevs(1, "1g.10gb", 1, 7),
	})
	gone := e.kubelet.plugin(t, migRes, msgWait)
	stays := e.kubelet.plugin(t, carvev1.GPUResource, msgWait)
	gone.next(t, msgWait)
	stays.next(t, msgWait)

	e.update(t, timeslice.Resources{carvev1.GPUResource: wholeGPUs(0), migRes: nil})
	if _, err := os.Stat(e.socket(migRes)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket of the vanished resource: %v, want it removed", err)
	}
	select {
	case <-gone.done:
	case <-time.After(msgWait):
		t.Fatal("stream of the vanished resource did not end")
	}
	if _, err := net.Dial("unix", e.socket(migRes)); err == nil {
		t.Error("vanished resource still answers")
	}
	// The remaining resource was sent nothing: its next list is a
	// sentinel's.
	e.flush(t, carvev1.GPUResource)
	sentinel := withSentinel(timeslice.Resources{carvev1.GPUResource: wholeGPUs(0)}, carvev1.GPUResource)
	e.update(t, sentinel)
	if diff := cmp.Diff(deviceIDs(sentinel[carvev1.GPUResource]), idsOf(stays.next(t, msgWait))); diff != "" {
		t.Errorf("remaining resource: a list other than the sentinel's came (-sentinel +got):\n%s", diff)
	}
	if _, err := os.Stat(e.socket(carvev1.GPUResource)); err != nil {
		t.Errorf("socket of the remaining resource: %v", err)
	}
	if got := e.m.Advertised(); len(got) != 1 || got[carvev1.GPUResource] == nil {
		t.Errorf("Advertised() = %v, want only %s", got, carvev1.GPUResource)
	}
}

func TestKubeletRestartReregisters(t *testing.T) {
	tests := []struct {
		name string
		// wipe deletes the plugin sockets too, as a starting kubelet does.
		wipe bool
	}{
		{"kubelet socket recreated", false},
		{"kubelet wipes plugin sockets", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A long retry interval: only the directory events may drive
			// the re-registration.
			e := newEnv(t, Options{RetryInterval: time.Hour}, true)
			res := timeslice.Resources{carvev1.GPUResource: wholeGPUs(0, 1), migRes: migDevs(2, "1g.10gb", 1, 7)}
			e.update(t, res)
			for name := range res {
				e.kubelet.plugin(t, name, msgWait).next(t, msgWait)
			}
			e.kubelet.stop()
			if tt.wipe {
				for name := range res {
					if err := os.Remove(e.socket(name)); err != nil {
						t.Fatal(err)
					}
				}
			}
			k2 := startStubKubelet(t, e.dir)
			for name, devs := range res {
				p := k2.plugin(t, name, time.Second)
				if got := idsOf(p.next(t, msgWait)); len(got) != len(devs) {
					t.Errorf("%s: list after re-registration %v, want %d devices", name, got, len(devs))
				}
			}
		})
	}
}

func TestOwnSocketDeletedRestarts(t *testing.T) {
	e := newEnv(t, Options{RetryInterval: time.Hour}, true)
	e.update(t, timeslice.Resources{carvev1.GPUResource: wholeGPUs(0, 1), migRes: migDevs(2, "1g.10gb", 1, 7)})
	first := e.kubelet.plugin(t, carvev1.GPUResource, msgWait)
	first.next(t, msgWait)
	other := e.kubelet.plugin(t, migRes, msgWait)
	other.next(t, msgWait)

	if err := os.Remove(e.socket(carvev1.GPUResource)); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Second, "re-registration", func() bool {
		return e.kubelet.registrations()[carvev1.GPUResource] == 2
	})
	p := e.kubelet.plugin(t, carvev1.GPUResource, msgWait)
	if got := idsOf(p.next(t, msgWait)); !reflect.DeepEqual(got, []string{"GPU-0", "GPU-1"}) {
		t.Errorf("list after restart %v", got)
	}
	// The new listener is on a path of its own, the one it registered.
	if want := e.listener(carvev1.GPUResource, 1); p.endpoint != want {
		t.Errorf("registered endpoint %q, want %q", p.endpoint, want)
	}
	if _, err := os.Stat(filepath.Join(e.dir, p.endpoint)); err != nil {
		t.Errorf("socket not recreated: %v", err)
	}
	select {
	case <-first.done:
	case <-time.After(msgWait):
		t.Error("stream of the old listener did not end")
	}
	if n := e.kubelet.registrations()[migRes]; n != 1 {
		t.Errorf("untouched resource registered %d times, want 1", n)
	}
}

func TestSocketClaim(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(t *testing.T, path string)
		wantErr bool
	}{
		{"no file", func(*testing.T, string) {}, false},
		{"live process", liveSocket, true},
		{"stale socket", staleSocket, false},
		{"stale file", func(t *testing.T, path string) {
			t.Helper()
			if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, Options{}, false)
			path := e.socket(carvev1.GPUResource)
			tt.prepare(t, path)
			err := e.m.Update(context.Background(), timeslice.Resources{carvev1.GPUResource: wholeGPUs(0)})
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "another live process") {
					t.Fatalf("Update error %v, want one naming %s as served by another process", err, path)
				}
				if _, err := os.Stat(path); err != nil {
					t.Errorf("the other process's socket was touched: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Update: %v", err)
			}
			e.kubelet.plugin(t, carvev1.GPUResource, msgWait).next(t, msgWait)
		})
	}
}

func TestRegistrationRetried(t *testing.T) {
	e := newEnv(t, Options{RetryInterval: 20 * time.Millisecond}, true)
	e.kubelet.mu.Lock()
	e.kubelet.reject = true
	e.kubelet.mu.Unlock()
	err := e.m.Update(context.Background(), timeslice.Resources{carvev1.GPUResource: wholeGPUs(0)})
	if err == nil || !strings.Contains(err.Error(), "register nvidia.com/gpu") {
		t.Fatalf("Update error %v, want a registration error", err)
	}
	// The server serves anyway and registers once the kubelet accepts.
	// Each refusal moves it to a new socket (the stub checks no path is
	// sent twice), so a dial can meet a socket just left; one must work.
	eventually(t, msgWait, "server serving after failed registration", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := dialPlugin(t, e.socket(carvev1.GPUResource)).GetDevicePluginOptions(ctx, &pluginapi.Empty{})
		return err == nil
	})
	e.kubelet.mu.Lock()
	e.kubelet.reject = false
	e.kubelet.mu.Unlock()
	e.kubelet.plugin(t, carvev1.GPUResource, msgWait).next(t, msgWait)
}

func TestWithdraw(t *testing.T) {
	res := timeslice.Resources{
		carvev1.GPUResource: wholeGPUs(0, 1),
		sharedRes:           sharedGPUs(3, 2, 3),
		migRes:              append(migDevs(4, "1g.10gb", 1, 7, 8), migDevs(5, "1g.10gb", 1, 7)...),
	}
	names := slices.Sorted(maps.Keys(res))
	tests := []struct {
		name     string
		withdraw []string
		// gone: resource -> the offered device IDs Withdraw takes out.
		gone map[string][]string
	}{
		{"device ID", []string{"GPU-1"}, map[string][]string{
			carvev1.GPUResource: {"GPU-1"},
		}},
		{"replica IDs", []string{"GPU-2::0", "GPU-2::1"}, map[string][]string{
			sharedRes: {"GPU-2::0", "GPU-2::1"},
		}},
		{"physical UUID takes all replicas", []string{"GPU-3"}, map[string][]string{
			sharedRes: {"GPU-3::0", "GPU-3::1", "GPU-3::2"},
		}},
		{"GPU UUID takes its MIG devices", []string{"GPU-4"}, map[string][]string{
			migRes: {"MIG-4-7", "MIG-4-8"},
		}},
		{"across resources", []string{"MIG-4-8", "GPU-0"}, map[string][]string{
			carvev1.GPUResource: {"GPU-0"},
			migRes:              {"MIG-4-8"},
		}},
		{"unknown IDs ignored", []string{"GPU-9", "GPU-2::7"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, Options{}, false)
			e.update(t, res)
			plugins := map[string]*stubPlugin{}
			offered := map[string][]string{} // resource -> IDs of its first list
			for _, name := range names {
				plugins[name] = e.kubelet.plugin(t, name, msgWait)
				offered[name] = idsOf(plugins[name].next(t, msgWait))
			}
			left := map[string][]string{} // resource -> IDs still listed
			for _, name := range names {
				for _, id := range tt.gone[name] {
					if !slices.Contains(offered[name], id) {
						t.Fatalf("%s never offered %s (offered %v)", name, id, offered[name])
					}
				}
				left[name] = slices.DeleteFunc(slices.Clone(offered[name]), func(id string) bool { return slices.Contains(tt.gone[name], id) })
			}

			if err := e.m.Withdraw(context.Background(), tt.withdraw); err != nil {
				t.Fatalf("Withdraw: %v", err)
			}
			// Withdraw returned: the streams of the resources that lost
			// devices have been sent the reduced list.
			for name := range tt.gone {
				if diff := cmp.Diff(left[name], idsOf(plugins[name].next(t, msgWait))); diff != "" {
					t.Errorf("%s: list after Withdraw (-want +got):\n%s", name, diff)
				}
			}
			advertised := map[string][]string{}
			for name, devs := range e.m.Advertised() {
				for _, d := range devs {
					advertised[name] = append(advertised[name], d.ID)
				}
				slices.Sort(advertised[name])
			}
			if diff := cmp.Diff(left, advertised); diff != "" {
				t.Errorf("Advertised() after Withdraw (-want +got):\n%s", diff)
			}
			// Allocate refuses every withdrawn device as unknown and still
			// grants every device left.
			for _, name := range names {
				for _, id := range offered[name] {
					err := allocateOne(t, e, name, id)
					if !slices.Contains(tt.gone[name], id) {
						if err != nil {
							t.Errorf("%s: Allocate of %s, still listed: %v", name, id, err)
						}
						continue
					}
					if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), id) {
						t.Errorf("%s: Allocate of withdrawn %s: %v, want InvalidArgument naming it", name, id, err)
					}
				}
			}

			// Withdraw sent no other list, and the next Update ends the
			// withdrawal: once the streams have sent what Withdraw caused,
			// an Update with a sentinel device in every resource must be
			// each one's next list, whole again.
			e.flush(t, names...)
			sentinel := withSentinel(res, names...)
			e.update(t, sentinel)
			for _, name := range names {
				if diff := cmp.Diff(deviceIDs(sentinel[name]), idsOf(plugins[name].next(t, msgWait))); diff != "" {
					t.Errorf("%s: next list after Withdraw and Update (-sentinel +got):\n%s", name, diff)
				}
			}
			for name, gone := range tt.gone {
				for _, id := range gone {
					if err := allocateOne(t, e, name, id); err != nil {
						t.Errorf("%s: Allocate of %s after the withdrawal ended: %v", name, id, err)
					}
				}
			}
		})
	}
}

// allocateOne asks resource's server, as the kubelet would, to allocate
// the device id to one container.
func allocateOne(t *testing.T, e *env, resource, id string) error {
	t.Helper()
	_, err := dialPlugin(t, e.socket(resource)).Allocate(context.Background(), &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{id}}},
	})
	return err
}

// blockingStream is a ListAndWatch stream whose Send reports each message
// on got and returns only when gate lets it.
type blockingStream struct {
	grpc.ServerStream
	ctx  context.Context
	got  chan *pluginapi.ListAndWatchResponse
	gate chan struct{}
}

func (b *blockingStream) Context() context.Context { return b.ctx }
func (b *blockingStream) Send(m *pluginapi.ListAndWatchResponse) error {
	b.got <- m
	select {
	case <-b.gate:
		return nil
	case <-b.ctx.Done():
		return b.ctx.Err()
	}
}

func TestWithdrawWaitsForSend(t *testing.T) {
	e := newEnv(t, Options{}, false)
	e.update(t, timeslice.Resources{carvev1.GPUResource: wholeGPUs(0, 1)})
	e.kubelet.plugin(t, carvev1.GPUResource, msgWait).next(t, msgWait)
	e.m.mu.Lock()
	s := e.m.servers[carvev1.GPUResource]
	e.m.mu.Unlock()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bs := &blockingStream{ctx: ctx, got: make(chan *pluginapi.ListAndWatchResponse, 8), gate: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Go(func() {
		// It ends with the stream's context, cancelled below; only what it
		// sent matters.
		_ = s.ListAndWatch(&pluginapi.Empty{}, bs)
	})
	defer wg.Wait()
	defer cancel()
	<-bs.got // the initial list
	bs.gate <- struct{}{}

	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	done := make(chan error, 1)
	go func() { done <- e.m.Withdraw(wctx, []string{"GPU-1"}) }()
	select {
	case m := <-bs.got:
		if diff := cmp.Diff([]string{"GPU-0"}, idsOf(m)); diff != "" {
			t.Fatalf("withdraw list (-want +got):\n%s", diff)
		}
	case <-time.After(msgWait):
		t.Fatal("the stream was not sent the reduced list")
	}
	// Send has not returned, so Withdraw must still be waiting: cancelled
	// now, it gives up with the context's error. One that did not wait
	// returned nil.
	wcancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Withdraw cancelled while Send is blocked: %v, want context.Canceled (it must wait until Send returns)", err)
		}
	case <-time.After(msgWait):
		t.Fatal("Withdraw did not return after its context was cancelled")
	}
	// Withdrawing again waits for the same Send and returns once it has.
	go func() { done <- e.m.Withdraw(context.Background(), []string{"GPU-1"}) }()
	bs.gate <- struct{}{}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Withdraw: %v", err)
		}
	case <-time.After(msgWait):
		t.Fatal("Withdraw did not return after Send returned")
	}

	// A Send that never returns: Withdraw gives up with ctx.
	tctx, tcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer tcancel()
	err := e.m.Withdraw(tctx, []string{"GPU-0"})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), carvev1.GPUResource) {
		t.Fatalf("Withdraw with a stuck stream: %v, want deadline exceeded naming the resource", err)
	}
	<-bs.got
	// Withdrawing the same device again still waits for the stuck Send.
	tctx2, tcancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer tcancel2()
	if err := e.m.Withdraw(tctx2, []string{"GPU-0"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("repeated Withdraw with a stuck stream: %v, want deadline exceeded", err)
	}
	go func() { done <- e.m.Withdraw(context.Background(), []string{"GPU-0"}) }()
	bs.gate <- struct{}{}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("repeated Withdraw: %v", err)
		}
	case <-time.After(msgWait):
		t.Fatal("repeated Withdraw did not return after Send returned")
	}
}

func TestReconcileNoticesNewKubelet(t *testing.T) {
	// No Run, so no directory events: reconcile alone must notice that
	// the kubelet socket is a new one.
	e := newEnv(t, Options{}, false)
	e.update(t, timeslice.Resources{carvev1.GPUResource: wholeGPUs(0)})
	e.kubelet.plugin(t, carvev1.GPUResource, msgWait).next(t, msgWait)
	e.m.reconcile(context.Background())
	if n := e.kubelet.registrations()[carvev1.GPUResource]; n != 1 {
		t.Fatalf("reconcile with the same kubelet registered again (%d registrations)", n)
	}
	e.kubelet.stop()
	k2 := startStubKubelet(t, e.dir)
	e.m.reconcile(context.Background())
	k2.plugin(t, carvev1.GPUResource, msgWait).next(t, msgWait)
}

// TestLateKubeletEventMovesSocket: the kubelet.sock creation event of a
// restarted kubelet can come after the servers registered with that very
// kubelet (their sockets' deletion woke the reconcile loop first). The
// registration it asks for goes to a new socket: a second registration on
// the first path would be refused, and kubelet 1.37 would then keep the
// first endpoint for good. The stream of the first ends with its listener.
func TestLateKubeletEventMovesSocket(t *testing.T) {
	e := newEnv(t, Options{RetryInterval: time.Hour}, false)
	e.update(t, timeslice.Resources{migRes: migDevs(0, "1g.10gb", 1, 7)})
	first := e.kubelet.plugin(t, migRes, msgWait)
	first.next(t, msgWait)

	e.m.markUnregistered() // what Run does on kubelet.sock's creation
	e.m.reconcile(context.Background())
	p := e.kubelet.plugin(t, migRes, msgWait)
	if want := e.listener(migRes, 1); p.endpoint != want {
		t.Errorf("registered again on %q, want %q", p.endpoint, want)
	}
	if got := idsOf(p.next(t, msgWait)); len(got) != 1 {
		t.Errorf("list %v, want 1 device", got)
	}
	select {
	case <-first.done:
	case <-time.After(msgWait):
		t.Error("stream of the first listener did not end")
	}
}

func TestStopRemovesSockets(t *testing.T) {
	e := newEnv(t, Options{}, false)
	e.update(t, timeslice.Resources{carvev1.GPUResource: wholeGPUs(0), migRes: migDevs(1, "1g.10gb", 1, 7)})
	e.m.Stop()
	for _, name := range []string{carvev1.GPUResource, migRes} {
		if _, err := os.Stat(e.socket(name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s socket after Stop: %v", name, err)
		}
	}
	entries, _ := os.ReadDir(e.dir)
	for _, en := range entries {
		if en.Name() != DefaultKubeletSocket {
			t.Errorf("left behind %s", filepath.Join(e.dir, en.Name()))
		}
	}
}
