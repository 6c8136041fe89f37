package plugin

import (
	"maps"
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/timeslice"
)

const testQuiet = 300 * time.Millisecond

// healthEnv runs a Manager with a fake NVML: GPUs 0 and 1 shared 2 ways,
// MIG devices GI 1 and 2 (2 replicas each) on GPU 2.
func healthEnv(t *testing.T, ignored []uint64, quiet time.Duration, reg prometheus.Registerer) (*env, *fakeNVML, map[string]*stubPlugin) {
	t.Helper()
	f := newFakeNVML(3)
	f.addMIG(2, 1)
	f.addMIG(2, 2)
	e := newEnv(t, Options{
		NVML:       f,
		Registerer: reg,
		Health:     HealthOptions{IgnoredXIDs: ignored, Quiet: quiet, Poll: 10 * time.Millisecond, MinBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond},
	}, true)
	res := timeslice.Resources{
		sharedRes: sharedGPUs(2, 0, 1),
		migRes:    migDevs(2, "1g.10gb", 2, 1, 2),
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

func TestHealthXIDs(t *testing.T) {
	sharedAll := allHealthy("GPU-0::0", "GPU-0::1", "GPU-1::0", "GPU-1::1")
	migAll := allHealthy("MIG-2-1::0", "MIG-2-1::1", "MIG-2-2::0", "MIG-2-2::1")
	tests := []struct {
		name    string
		ignored []uint64 // nil: defaults
		ev      partition.XIDEvent
		// want per resource the list while unhealthy; absent: no message.
		want map[string]map[string]string
	}{
		{"critical XID on a GPU", nil, partition.XIDEvent{UUID: "GPU-0", XID: 79, GIID: -1, CIID: -1},
			map[string]map[string]string{sharedRes: with(sharedAll, "Unhealthy", "GPU-0::0", "GPU-0::1")}},
		{"application XID ignored", nil, partition.XIDEvent{UUID: "GPU-1", XID: 13, GIID: -1, CIID: -1}, nil},
		{"application XID 43 ignored", nil, partition.XIDEvent{UUID: "GPU-2", XID: 43, GIID: 1, CIID: 0}, nil},
		{"XID on one MIG device", nil, partition.XIDEvent{UUID: "GPU-2", XID: 94, GIID: 1, CIID: 0},
			map[string]map[string]string{migRes: with(migAll, "Unhealthy", "MIG-2-1::0", "MIG-2-1::1")}},
		{"XID on one GPU instance, any CI", nil, partition.XIDEvent{UUID: "GPU-2", XID: 94, GIID: 2, CIID: -1},
			map[string]map[string]string{migRes: with(migAll, "Unhealthy", "MIG-2-2::0", "MIG-2-2::1")}},
		{"whole-GPU XID takes its MIG devices", nil, partition.XIDEvent{UUID: "GPU-2", XID: 48, GIID: -1, CIID: -1},
			map[string]map[string]string{migRes: with(migAll, "Unhealthy", "MIG-2-1::0", "MIG-2-1::1", "MIG-2-2::0", "MIG-2-2::1")}},
		{"unresolvable MIG instance falls back to the GPU", nil, partition.XIDEvent{UUID: "GPU-2", XID: 94, GIID: 9, CIID: 0},
			map[string]map[string]string{migRes: with(migAll, "Unhealthy", "MIG-2-1::0", "MIG-2-1::1", "MIG-2-2::0", "MIG-2-2::1")}},
		{"custom ignore list: 79 ignored", []uint64{79}, partition.XIDEvent{UUID: "GPU-0", XID: 79, GIID: -1, CIID: -1}, nil},
		{"custom ignore list: 13 critical", []uint64{79}, partition.XIDEvent{UUID: "GPU-1", XID: 13, GIID: -1, CIID: -1},
			map[string]map[string]string{sharedRes: with(sharedAll, "Unhealthy", "GPU-1::0", "GPU-1::1")}},
		{"unknown GPU changes nothing", nil, partition.XIDEvent{UUID: "GPU-7", XID: 79, GIID: -1, CIID: -1}, nil},
	}
	healthy := map[string]map[string]string{sharedRes: sharedAll, migRes: migAll}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			e, f, plugins := healthEnv(t, tt.ignored, testQuiet, reg)
			start := time.Now()
			f.events <- tt.ev
			for name, want := range tt.want {
				if got := summary(plugins[name].next(t, msgWait)); !reflect.DeepEqual(got, want) {
					t.Fatalf("%s after XID: %v, want %v", name, got, want)
				}
			}
			for name, p := range plugins {
				if _, ok := tt.want[name]; !ok {
					p.none(t, quietWait)
				}
			}
			if len(tt.want) == 0 {
				if u := e.m.Unhealthy(); len(u) != 0 && tt.ev.UUID != "GPU-7" {
					t.Errorf("Unhealthy() = %v after an ignored XID", u)
				}
				return
			}
			// Recovery after the quiet period, with a new message.
			for name := range tt.want {
				got := summary(plugins[name].next(t, msgWait))
				if !reflect.DeepEqual(got, healthy[name]) {
					t.Errorf("%s after the quiet period: %v, want all healthy", name, got)
				}
				if since := time.Since(start); since < testQuiet {
					t.Errorf("%s recovered after %v, before the quiet period %v", name, since, testQuiet)
				}
			}
			if critical := testutil.ToFloat64(e.m.metrics.xids.WithLabelValues("true")); critical != 1 {
				t.Errorf("critical XID counter %v, want 1", critical)
			}
		})
	}
}

func TestHealthQuietPeriodRestartsOnNewXID(t *testing.T) {
	const quiet = time.Second
	e, f, plugins := healthEnv(t, nil, quiet, nil)
	p := plugins[sharedRes]
	f.events <- partition.XIDEvent{UUID: "GPU-0", XID: 79, GIID: -1, CIID: -1}
	p.next(t, msgWait)
	time.Sleep(quiet / 3)
	if len(p.msgs) > 0 {
		t.Skip("machine too slow: recovered before the second XID could be sent")
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
		Health: HealthOptions{Quiet: time.Hour, Poll: 10 * time.Millisecond, MinBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond},
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
