package plugin

import (
	"maps"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/timeslice"
	"github.com/carve-dev/carve/xidpolicy"
)

const testQuiet = time.Second

// recoverable is a policy with the given ignored XIDs (nil: the default
// ones) under which the XIDs recover after quiet.
func recoverable(quiet time.Duration, ignored []uint64, xids ...uint64) xidpolicy.Policy {
	p := xidpolicy.Default()
	if ignored != nil {
		p.Ignored = slices.Sorted(slices.Values(ignored))
	}
	p.Recoverable = []uint64{}
	for _, x := range slices.Sorted(slices.Values(xids)) {
		if !slices.Contains(p.Ignored, x) && !slices.Contains(p.Recoverable, x) {
			p.Recoverable = append(p.Recoverable, x)
		}
	}
	p.Quiet = quiet
	return p
}

// healthEnv runs a Manager with a fake NVML: GPUs 0, 1 and 3 shared 2 ways,
// MIG devices GI 1, 2 and 3 (2 replicas each) on GPU 2. h gives the XID
// policy, the clock and the state file; the loop polls every 10 ms.
func healthEnv(t *testing.T, h HealthOptions, reg prometheus.Registerer) (*env, *fakeNVML, map[string]*stubPlugin) {
	t.Helper()
	f := newFakeNVML(4)
	f.addMIG(2, 1)
	f.addMIG(2, 2)
	f.addMIG(2, 3)
	h.Poll, h.MinBackoff, h.MaxBackoff = 10*time.Millisecond, 5*time.Millisecond, 20*time.Millisecond
	e := newEnv(t, Options{
		NVML:       f,
		Registerer: reg,
		// TestHealthXIDs starts its cases at once: registrations may be slow.
		Timeout: 10 * time.Second,
		Health:  h,
	}, true)
	res := timeslice.Resources{
		sharedRes: sharedGPUs(2, 0, 1, 3),
		migRes:    migDevs(2, "1g.10gb", 2, 1, 2, 3),
	}
	e.update(t, res)
	plugins := map[string]*stubPlugin{}
	for name := range res {
		plugins[name] = e.kubelet.plugin(t, name, msgWait)
		for id, h := range summary(plugins[name].next(t, msgWait)) {
			if h != "Healthy" {
				t.Fatalf("%s %s starts %s", name, id, h)
			}
		}
	}
	return e, f, plugins
}

func allHealthy(ids ...string) map[string]string {
	out := map[string]string{}
	for _, id := range ids {
		out[id] = "Healthy"
	}
	return out
}

func with(m map[string]string, h string, ids ...string) map[string]string {
	out := make(map[string]string, len(m)+len(ids))
	maps.Copy(out, m)
	for _, id := range ids {
		out[id] = h
	}
	return out
}

// healthSentinels are, per resource of healthEnv, an XID not ignored (under
// the default and the custom ignore lists) on devices no case of
// TestHealthXIDs touches, the UUID it marks and the device IDs it turns
// unhealthy.
var healthSentinels = map[string]struct {
	ev   partition.XIDEvent
	uuid string
	ids  []string
}{
	sharedRes: {partition.XIDEvent{UUID: "GPU-3", XID: 48, GIID: -1, CIID: -1}, "GPU-3", []string{"GPU-3::0", "GPU-3::1"}},
	migRes:    {partition.XIDEvent{UUID: "GPU-2", XID: 94, GIID: 3, CIID: 0}, "MIG-2-3", []string{"MIG-2-3::0", "MIG-2-3::1"}},
}

func TestHealthXIDs(t *testing.T) {
	sharedAll := allHealthy("GPU-0::0", "GPU-0::1", "GPU-1::0", "GPU-1::1", "GPU-3::0", "GPU-3::1")
	migAll := allHealthy("MIG-2-1::0", "MIG-2-1::1", "MIG-2-2::0", "MIG-2-2::1", "MIG-2-3::0", "MIG-2-3::1")
	migEvery := []string{"MIG-2-1::0", "MIG-2-1::1", "MIG-2-2::0", "MIG-2-2::1", "MIG-2-3::0", "MIG-2-3::1"}
	tests := []struct {
		name    string
		ignored []uint64 // nil: defaults
		ev      partition.XIDEvent
		// sick: per resource the device IDs the XID turns unhealthy;
		// a resource absent must get no list.
		sick map[string][]string
		// unhealthy is what Unhealthy() reports until the quiet period
		// ends: the UUIDs the XID marks, even one no resource holds.
		unhealthy map[string]uint64
	}{
		{"critical XID on a GPU", nil, partition.XIDEvent{UUID: "GPU-0", XID: 79, GIID: -1, CIID: -1},
			map[string][]string{sharedRes: {"GPU-0::0", "GPU-0::1"}}, map[string]uint64{"GPU-0": 79}},
		{"application XID ignored", nil, partition.XIDEvent{UUID: "GPU-1", XID: 13, GIID: -1, CIID: -1}, nil, nil},
		{"application XID 43 ignored", nil, partition.XIDEvent{UUID: "GPU-2", XID: 43, GIID: 1, CIID: 0}, nil, nil},
		{"XID on one MIG device", nil, partition.XIDEvent{UUID: "GPU-2", XID: 94, GIID: 1, CIID: 0},
			map[string][]string{migRes: {"MIG-2-1::0", "MIG-2-1::1"}}, map[string]uint64{"MIG-2-1": 94}},
		{"XID on one GPU instance, any CI", nil, partition.XIDEvent{UUID: "GPU-2", XID: 94, GIID: 2, CIID: -1},
			map[string][]string{migRes: {"MIG-2-2::0", "MIG-2-2::1"}}, map[string]uint64{"MIG-2-2": 94}},
		{"whole-GPU XID takes its MIG devices", nil, partition.XIDEvent{UUID: "GPU-2", XID: 48, GIID: -1, CIID: -1},
			map[string][]string{migRes: migEvery}, map[string]uint64{"GPU-2": 48}},
		{"unresolvable MIG instance falls back to the GPU", nil, partition.XIDEvent{UUID: "GPU-2", XID: 94, GIID: 9, CIID: 0},
			map[string][]string{migRes: migEvery}, map[string]uint64{"GPU-2": 94}},
		{"custom ignore list: 79 ignored", []uint64{79}, partition.XIDEvent{UUID: "GPU-0", XID: 79, GIID: -1, CIID: -1}, nil, nil},
		{"custom ignore list: 13 not ignored", []uint64{79}, partition.XIDEvent{UUID: "GPU-1", XID: 13, GIID: -1, CIID: -1},
			map[string][]string{sharedRes: {"GPU-1::0", "GPU-1::1"}}, map[string]uint64{"GPU-1": 13}},
		{"unknown GPU: recorded, no advertised device changes", nil, partition.XIDEvent{UUID: "GPU-7", XID: 79, GIID: -1, CIID: -1},
			nil, map[string]uint64{"GPU-7": 79}},
	}
	healthy := map[string]map[string]string{sharedRes: sharedAll, migRes: migAll}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			reg := prometheus.NewRegistry()
			// Every XID of the cases not ignored recovers: the test is
			// of which devices an XID hits, and of their recovery.
			pol := recoverable(testQuiet, tt.ignored, 13, 48, 79, 94)
			e, f, plugins := healthEnv(t, HealthOptions{Policy: pol}, reg)
			start := time.Now()
			f.events <- tt.ev
			// Every resource the XID must leave alone gets a sentinel XID
			// after it. The health loop handles events in order, so that
			// resource's next list must be the sentinel's alone: a change
			// the XID made would come before it or show in it.
			sick := maps.Clone(tt.sick)
			if sick == nil {
				sick = map[string][]string{}
			}
			wantUnhealthy := maps.Clone(tt.unhealthy)
			if wantUnhealthy == nil {
				wantUnhealthy = map[string]uint64{}
			}
			critical, ignored := 1.0, 0.0 // XID events counted
			if len(tt.unhealthy) == 0 {
				critical, ignored = 0, 1
			}
			for _, name := range slices.Sorted(maps.Keys(plugins)) {
				if _, ok := tt.sick[name]; ok {
					continue
				}
				s := healthSentinels[name]
				f.events <- s.ev
				sick[name] = s.ids
				wantUnhealthy[s.uuid] = s.ev.XID
				critical++
			}
			for name, p := range plugins {
				if diff := cmp.Diff(with(healthy[name], "Unhealthy", sick[name]...), summary(p.next(t, msgWait))); diff != "" {
					t.Fatalf("%s: first list after the XID (-want +got):\n%s", name, diff)
				}
			}
			// Every event has been handled: each resource's list shows
			// its last.
			if diff := cmp.Diff(wantUnhealthy, e.m.Unhealthy()); diff != "" {
				t.Errorf("Unhealthy() after the XID (-want +got):\n%s", diff)
			}
			if got := testutil.ToFloat64(e.m.metrics.xids.WithLabelValues("true")); got != critical {
				t.Errorf("critical XID counter %v, want %v", got, critical)
			}
			if got := testutil.ToFloat64(e.m.metrics.xids.WithLabelValues("false")); got != ignored {
				t.Errorf("ignored XID counter %v, want %v", got, ignored)
			}
			// Recovery after the quiet period, with a new list.
			for name, p := range plugins {
				if diff := cmp.Diff(healthy[name], summary(p.next(t, msgWait))); diff != "" {
					t.Errorf("%s after the quiet period (-want +got):\n%s", name, diff)
				}
				if since := time.Since(start); since < testQuiet {
					t.Errorf("%s recovered after %v, before the quiet period %v", name, since, testQuiet)
				}
			}
			// The last recovery healed every XID at least as old as its
			// own, the one on a UUID no resource holds too.
			if diff := cmp.Diff(map[string]uint64{}, e.m.Unhealthy()); diff != "" {
				t.Errorf("Unhealthy() after the quiet period (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHealthQuietPeriodRestartsOnNewXID(t *testing.T) {
	const quiet = time.Second
	e, f, plugins := healthEnv(t, HealthOptions{Policy: recoverable(quiet, nil, 79)}, nil)
	p := plugins[sharedRes]
	first := time.Now()
	f.events <- partition.XIDEvent{UUID: "GPU-0", XID: 79, GIID: -1, CIID: -1}
	if got := summary(p.next(t, msgWait)); got["GPU-0::0"] != "Unhealthy" {
		t.Fatalf("list after the first XID %v, want GPU-0 unhealthy", got)
	}
	time.Sleep(quiet / 3) // the second XID comes a third into the quiet period
	select {
	case m := <-p.msgs:
		// Nothing may change before the quiet period ends: the device
		// recovered too early (or, had the sleep overrun by the rest of
		// the period, the second XID could not be sent within it).
		t.Fatalf("list %v came %v after the first critical XID, within the quiet period %v", summary(m), time.Since(first).Round(time.Millisecond), quiet)
	default:
	}
	second := time.Now()
	f.events <- partition.XIDEvent{UUID: "GPU-0", XID: 79, GIID: -1, CIID: -1}
	got := summary(p.next(t, msgWait))
	if got["GPU-0::0"] != "Healthy" {
		t.Fatalf("unexpected list %v", got)
	}
	if since := time.Since(second); since < quiet {
		t.Errorf("recovered %v after the second XID, before the quiet period %v", since, quiet)
	}
	if u := e.m.Unhealthy(); len(u) != 0 {
		t.Errorf("Unhealthy() = %v after recovery", u)
	}
}

func TestHealthLoopSurvivesNVMLErrors(t *testing.T) {
	f := newFakeNVML(2)
	f.failWatch = 2 // two failed WatchXIDs
	f.failWait = 1  // then an event set whose first Wait fails
	e := newEnv(t, Options{
		NVML:   f,
		Health: HealthOptions{Poll: 10 * time.Millisecond, MinBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond},
	}, true)
	e.update(t, timeslice.Resources{carvev1.GPUResource: wholeGPUs(0, 1)})
	p := e.kubelet.plugin(t, carvev1.GPUResource, msgWait)
	p.next(t, msgWait)
	f.events <- partition.XIDEvent{UUID: "GPU-1", XID: 79, GIID: -1, CIID: -1}
	if got := summary(p.next(t, msgWait)); got["GPU-1"] != "Unhealthy" || got["GPU-0"] != "Healthy" {
		t.Fatalf("after XID: %v", got)
	}
	if u := e.m.Unhealthy(); !reflect.DeepEqual(u, map[string]uint64{"GPU-1": 79}) {
		t.Errorf("Unhealthy() = %v, want GPU-1: 79", u)
	}
	watch, closed := f.calls()
	if watch < 4 {
		t.Errorf("WatchXIDs called %d times, want >= 4 (2 failures, 1 failed wait, 1 working)", watch)
	}
	if closed < 1 {
		t.Errorf("event set of the failed wait not closed")
	}
	// Run's cleanup checks that cancel stops the loop.
}

// fakeClock is the health loop's clock in tests: it stands still until
// the test moves it, and counts how often the loop read it.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	reads int
}

// Now is the clock's time, counted as a read.
func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads++
	return c.now
}

// add moves the clock on by d.
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// readCount is how often the clock was read.
func (c *fakeClock) readCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads
}

// waitLoopPass waits until the health loop has run recover at least once
// on the clock as it is now: the loop reads the clock before each recover,
// so a second read means a recover that started after now has ended.
func (c *fakeClock) waitLoopPass(t *testing.T) {
	t.Helper()
	from := c.readCount()
	deadline := time.Now().Add(msgWait)
	for c.readCount() < from+2 {
		if time.Now().After(deadline) {
			t.Fatalf("the health loop read the clock %d times in %v, want 2", c.readCount()-from, msgWait)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitXIDsHandled waits until the Manager has handled n XID events,
// critical and ignored (its XID counter).
func waitXIDsHandled(t *testing.T, m *Manager, n int) {
	t.Helper()
	deadline := time.Now().Add(msgWait)
	for {
		got := testutil.ToFloat64(m.metrics.xids.WithLabelValues("true")) + testutil.ToFloat64(m.metrics.xids.WithLabelValues("false"))
		if got >= float64(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v XID events handled after %v, want %d", got, msgWait, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestHealthStormBounded: a storm of hundreds of XIDs, critical and
// ignored ones mixed, on whole GPUs and MIG devices, costs each resource
// exactly two lists: one with the devices hit unhealthy, one with them
// healthy again once the quiet period has passed, not a moment before.
// Health changes are bounded by the devices hit and the quiet period, not
// by the number of XIDs. The loop's clock is a fake one that stands still
// during the storm, however long sending it takes.
func TestHealthStormBounded(t *testing.T) {
	const quiet = 2 * time.Second
	clock := &fakeClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	e, f, plugins := healthEnv(t, HealthOptions{Policy: recoverable(quiet, nil, 48, 79, 94), Now: clock.Now}, nil)
	sharedAll := allHealthy("GPU-0::0", "GPU-0::1", "GPU-1::0", "GPU-1::1", "GPU-3::0", "GPU-3::1")
	migAll := allHealthy("MIG-2-1::0", "MIG-2-1::1", "MIG-2-2::0", "MIG-2-2::1", "MIG-2-3::0", "MIG-2-3::1")
	storm := []partition.XIDEvent{
		{UUID: "GPU-0", XID: 79, GIID: -1, CIID: -1},
		{UUID: "GPU-1", XID: 13, GIID: -1, CIID: -1}, // ignored
		{UUID: "GPU-2", XID: 94, GIID: 1, CIID: 0},
		{UUID: "GPU-2", XID: 43, GIID: 3, CIID: 0}, // ignored
	}
	const n = 600
	for i := range n {
		f.events <- storm[i%len(storm)]
	}
	waitXIDsHandled(t, e.m, n)
	sick := map[string]map[string]string{
		sharedRes: with(sharedAll, "Unhealthy", "GPU-0::0", "GPU-0::1"),
		migRes:    with(migAll, "Unhealthy", "MIG-2-1::0", "MIG-2-1::1"),
	}
	names := slices.Sorted(maps.Keys(plugins))
	for _, name := range names {
		if diff := cmp.Diff(sick[name], summary(plugins[name].next(t, msgWait))); diff != "" {
			t.Fatalf("%s: first list after the storm (-want +got):\n%s", name, diff)
		}
	}
	// A moment before the quiet period ends, the devices are still sick.
	clock.add(quiet - time.Nanosecond)
	clock.waitLoopPass(t)
	if diff := cmp.Diff(map[string]uint64{"GPU-0": 79, "MIG-2-1": 94}, e.m.Unhealthy()); diff != "" {
		t.Fatalf("unhealthy devices just before the quiet period ends (-want +got):\n%s", diff)
	}
	clock.add(time.Nanosecond)
	healthy := map[string]map[string]string{sharedRes: sharedAll, migRes: migAll}
	for _, name := range names {
		if diff := cmp.Diff(healthy[name], summary(plugins[name].next(t, msgWait))); diff != "" {
			t.Fatalf("%s: second list after the storm, once the quiet period passed (-want +got):\n%s", name, diff)
		}
	}
	// No third list: once every stream has sent its current list, the
	// next one of each resource must be a sentinel XID's, which any other
	// list would have come before.
	e.flush(t, sharedRes, migRes)
	for name, s := range healthSentinels {
		f.events <- s.ev
		if diff := cmp.Diff(with(healthy[name], "Unhealthy", s.ids...), summary(plugins[name].next(t, msgWait))); diff != "" {
			t.Errorf("%s: the next list after the storm is not the sentinel's (-want +got):\n%s", name, diff)
		}
	}
}
