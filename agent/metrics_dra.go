package agent

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/dra"
)

// The kind label of carve_dra_prepare_duration_seconds and
// carve_dra_unprepare_duration_seconds: whether the claim had MIG devices
// made on demand for it.
const (
	ClaimKindDynamic = "dynamic"
	ClaimKindStatic  = "static"
)

// draMetrics are the DRA driver's metrics: each claim's prepare and
// unprepare (told through dra.Metrics), and, read from the driver at each
// scrape, the MIG devices made for claims and the largest profile still
// placeable on each dynamic GPU. They are registered whatever the agent
// advertises through, and have series only with --advertise dra.
type draMetrics struct {
	prepare, unprepare                 *prometheus.HistogramVec
	prepareFailures, unprepareFailures *prometheus.CounterVec
	live                               *dynamicCollector
}

// newDRAMetrics creates the DRA driver's metrics.
func newDRAMetrics() *draMetrics {
	buckets := prometheus.ExponentialBuckets(0.005, 2, 14) // 5 ms to 41 s
	return &draMetrics{
		prepare: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "carve_dra_prepare_duration_seconds",
			Help:    "Time the DRA driver took to prepare one claim (failed ones included), by kind: dynamic when MIG devices are made for it, else static.",
			Buckets: buckets,
		}, []string{"kind"}),
		unprepare: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "carve_dra_unprepare_duration_seconds",
			Help:    "Time the DRA driver took to unprepare one claim (failed ones included), by kind: dynamic when MIG devices made for it are destroyed, else static.",
			Buckets: buckets,
		}, []string{"kind"}),
		prepareFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "carve_dra_prepare_failures_total",
			Help: "Claims the DRA driver could not prepare, by reason.",
		}, []string{"reason"}),
		unprepareFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "carve_dra_unprepare_failures_total",
			Help: "Claims the DRA driver could not unprepare, by reason.",
		}, []string{"reason"}),
		live: newDynamicCollector(),
	}
}

// collectors returns what to register.
func (m *draMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.prepare, m.unprepare, m.prepareFailures, m.unprepareFailures, m.live}
}

// DRA returns what the DRA driver tells of its prepares and unprepares
// (dra.Config.Metrics); nil for a nil Metrics.
func (m *Metrics) DRA() dra.Metrics {
	if m == nil {
		return nil
	}
	return m.dra
}

// watchDRA makes the scrape read the dynamic GPUs from src (the DRA
// driver), and starts every kind of claim and every failure reason at 0;
// a nil Metrics watches nothing.
func (m *Metrics) watchDRA(src dynamicSource) {
	if m == nil || src == nil {
		return
	}
	for _, k := range []string{ClaimKindDynamic, ClaimKindStatic} {
		m.dra.prepare.WithLabelValues(k)
		m.dra.unprepare.WithLabelValues(k)
	}
	for _, r := range dra.PrepareFailures() {
		m.dra.prepareFailures.WithLabelValues(r)
	}
	for _, r := range dra.UnprepareFailures() {
		m.dra.unprepareFailures.WithLabelValues(r)
	}
	m.dra.live.mu.Lock()
	defer m.dra.live.mu.Unlock()
	m.dra.live.src = src
}

// ClaimPrepared implements dra.Metrics.
func (m *draMetrics) ClaimPrepared(dynamic bool, took time.Duration, failure string) {
	m.prepare.WithLabelValues(claimKind(dynamic)).Observe(took.Seconds())
	if failure != "" {
		m.prepareFailures.WithLabelValues(failure).Inc()
	}
}

// ClaimUnprepared implements dra.Metrics.
func (m *draMetrics) ClaimUnprepared(dynamic bool, took time.Duration, failure string) {
	m.unprepare.WithLabelValues(claimKind(dynamic)).Observe(took.Seconds())
	if failure != "" {
		m.unprepareFailures.WithLabelValues(failure).Inc()
	}
}

func claimKind(dynamic bool) string {
	if dynamic {
		return ClaimKindDynamic
	}
	return ClaimKindStatic
}

// dynamicSource is what the scrape reads of the dynamic GPUs (the DRA
// driver).
type dynamicSource interface {
	Dynamic() []dra.DynamicGPU
	MadeInstances() []dra.MadeInstance
	LargestPlaceable() ([]dra.Placeable, error)
}

var _ dynamicSource = (*dra.Driver)(nil)

// dynamicCollector reads at each scrape the MIG devices made for claims,
// per profile, and the largest profile still placeable on each dynamic
// GPU.
type dynamicCollector struct {
	devicesDesc, placeableDesc *prometheus.Desc

	mu  sync.Mutex
	src dynamicSource
}

func newDynamicCollector() *dynamicCollector {
	return &dynamicCollector{
		devicesDesc: prometheus.NewDesc("carve_dra_dynamic_devices",
			"MIG devices made for claims on dynamic GPUs and in place now, per profile; 0 for the other profiles the dynamic GPUs offer.", []string{"profile"}, nil),
		placeableDesc: prometheus.NewDesc("carve_dra_largest_placeable_profile_slices",
			"For each GPU offered as dynamic, the memory slices of the largest offered MIG profile still placeable beside the devices made there (0 when none is), that profile in the profile label (\"\" when none).", []string{"gpu", "profile"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *dynamicCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.devicesDesc
	ch <- c.placeableDesc
}

// Collect implements prometheus.Collector.
func (c *dynamicCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	src := c.src
	c.mu.Unlock()
	if src == nil {
		return
	}
	counts := map[string]int{}
	for _, g := range src.Dynamic() {
		for _, p := range offeredProfiles(g) {
			counts[p] += 0
		}
	}
	for _, mi := range src.MadeInstances() {
		if mi.Instance.State == carvev1.InstanceMade {
			counts[mi.Instance.Profile]++
		}
	}
	for p, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.devicesDesc, prometheus.GaugeValue, float64(n), p)
	}
	placeable, err := src.LargestPlaceable()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.placeableDesc, fmt.Errorf("largest placeable profile: %w", err))
		return
	}
	for _, p := range placeable {
		ch <- prometheus.MustNewConstMetric(c.placeableDesc, prometheus.GaugeValue, float64(p.MemorySlices), strconv.Itoa(p.GPUIndex), p.Profile)
	}
}

// offeredProfiles returns the names of the MIG profiles g offers: its
// list, or every profile of its model.
func offeredProfiles(g dra.DynamicGPU) []string {
	if g.Profiles != nil {
		return g.Profiles
	}
	names := make([]string, 0, len(g.Model.Profiles))
	for _, p := range g.Model.Profiles {
		names = append(names, p.Name)
	}
	return names
}
