package plugin

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// XIDCriticalValues returns the values of the critical label of
// carve_device_plugin_xid_events_total: "true" for an XID that marks
// devices unhealthy, "false" for an ignored one.
func XIDCriticalValues() []string { return []string{"true", "false"} }

// metrics are the plugin's Prometheus collectors.
type metrics struct {
	allocations *prometheus.CounterVec
	failures    *prometheus.CounterVec
	xids        *prometheus.CounterVec
}

// newMetrics creates the collectors and registers them on reg (if not nil).
// A collector already registered by an earlier Manager on the same
// registry is reused.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		allocations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "carve",
			Subsystem: "device_plugin",
			Name:      "allocations_total",
			Help:      "Container allocations the device plugin answered, by resource.",
		}, []string{"resource"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "carve",
			Subsystem: "device_plugin",
			Name:      "allocation_failures_total",
			Help:      "Allocate calls the device plugin refused, by resource.",
		}, []string{"resource"}),
		xids: newXIDEvents(),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []**prometheus.CounterVec{&m.allocations, &m.failures, &m.xids} {
		if err := register(reg, c); err != nil {
			return nil, err
		}
	}
	// Both values of critical exist from the first scrape, so that rate()
	// and alerts see the first XID.
	for _, critical := range XIDCriticalValues() {
		m.xids.WithLabelValues(critical)
	}
	return m, nil
}

// newXIDEvents is carve_device_plugin_xid_events_total, unregistered.
func newXIDEvents() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "carve",
		Subsystem: "device_plugin",
		Name:      "xid_events_total",
		Help:      "XID events seen by the health loop (device plugin or DRA driver), by whether they are critical.",
	}, []string{"critical"})
}

// register registers *c on reg, or points *c at the same collector
// registered earlier.
func register(reg prometheus.Registerer, c **prometheus.CounterVec) error {
	err := reg.Register(*c)
	if err == nil {
		return nil
	}
	if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
			*c = existing
			return nil
		}
	}
	return fmt.Errorf("register device plugin metrics: %w", err)
}

// XIDCounter registers carve_device_plugin_xid_events_total on reg (or
// reuses the one registered) and returns what counts an XID event in it,
// ignored saying whether the XID policy ignores it. The DRA driver's XID
// watch counts there too: the metric keeps its name under every
// --advertise mode that watches XIDs.
func XIDCounter(reg prometheus.Registerer) (func(ignored bool), error) {
	xids := newXIDEvents()
	if err := register(reg, &xids); err != nil {
		return nil, err
	}
	for _, critical := range XIDCriticalValues() {
		xids.WithLabelValues(critical)
	}
	return func(ignored bool) { xids.WithLabelValues(strconv.FormatBool(!ignored)).Inc() }, nil
}
