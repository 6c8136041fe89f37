package agent

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	carvev1 "github.com/carve-dev/carve/api/v1"
)

// Metrics are the agent's Prometheus metrics. The device plugin registers
// its own (allocations, XIDs) on the same registry.
type Metrics struct {
	reconciles    *prometheus.CounterVec
	applyDuration prometheus.Histogram
	devices       *prometheus.GaugeVec
	state         *prometheus.GaugeVec
}

// NewMetrics creates the metrics and registers them on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "carve_agent_reconciles_total",
			Help: "Reconciles by result: the node state they ended in, or error when they could not finish.",
		}, []string{"result"}),
		applyDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "carve_agent_apply_duration_seconds",
			Help:    "Time the NVML operations of one repartition took.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 12),
		}),
		devices: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "carve_agent_devices_advertised",
			Help: "Devices advertised to the kubelet, replicas counted, per resource.",
		}, []string{"resource"}),
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "carve_agent_state",
			Help: "1 for the node's current state (carve.dev/state), 0 for the others.",
		}, []string{"state"}),
	}
	for _, c := range []prometheus.Collector{m.reconciles, m.applyDuration, m.devices, m.state} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register agent metrics: %w", err)
		}
	}
	return m, nil
}

// allStates lists the values of carve.dev/state.
func allStates() []string {
	return []string{carvev1.StateSuccess, carvev1.StatePending, carvev1.StateDraining, carvev1.StateApplying, carvev1.StateFailed, carvev1.StateRebootRequired}
}

// observe records one reconcile; a nil Metrics records nothing.
func (m *Metrics) observe(res Result, err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.reconciles.WithLabelValues("error").Inc()
		return
	}
	m.reconciles.WithLabelValues(res.State).Inc()
	if res.OpsApplied > 0 {
		m.applyDuration.Observe(res.ApplyDuration.Seconds())
	}
	m.devices.Reset()
	for name, n := range res.Resources.Counts() {
		m.devices.WithLabelValues(name).Set(float64(n))
	}
	for _, s := range allStates() {
		v := 0.0
		if s == res.State {
			v = 1
		}
		m.state.WithLabelValues(s).Set(v)
	}
}
