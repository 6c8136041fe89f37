package agent

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/timeslice"
)

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewMetrics(reg); err == nil {
		t.Fatal("registering twice succeeded")
	}
	res := Result{State: carvev1.StateDraining, OpsApplied: 3, ApplyDuration: time.Second, Resources: timeslice.Resources{
		"nvidia.com/mig-1g.10gb": make([]timeslice.Device, 4),
		"nvidia.com/gpu":         make([]timeslice.Device, 1),
	}}
	m.observe(res, nil)
	m.observe(Result{}, errors.New("NVML away"))
	res.State, res.Resources = carvev1.StateSuccess, timeslice.Resources{"nvidia.com/gpu": make([]timeslice.Device, 2)}
	m.observe(res, nil)

	// The series on the registry, before any is read below (reading a
	// child of a vector creates it).
	counts := []struct {
		name string
		want int
	}{
		{"carve_agent_reconciles_total", 3},       // draining, error, success
		{"carve_agent_apply_duration_seconds", 1}, // one histogram
		{"carve_agent_state", len(allStates())},   // one per state
		{"carve_agent_devices_advertised", 1},     // nvidia.com/mig-1g.10gb is gone
	}
	for _, c := range counts {
		got, err := testutil.GatherAndCount(reg, c.name)
		if err != nil {
			t.Fatalf("gather %s: %v", c.name, err)
		}
		if got != c.want {
			t.Errorf("%s: %d series, want %d", c.name, got, c.want)
		}
	}

	values := []struct {
		name string
		c    prometheus.Collector
		want float64
	}{
		{`carve_agent_reconciles_total{result="draining"}`, m.reconciles.WithLabelValues("draining"), 1},
		{`carve_agent_reconciles_total{result="success"}`, m.reconciles.WithLabelValues("success"), 1},
		{`carve_agent_reconciles_total{result="error"}`, m.reconciles.WithLabelValues("error"), 1},
		{`carve_agent_state{state="success"}`, m.state.WithLabelValues(carvev1.StateSuccess), 1},
		{`carve_agent_state{state="draining"}`, m.state.WithLabelValues(carvev1.StateDraining), 0},
		{`carve_agent_devices_advertised{resource="nvidia.com/gpu"}`, m.devices.WithLabelValues("nvidia.com/gpu"), 2},
	}
	for _, v := range values {
		if got := testutil.ToFloat64(v.c); got != v.want {
			t.Errorf("%s = %v, want %v", v.name, got, v.want)
		}
	}
	var nilMetrics *Metrics
	nilMetrics.observe(res, nil) // records nothing, does not panic
}
