package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/internal/buildinfo"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/plugin"
	"github.com/carve-dev/carve/rollout"
	"github.com/carve-dev/carve/timeslice"
)

// scrape returns the series on reg whose names start with prefix, as
// name{label="value",...} → value; a histogram appears as its _count.
func scrape(t *testing.T, reg prometheus.Gatherer, prefix string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), prefix) {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			key := mf.GetName()
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.Counter != nil:
				out[key] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[key] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				out[key+"_count"] = float64(m.GetHistogram().GetSampleCount())
			default:
				out[key] = m.GetUntyped().GetValue()
			}
		}
	}
	return out
}

// pick returns the entries of got whose keys start with one of prefixes.
func pick(got map[string]float64, prefixes ...string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range got {
		for _, p := range prefixes {
			if strings.HasPrefix(k, p) {
				out[k] = v
			}
		}
	}
	return out
}

// stateSeries is carve_agent_state with 1 for state.
func stateSeries(state string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range carvev1.States() {
		out[fmt.Sprintf("carve_agent_state{state=%q}", s)] = oneIf(s == state)
	}
	return out
}

// testBuild is the agent build newTestMetrics exports.
func testBuild() buildinfo.Info {
	return buildinfo.Info{Version: "v1.2.3", Revision: "0123abc", GoVersion: "go1.26.8"}
}

// newTestMetrics registers Metrics on a fresh registry.
func newTestMetrics(t *testing.T) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg, testBuild())
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// Before any reconcile every series whose labels are known exists at 0;
// the agent is not ready and nothing is advertised. The build info is 1,
// its labels the build's.
func TestMetricsInitialSeries(t *testing.T) {
	m, reg := newTestMetrics(t)
	if _, err := NewMetrics(reg, testBuild()); err == nil {
		t.Fatal("registering twice succeeded")
	}
	want := stateSeries("")
	for _, r := range ReconcileResults() {
		want[fmt.Sprintf("carve_agent_reconciles_total{result=%q}", r)] = 0
	}
	maps.Copy(want, map[string]float64{
		"carve_agent_apply_duration_seconds_count":     0,
		"carve_agent_rollout_slot_held":                0,
		"carve_agent_rollout_waiting":                  0,
		"carve_agent_rollout_halted":                   0,
		"carve_agent_drain_deadline_timestamp_seconds": 0,
		"carve_agent_ready":                            0,
		`carve_agent_build_info{go_version="go1.26.8",revision="0123abc",version="v1.2.3"}`: 1,
	})
	if diff := cmp.Diff(want, scrape(t, reg, "carve_")); diff != "" {
		t.Errorf("series before any reconcile (-want +got):\n%s", diff)
	}
	var nilMetrics *Metrics
	nilMetrics.observe(Result{}, nil) // records nothing, does not panic
	nilMetrics.watch(func() bool { return true }, nil)
	m.observe(Result{}, errors.New("NVML away"))
	if got := scrape(t, reg, "carve_agent_reconciles_total")[`carve_agent_reconciles_total{result="error"}`]; got != 1 {
		t.Errorf("error reconciles %v, want 1", got)
	}
}

// observe sets every metric from a Result; a reconcile that could not
// finish leaves them as they were; series that went are deleted.
func TestMetricsObserve(t *testing.T) {
	m, reg := newTestMetrics(t)
	deadline := time.Date(2026, 3, 2, 12, 30, 0, 500e6, time.UTC)
	res := Result{
		State: carvev1.StateDraining, OpsApplied: 3, ApplyDuration: time.Second,
		Selection: configs.Selection{Profile: "small", Source: configs.SourceRule, Rule: 0},
		Resources: timeslice.Resources{"nvidia.com/mig-1g.10gb": make([]timeslice.Device, 4), "nvidia.com/gpu": make([]timeslice.Device, 1)},
		Rollout:   RolloutStatus{Holding: true}, DrainDeadline: deadline,
	}
	m.observe(res, nil)
	m.observe(Result{}, errors.New("NVML away"))
	first := scrape(t, reg, "carve_")
	want := stateSeries(carvev1.StateDraining)
	maps.Copy(want, map[string]float64{
		"carve_agent_apply_duration_seconds_count":                          1,
		`carve_agent_devices_advertised{resource="nvidia.com/gpu"}`:         1,
		`carve_agent_devices_advertised{resource="nvidia.com/mig-1g.10gb"}`: 4,
		`carve_agent_profile{profile="small",source="rule"}`:                1,
		"carve_agent_rollout_slot_held":                                     1,
		"carve_agent_rollout_waiting":                                       0,
		"carve_agent_rollout_halted":                                        0,
		"carve_agent_drain_deadline_timestamp_seconds":                      float64(deadline.Unix()) + 0.5,
	})
	if diff := cmp.Diff(want, pick(first, "carve_agent_state", "carve_agent_apply", "carve_agent_devices", "carve_agent_profile", "carve_agent_rollout", "carve_agent_drain")); diff != "" {
		t.Errorf("after a draining reconcile and an error (-want +got):\n%s", diff)
	}

	res = Result{
		State: carvev1.StatePending, Selection: configs.Selection{Source: configs.SourceNone, Rule: -1},
		Resources: timeslice.Resources{"nvidia.com/gpu": make([]timeslice.Device, 2)},
		Rollout:   RolloutStatus{Waiting: true, Halted: true},
	}
	m.observe(res, nil)
	want = stateSeries(carvev1.StatePending)
	maps.Copy(want, map[string]float64{
		"carve_agent_apply_duration_seconds_count":                  1,
		`carve_agent_devices_advertised{resource="nvidia.com/gpu"}`: 2,
		`carve_agent_profile{profile="",source="none"}`:             1,
		"carve_agent_rollout_slot_held":                             0,
		"carve_agent_rollout_waiting":                               1,
		"carve_agent_rollout_halted":                                1,
		"carve_agent_drain_deadline_timestamp_seconds":              0,
	})
	got := scrape(t, reg, "carve_")
	if diff := cmp.Diff(want, pick(got, "carve_agent_state", "carve_agent_apply", "carve_agent_devices", "carve_agent_profile", "carve_agent_rollout", "carve_agent_drain")); diff != "" {
		t.Errorf("after a pending reconcile (-want +got):\n%s", diff)
	}
	wantResults := map[string]float64{`carve_agent_reconciles_total{result="draining"}`: 1, `carve_agent_reconciles_total{result="pending"}`: 1, `carve_agent_reconciles_total{result="error"}`: 1}
	for k, v := range pick(got, "carve_agent_reconciles_total") {
		if v != wantResults[k] {
			t.Errorf("%s = %v, want %v", k, v, wantResults[k])
		}
	}
}

// The scrape reads readiness and device health when it happens, from the
// sources New gives (the Controller, the device plugin).
func TestMetricsLive(t *testing.T) {
	m, reg := newTestMetrics(t)
	ready := false
	devs := map[string][]plugin.AdvertisedDevice{
		"nvidia.com/gpu":         {{ID: "a", Healthy: true}, {ID: "b"}, {ID: "c"}},
		"nvidia.com/mig-1g.10gb": {{ID: "d", Healthy: true}},
	}
	tests := []struct {
		name       string
		ready      bool
		advertised func() map[string][]plugin.AdvertisedDevice
		want       map[string]float64
	}{
		{"no device plugin, not ready", false, nil, map[string]float64{"carve_agent_ready": 0}},
		{"ready, two sick devices", true, func() map[string][]plugin.AdvertisedDevice { return devs },
			map[string]float64{
				"carve_agent_ready": 1,
				`carve_agent_devices_unhealthy{resource="nvidia.com/gpu"}`:         2,
				`carve_agent_devices_unhealthy{resource="nvidia.com/mig-1g.10gb"}`: 0,
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m.watch(func() bool { return ready }, tt.advertised)
			ready = tt.ready
			got := pick(scrape(t, reg, "carve_"), "carve_agent_ready", "carve_agent_devices_unhealthy")
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// observeReconcile runs one reconcile of the harness's node with profile
// pinned, on revision rev, and records it on m.
func observeReconcile(t *testing.T, h *harness, m *Metrics, f *configs.File, profile, rev string) Result {
	t.Helper()
	h.labels[carvev1.LabelProfile] = profile
	res, err := h.r.Reconcile(context.Background(), Input{Config: f, Labels: h.labels, Now: h.now, Previous: h.prev, Revision: rev})
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	h.record(res)
	m.observe(res, nil)
	return res
}

// A drain publishes when it times out, from the moment it starts until
// the change is made, also once the deadline has passed; the profile,
// state and repartitions follow real reconciles.
func TestMetricsDrainOfRealReconciles(t *testing.T) {
	h := newHarness(t, "h100-80gb*2")
	m, reg := newTestMetrics(t)
	f := h.parse(testProfiles)
	observeReconcile(t, h, m, f, "balanced", "")
	busy := h.migUUID(0, "3g.40gb")
	if err := h.m.SetBusy(busy, true); err != nil {
		t.Fatal(err)
	}
	h.inUse.hold(busy, "trainer")
	deadline := float64(h.now.Add(30 * time.Minute).Unix())
	type step struct {
		advance time.Duration
		release bool
		state   string
		want    map[string]float64
	}
	steps := []step{
		{0, false, carvev1.StateDraining, map[string]float64{"carve_agent_drain_deadline_timestamp_seconds": deadline, "carve_agent_apply_duration_seconds_count": 2}},
		{10 * time.Minute, false, carvev1.StateDraining, map[string]float64{"carve_agent_drain_deadline_timestamp_seconds": deadline, "carve_agent_apply_duration_seconds_count": 2}},
		{25 * time.Minute, false, carvev1.StateFailed, map[string]float64{"carve_agent_drain_deadline_timestamp_seconds": deadline, "carve_agent_apply_duration_seconds_count": 2}},
		{time.Minute, true, carvev1.StateSuccess, map[string]float64{"carve_agent_drain_deadline_timestamp_seconds": 0, "carve_agent_apply_duration_seconds_count": 3}},
	}
	for i, s := range steps {
		h.now = h.now.Add(s.advance)
		if s.release {
			h.inUse.release(busy)
			if err := h.m.SetBusy(busy, false); err != nil {
				t.Fatal(err)
			}
		}
		if res := observeReconcile(t, h, m, f, "small", ""); res.State != s.state {
			t.Fatalf("step %d: state %s, want %s", i, res.State, s.state)
		}
		want := stateSeries(s.state)
		maps.Copy(want, s.want)
		want[`carve_agent_profile{profile="small",source="label"}`] = 1
		got := pick(scrape(t, reg, "carve_"), "carve_agent_state", "carve_agent_drain", "carve_agent_apply", "carve_agent_profile")
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("step %d (%s) (-want +got):\n%s", i, s.state, diff)
		}
	}
}

// The rollout gauges follow what the rollout answered the node's real
// reconciles: waiting without a slot, halted as the rollout said on the
// file's revision, holding while a change drains.
func TestMetricsRolloutOfRealReconciles(t *testing.T) {
	tests := []struct {
		name                   string
		fr                     *fakeRollout
		busy, fault            bool
		state                  string
		held, waiting, stopped float64
	}{
		{"no slot free", &fakeRollout{}, false, false, carvev1.StatePending, 0, 1, 0},
		{"halted", &fakeRollout{halted: true}, false, false, carvev1.StatePending, 0, 1, 1},
		{"Leases unreadable", &fakeRollout{err: errors.New("connection refused")}, false, false, carvev1.StatePending, 0, 1, 0},
		{"granted, done, released", &fakeRollout{grant: true}, false, false, carvev1.StateSuccess, 0, 0, 0},
		{"granted, draining", &fakeRollout{grant: true}, true, false, carvev1.StateDraining, 1, 0, 0},
		{"own failure spends the budget", &fakeRollout{grant: true}, false, true, carvev1.StateFailed, 0, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, "h100-80gb*1")
			h.r.Rollout = &fakeRollout{grant: true}
			m, reg := newTestMetrics(t)
			f := h.parse(testProfiles)
			observeReconcile(t, h, m, f, "balanced", "r1")
			h.r.Rollout = tt.fr
			if tt.busy {
				h.inUse.hold(h.migUUID(0, "3g.40gb"), "trainer")
			}
			if tt.fault {
				if err := h.m.InjectFault(sim.Fault{Call: "CreateGPUInstance", GPU: 0, Err: partition.ErrInsufficientResources, Times: 1}); err != nil {
					t.Fatal(err)
				}
			}
			if res := observeReconcile(t, h, m, f, "small", "r1"); res.State != tt.state {
				t.Fatalf("state %s, want %s", res.State, tt.state)
			}
			want := map[string]float64{"carve_agent_rollout_slot_held": tt.held, "carve_agent_rollout_waiting": tt.waiting, "carve_agent_rollout_halted": tt.stopped}
			if diff := cmp.Diff(want, pick(scrape(t, reg, "carve_"), "carve_agent_rollout")); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// A node that waits for a slot exports the slots it found stuck, with
// how long ago each expired; a slot no longer stuck loses its series.
func TestMetricsStuckSlots(t *testing.T) {
	h := newHarness(t, "h100-80gb*1")
	h.r.Rollout = &fakeRollout{grant: true}
	m, reg := newTestMetrics(t)
	f := h.parse(testProfiles)
	observeReconcile(t, h, m, f, "balanced", "r1")
	stuck := rollout.Lease{Name: "carve-rollout-x-1", Kind: rollout.KindSlot, Holder: "gpu-b", Renewed: h.now.Add(-105 * time.Second), Duration: 15 * time.Second, Stuck: true}
	h.r.Rollout = &fakeRollout{stuck: []rollout.Lease{stuck}}
	observeReconcile(t, h, m, f, "small", "r1")
	want := map[string]float64{`carve_agent_rollout_slot_stuck_seconds{holder="gpu-b",slot="carve-rollout-x-1"}`: 90}
	if diff := cmp.Diff(want, pick(scrape(t, reg, "carve_"), "carve_agent_rollout_slot_stuck")); diff != "" {
		t.Errorf("while stuck (-want +got):\n%s", diff)
	}
	h.r.Rollout = &fakeRollout{}
	observeReconcile(t, h, m, f, "small", "r1")
	if got := pick(scrape(t, reg, "carve_"), "carve_agent_rollout_slot_stuck"); len(got) != 0 {
		t.Errorf("after the slot was taken over: %v, want no series", got)
	}
}

// A halt seen on one revision of the file is not reported on the next,
// even by a node that has no disruptive change to ask a slot for.
func TestMetricsHaltEndsWithTheRevision(t *testing.T) {
	h := newHarness(t, "h100-80gb*1")
	h.r.Rollout = &fakeRollout{halted: true}
	m, reg := newTestMetrics(t)
	f := h.parse(testProfiles)
	observeReconcile(t, h, m, f, "full", "r1")
	steps := []struct {
		profile, rev string
		halted       float64
	}{
		{"small", "r1", 1},
		{"full", "r1", 1}, // nothing to ask for: the last word on r1 stands
		{"full", "r2", 0}, // a new revision has a budget of its own
	}
	for _, s := range steps {
		observeReconcile(t, h, m, f, s.profile, s.rev)
		if got := scrape(t, reg, "carve_agent_rollout_halted")["carve_agent_rollout_halted"]; got != s.halted {
			t.Errorf("%s on %s: halted %v, want %v", s.profile, s.rev, got, s.halted)
		}
	}
}

// New registers on carve-agent's registry every metric docs/monitoring.md
// lists, besides the Go and process collectors; the agent is not ready
// before it runs.
func TestNewExportsMetrics(t *testing.T) {
	cfg, _ := newAgentConfig(t, "full")
	reg := NewRegistry()
	cfg.Registerer = reg
	if _, err := New(cfg); err != nil {
		t.Fatal(err)
	}
	names, err := MetricNames(reg)
	if err != nil {
		t.Fatal(err)
	}
	var carve []string
	for _, n := range names {
		if strings.HasPrefix(n, "carve_") {
			carve = append(carve, n)
		}
	}
	want := []string{
		"carve_agent_apply_duration_seconds", "carve_agent_build_info", "carve_agent_devices_advertised", "carve_agent_devices_unhealthy",
		"carve_agent_drain_deadline_timestamp_seconds", "carve_agent_profile", "carve_agent_ready",
		"carve_agent_reconciles_total", "carve_agent_rollout_halted", "carve_agent_rollout_slot_held",
		"carve_agent_rollout_slot_stuck_seconds",
		"carve_agent_rollout_waiting", "carve_agent_state",
		"carve_device_plugin_allocation_failures_total", "carve_device_plugin_allocations_total", "carve_device_plugin_xid_events_total",
		"carve_dra_dynamic_devices", "carve_dra_largest_placeable_profile_slices", "carve_dra_prepare_duration_seconds",
		"carve_dra_prepare_failures_total", "carve_dra_unprepare_duration_seconds", "carve_dra_unprepare_failures_total",
	}
	if diff := cmp.Diff(want, carve); diff != "" {
		t.Errorf("carve's metric names (-want +got):\n%s", diff)
	}
	for _, n := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if !slices.Contains(names, n) {
			t.Errorf("%s missing: the Go and process collectors are not registered", n)
		}
	}
	if got := scrape(t, reg, "carve_agent_ready")["carve_agent_ready"]; got != 0 {
		t.Errorf("carve_agent_ready = %v before Run, want 0", got)
	}
}

// MetricLabels reads the label names of each name from its descriptions,
// variable and constant ones, each name once.
func TestMetricLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		prometheus.NewCounterVec(prometheus.CounterOpts{Name: "a_total", Help: "h"}, []string{"y", "x"}),
		prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h_seconds", Help: "h"}),
		prometheus.NewGauge(prometheus.GaugeOpts{Name: "c", Help: "h", ConstLabels: prometheus.Labels{"k": "1"}}),
		prometheus.NewGauge(prometheus.GaugeOpts{Name: "c", Help: "h", ConstLabels: prometheus.Labels{"k": "2"}}),
	)
	got, err := MetricLabels(reg)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"a_total": {"x", "y"}, "h_seconds": {}, "c": {"k"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// MetricNames reads names from descriptions: vectors without series,
// histograms, summaries, functions and constant labels, each name once;
// an invalid description is an error.
func TestMetricNames(t *testing.T) {
	tests := []struct {
		name    string
		cs      []prometheus.Collector
		want    []string
		wantErr string
	}{
		{"vector without series", []prometheus.Collector{
			prometheus.NewCounterVec(prometheus.CounterOpts{Name: "a_total", Help: "h"}, []string{"x", "y"}),
		}, []string{"a_total"}, ""},
		{"histogram, summary vector, gauge function", []prometheus.Collector{
			prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h_seconds", Help: "h"}),
			prometheus.NewSummaryVec(prometheus.SummaryOpts{Name: "s_seconds", Help: "h"}, []string{"op"}),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "g", Help: "h"}, func() float64 { return 1 }),
		}, []string{"g", "h_seconds", "s_seconds"}, ""},
		{"one name, two constant labels", []prometheus.Collector{
			prometheus.NewGauge(prometheus.GaugeOpts{Name: "c", Help: "h", ConstLabels: prometheus.Labels{"k": "1"}}),
			prometheus.NewGauge(prometheus.GaugeOpts{Name: "c", Help: "h", ConstLabels: prometheus.Labels{"k": "2"}}),
		}, []string{"c"}, ""},
		{"nothing", nil, []string{}, ""},
		{"invalid description", []prometheus.Collector{
			prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "d", Help: "h"}, []string{"__reserved"}),
		}, nil, "__reserved"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A registry refuses an invalid description: describe the
			// collectors unregistered then.
			var c prometheus.Collector = multiCollector(tt.cs)
			if tt.wantErr == "" {
				reg := prometheus.NewRegistry()
				reg.MustRegister(tt.cs...)
				c = reg
			}
			got, err := MetricNames(c)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// multiCollector describes and collects several collectors, unregistered.
type multiCollector []prometheus.Collector

func (m multiCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m {
		c.Describe(ch)
	}
}

func (m multiCollector) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m {
		c.Collect(ch)
	}
}

// carve_agent_ready follows Ready (/readyz) as the agent runs: 0 before
// its first reconcile, 1 after; with Advertise none there is no device
// health to report.
func TestReadyMetricOfARunningAgent(t *testing.T) {
	cfg, _ := newAgentConfig(t, "full")
	cfg.Advertise, cfg.PodResourcesSocket = AdvertiseNone, PodResourcesNone
	reg := NewRegistry()
	cfg.Registerer = reg
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := pick(scrape(t, reg, "carve_"), "carve_agent_ready", "carve_agent_devices_unhealthy"); !cmp.Equal(got, map[string]float64{"carve_agent_ready": 0}) {
		t.Fatalf("before Run: %v, want ready 0 and no unhealthy series", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !a.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("the agent did not become ready in 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	want := map[string]float64{"carve_agent_ready": 1, `carve_agent_profile{profile="full",source="label"}`: 1}
	if diff := cmp.Diff(want, pick(scrape(t, reg, "carve_"), "carve_agent_ready", "carve_agent_devices_unhealthy", "carve_agent_profile")); diff != "" {
		t.Errorf("once ready (-want +got):\n%s", diff)
	}
}

// A node nothing selects is reported with source adopted; a rejected file
// (no selection, state failed) with source none.
func TestMetricsProfileSourceAdopted(t *testing.T) {
	m, reg := newTestMetrics(t)
	none := configs.Selection{Source: configs.SourceNone, Rule: -1}
	m.observe(Result{State: carvev1.StateAdopted, Selection: none}, nil)
	want := map[string]float64{`carve_agent_profile{profile="",source="adopted"}`: 1}
	if diff := cmp.Diff(want, pick(scrape(t, reg, "carve_"), "carve_agent_profile")); diff != "" {
		t.Errorf("adopted node (-want +got):\n%s", diff)
	}
	m.observe(Result{State: carvev1.StateFailed, Selection: none}, nil)
	want = map[string]float64{`carve_agent_profile{profile="",source="none"}`: 1}
	if diff := cmp.Diff(want, pick(scrape(t, reg, "carve_"), "carve_agent_profile")); diff != "" {
		t.Errorf("rejected file (-want +got):\n%s", diff)
	}
}

// TestDRACountsXIDs: with --advertise dra the driver's XID watch counts
// its events in carve_device_plugin_xid_events_total, as the device
// plugin's does; both values exist before the first XID.
func TestDRACountsXIDs(t *testing.T) {
	cfg, _ := newAgentConfig(t, "full")
	m := cfg.GPUs.(*sim.Machine)
	reg := NewRegistry()
	cfg.Registerer, cfg.Advertise = reg, AdvertiseDRA
	cfg.KubeletRootDir, cfg.CDIDir = t.TempDir(), t.TempDir()
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const metric = "carve_device_plugin_xid_events_total"
	want := map[string]float64{metric + `{critical="false"}`: 0, metric + `{critical="true"}`: 0}
	if diff := cmp.Diff(want, scrape(t, reg, metric)); diff != "" {
		t.Fatalf("before any XID (-want +got):\n%s", diff)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- a.driver.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-ran; err != nil {
			t.Error(err)
		}
	}()
	// The watch may not have its event set yet: raise until counted.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		for _, xid := range []uint64{13, 79} {
			if err := m.RaiseXID(0, xid, -1, -1); err != nil {
				t.Fatal(err)
			}
		}
		got := scrape(t, reg, metric)
		if got[metric+`{critical="false"}`] > 0 && got[metric+`{critical="true"}`] > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("XIDs 13 and 79 never counted: %v", got)
		}
	}
}
