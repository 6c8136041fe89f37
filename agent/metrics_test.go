package agent

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/carve-dev/carve/timeslice"
)

// metricValue returns the value of the counter or gauge with one label set to value, or -1.
func metricValue(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					switch {
					case m.Counter != nil:
						return m.GetCounter().GetValue()
					case m.Gauge != nil:
						return m.GetGauge().GetValue()
					}
				}
			}
		}
	}
	return -1
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewMetrics(reg); err == nil {
		t.Fatal("registering twice succeeded")
	}
	res := Result{State: StateDraining, OpsApplied: 3, ApplyDuration: time.Second, Resources: timeslice.Resources{
		"nvidia.com/mig-1g.10gb": make([]timeslice.Device, 4),
		"nvidia.com/gpu":         make([]timeslice.Device, 1),
	}}
	m.observe(res, nil)
	m.observe(Result{}, errors.New("NVML away"))
	res.State, res.Resources = StateSuccess, timeslice.Resources{"nvidia.com/gpu": make([]timeslice.Device, 2)}
	m.observe(res, nil)

	tests := []struct {
		name, label, value string
		want               float64
	}{
		{"carve_agent_reconciles_total", "result", "draining", 1},
		{"carve_agent_reconciles_total", "result", "success", 1},
		{"carve_agent_reconciles_total", "result", "error", 1},
		{"carve_agent_state", "state", "success", 1},
		{"carve_agent_state", "state", "draining", 0},
		{"carve_agent_devices_advertised", "resource", "nvidia.com/gpu", 2},
		{"carve_agent_devices_advertised", "resource", "nvidia.com/mig-1g.10gb", -1}, // gone
	}
	for _, tt := range tests {
		if got := metricValue(t, reg, tt.name, tt.label, tt.value); got != tt.want {
			t.Errorf("%s{%s=%q} = %v, want %v", tt.name, tt.label, tt.value, got, tt.want)
		}
	}
	var nilMetrics *Metrics
	nilMetrics.observe(res, nil) // records nothing, does not panic
}
