package agent

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/internal/buildinfo"
	"github.com/carve-dev/carve/plugin"
	"github.com/carve-dev/carve/timeslice"
)

// ResultError is the result label of carve_agent_reconciles_total for a
// reconcile that could not finish.
const ResultError = "error"

// ReconcileResults returns every value of the result label of
// carve_agent_reconciles_total: the states a reconcile ends in, and
// ResultError.
func ReconcileResults() []string {
	return append(carvev1.States(), ResultError)
}

// Metrics are the agent's Prometheus metrics. The device plugin registers
// its own (allocations, XIDs) on the same registry. docs/monitoring.md
// lists them all; charts/carve/files holds the dashboard and alerts built
// on them.
type Metrics struct {
	reconciles    *prometheus.CounterVec
	applyDuration prometheus.Histogram
	devices       *prometheus.GaugeVec
	state         *prometheus.GaugeVec
	profile       *prometheus.GaugeVec
	slotHeld      prometheus.Gauge
	waiting       prometheus.Gauge
	halted        prometheus.Gauge
	drainDeadline prometheus.Gauge
	stuck         *prometheus.GaugeVec
	buildInfo     *prometheus.GaugeVec
	live          *liveCollector
	dra           *draMetrics

	// The series last set, so that the next reconcile deletes only those
	// that went: a scrape never sees a vector emptied halfway. Only the
	// reconciling goroutine touches them.
	lastResources []string
	lastProfile   []string
	lastStuck     [][2]string
}

// NewMetrics creates the metrics and registers them on reg; build is the
// agent's, for carve_agent_build_info. Series whose labels are known in
// advance (every state, every reconcile result) start at 0, so that rate()
// and alerts work from the first scrape.
func NewMetrics(reg prometheus.Registerer, build buildinfo.Info) (*Metrics, error) {
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	m := &Metrics{
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "carve_agent_reconciles_total",
			Help: "Reconciles by result: the node state they ended in, or error when they could not finish.",
		}, []string{"result"}),
		applyDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "carve_agent_apply_duration_seconds",
			Help:    "Time the NVML operations of one repartition took; its _count counts the repartitions that ran NVML operations.",
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
		profile: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "carve_agent_profile",
			Help: "1 for the profile in force and how it was selected (source label, window, rule or default); profile \"\" with source adopted when no profile selects the node (its GPUs are adopted as they are), with source none when the profile file is rejected.",
		}, []string{"profile", "source"}),
		slotHeld:      gauge("carve_agent_rollout_slot_held", "1 while this node holds a rollout slot for a disruptive change, else 0."),
		waiting:       gauge("carve_agent_rollout_waiting", "1 while disruptive changes on this node wait for a rollout slot (none free, the rollout halted, or the rollout Leases unreadable), else 0."),
		halted:        gauge("carve_agent_rollout_halted", "1 when the rollout of the profile file's current revision is halted (its failure budget spent), as this node last learnt it, else 0."),
		drainDeadline: gauge("carve_agent_drain_deadline_timestamp_seconds", "Unix time at which the drain of the change that devices in use block times out (or timed out: the change still waits for them); 0 when no change is blocked."),
		stuck: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "carve_agent_rollout_slot_stuck_seconds",
			Help: "For each rollout slot this agent found stuck when it last asked for one (expired, while its holder's node still records a change in progress, so it is not taken over), the seconds since the slot expired; no series while none is.",
		}, []string{"slot", "holder"}),
		buildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "carve_agent_build_info",
			Help: "Always 1; its labels are the agent's build: version, revision (source commit) and go_version.",
		}, []string{"version", "revision", "go_version"}),
		live: newLiveCollector(),
		dra:  newDRAMetrics(),
	}
	for _, c := range append([]prometheus.Collector{m.reconciles, m.applyDuration, m.devices, m.state, m.profile, m.slotHeld, m.waiting, m.halted, m.drainDeadline, m.stuck, m.buildInfo, m.live}, m.dra.collectors()...) {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register agent metrics: %w", err)
		}
	}
	for _, r := range ReconcileResults() {
		m.reconciles.WithLabelValues(r)
	}
	m.setState("")
	m.buildInfo.WithLabelValues(build.Version, build.Revision, build.GoVersion).Set(1)
	return m, nil
}

// watch makes the scrape read readiness from ready and device health from
// advertised (nil: the node has no device plugin of carve's); a nil
// Metrics watches nothing.
func (m *Metrics) watch(ready func() bool, advertised func() map[string][]plugin.AdvertisedDevice) {
	if m == nil {
		return
	}
	m.live.mu.Lock()
	defer m.live.mu.Unlock()
	m.live.ready, m.live.advertised = ready, advertised
}

// advertisedOf is mgr's Advertised; nil without a device plugin.
func advertisedOf(mgr *plugin.Manager) func() map[string][]plugin.AdvertisedDevice {
	if mgr == nil {
		return nil
	}
	return mgr.Advertised
}

// observe records one reconcile; a nil Metrics records nothing. A
// reconcile that could not finish is counted and leaves the rest as the
// last finished one set it.
func (m *Metrics) observe(res Result, err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.reconciles.WithLabelValues(ResultError).Inc()
		return
	}
	m.reconciles.WithLabelValues(res.State).Inc()
	if res.OpsApplied > 0 {
		m.applyDuration.Observe(res.ApplyDuration.Seconds())
	}
	m.setDevices(res.Resources)
	m.setState(res.State)
	m.setProfile(res.Selection, res.State)
	m.slotHeld.Set(oneIf(res.Rollout.Holding))
	m.waiting.Set(oneIf(res.Rollout.Waiting))
	m.halted.Set(oneIf(res.Rollout.Halted))
	deadline := 0.0
	if !res.DrainDeadline.IsZero() {
		deadline = float64(res.DrainDeadline.UnixMilli()) / 1000
	}
	m.drainDeadline.Set(deadline)
	m.setStuck(res.Rollout.Stuck)
}

// setStuck sets the stuck slots' series and deletes those no longer stuck.
func (m *Metrics) setStuck(stuck []StuckSlot) {
	var cur [][2]string
	for _, s := range stuck {
		m.stuck.WithLabelValues(s.Slot, s.Holder).Set(s.For.Seconds())
		cur = append(cur, [2]string{s.Slot, s.Holder})
	}
	for _, k := range m.lastStuck {
		if !slices.Contains(cur, k) {
			m.stuck.DeleteLabelValues(k[0], k[1])
		}
	}
	m.lastStuck = cur
}

// setDevices sets the devices advertised per resource and deletes the
// resources no longer advertised.
func (m *Metrics) setDevices(res timeslice.Resources) {
	counts := res.Counts()
	for name, n := range counts {
		m.devices.WithLabelValues(name).Set(float64(n))
	}
	for _, name := range m.lastResources {
		if _, ok := counts[name]; !ok {
			m.devices.DeleteLabelValues(name)
		}
	}
	m.lastResources = m.lastResources[:0]
	for name := range counts {
		m.lastResources = append(m.lastResources, name)
	}
}

// setState sets 1 for state and 0 for the others ("" sets all to 0).
func (m *Metrics) setState(state string) {
	for _, s := range carvev1.States() {
		m.state.WithLabelValues(s).Set(oneIf(s == state))
	}
}

// setProfile makes the selection, which ended a pass in state, the one
// series of carve_agent_profile.
func (m *Metrics) setProfile(sel configs.Selection, state string) {
	source := reportedSource(sel, state)
	if source == "" {
		source = configs.SourceNone
	}
	cur := []string{sel.Profile, source}
	m.profile.WithLabelValues(cur...).Set(1)
	if m.lastProfile != nil && !slices.Equal(m.lastProfile, cur) {
		m.profile.DeleteLabelValues(m.lastProfile...)
	}
	m.lastProfile = cur
}

func oneIf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// liveCollector reads at each scrape what the agent's parts know now:
// whether it is ready (/readyz), and the health of the devices its device
// plugin advertises.
type liveCollector struct {
	readyDesc, unhealthyDesc *prometheus.Desc

	mu         sync.Mutex
	ready      func() bool
	advertised func() map[string][]plugin.AdvertisedDevice
}

func newLiveCollector() *liveCollector {
	return &liveCollector{
		readyDesc: prometheus.NewDesc("carve_agent_ready",
			"1 while the agent is ready (/readyz answers 200: caches synced and a reconcile finished), else 0.", nil, nil),
		unhealthyDesc: prometheus.NewDesc("carve_agent_devices_unhealthy",
			"Devices the device plugin advertises as unhealthy after a critical XID, replicas counted, per resource; absent with --advertise none or dra (DRA taints such devices and reports them to the kubelet instead).", []string{"resource"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *liveCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.readyDesc
	ch <- c.unhealthyDesc
}

// Collect implements prometheus.Collector.
func (c *liveCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	ready, advertised := c.ready, c.advertised
	c.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(c.readyDesc, prometheus.GaugeValue, oneIf(ready != nil && ready()))
	if advertised == nil {
		return
	}
	for name, devs := range advertised() {
		n := 0
		for _, d := range devs {
			if !d.Healthy {
				n++
			}
		}
		ch <- prometheus.MustNewConstMetric(c.unhealthyDesc, prometheus.GaugeValue, float64(n), name)
	}
}

// NewRegistry returns the registry carve-agent serves on /metrics, with
// the Go runtime and process collectors. New, given it as
// Config.Registerer, adds the agent's collectors and the device plugin's;
// MetricNames lists what it then exports.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// maxProbeLabels bounds the variable labels MetricNames tries per
// description.
const maxProbeLabels = 32

// MetricNames returns the sorted names of the metric families c describes
// (a *prometheus.Registry describes everything registered on it): every
// name a scrape may show, a vector's before it has any series, unlike
// Gather. A histogram's series add _bucket, _sum and _count to its name, a
// summary's _sum and _count. Names are read through the client library's
// own exposition, not from the descriptions' text.
func MetricNames(c prometheus.Collector) ([]string, error) {
	reg, err := probeRegistry(c)
	if err != nil {
		return nil, fmt.Errorf("metric names: %w", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		return nil, fmt.Errorf("metric names: %w", err)
	}
	names := make([]string, 0, len(mfs))
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// MetricLabels returns, by metric family name, the sorted names of the
// labels of the metric families c describes, variable and constant ones
// (of a name described more than once, every description's): the labels
// a scrape shows on its series, besides a histogram's le, a summary's
// quantile and the target labels Prometheus adds. Like MetricNames it
// reads the descriptions through the client library's exposition.
func MetricLabels(c prometheus.Collector) (map[string][]string, error) {
	reg, err := probeRegistry(c)
	if err != nil {
		return nil, fmt.Errorf("metric labels: %w", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		return nil, fmt.Errorf("metric labels: %w", err)
	}
	out := map[string][]string{}
	for _, mf := range mfs {
		names := out[mf.GetName()]
		if names == nil {
			names = []string{} // a metric without labels has an empty list
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				names = append(names, lp.GetName())
			}
		}
		slices.Sort(names)
		out[mf.GetName()] = slices.Compact(names)
	}
	return out, nil
}

// probeRegistry returns a registry holding one probe metric of every
// description of c, to gather.
func probeRegistry(c prometheus.Collector) (*prometheus.Registry, error) {
	descs := make(chan *prometheus.Desc)
	go func() {
		c.Describe(descs)
		close(descs)
	}()
	var (
		probes []prometheus.Metric
		errs   []error
		seen   = map[string]bool{}
	)
	for d := range descs {
		if seen[d.String()] {
			continue
		}
		seen[d.String()] = true
		m, err := probe(d)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		probes = append(probes, m)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(probeCollector(probes)); err != nil {
		return nil, err
	}
	return reg, nil
}

// probe makes a metric of d, with as many (empty) label values as d has
// variable labels.
func probe(d *prometheus.Desc) (prometheus.Metric, error) {
	if err := d.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", d, err)
	}
	for n := range maxProbeLabels + 1 {
		if m, err := prometheus.NewConstMetric(d, prometheus.UntypedValue, 0, make([]string, n)...); err == nil {
			return m, nil
		}
	}
	return nil, fmt.Errorf("%s: more than %d variable labels", d, maxProbeLabels)
}

// probeCollector collects the probes; describing nothing, it is registered
// unchecked, so that descriptions that share a name do not clash.
type probeCollector []prometheus.Metric

// Describe implements prometheus.Collector.
func (probeCollector) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (p probeCollector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range p {
		ch <- m
	}
}
