package monitoring

import (
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/carve-dev/carve/agent"
	"github.com/carve-dev/carve/kubeclient/clientset"
	"github.com/carve-dev/carve/partition/sim"
)

// Allowed are the metric names, not carve's, that the dashboard and
// alerts may use, with the reason.
func Allowed() map[string]string {
	return map[string]string{
		"up": "Prometheus's own series of every scrape target: 0 while carve-agent cannot be scraped, when none of carve's series exist",
	}
}

// Names are the metric names a query may use: those carve-agent exports,
// with a histogram's _bucket, _sum and _count and a summary's _sum and
// _count, and the allowed ones.
type Names map[string]bool

// Has reports whether name is one of the names.
func (n Names) Has(name string) bool { return n[name] }

// Exported returns the names carve-agent exports: it builds the agent as
// carve-agent does (agent.New with the device plugin, on
// agent.NewRegistry), on a simulated GPU and an API client that is never
// called, and reads the names of everything registered.
func Exported(log *slog.Logger) (Names, error) {
	reg, done, err := agentRegistry(log)
	if err != nil {
		return nil, err
	}
	defer done()
	names, err := agent.MetricNames(reg)
	if err != nil {
		return nil, err
	}
	mfs, err := reg.Gather()
	if err != nil {
		return nil, fmt.Errorf("gather: %w", err)
	}
	return withSuffixes(names, mfs), nil
}

// agentRegistry builds the agent as carve-agent does (agent.New with the
// device plugin, on agent.NewRegistry), on a simulated GPU and an API
// client that is never called, and returns its registry; done shuts the
// simulated GPU down.
func agentRegistry(log *slog.Logger) (reg *prometheus.Registry, done func(), err error) {
	gpus, err := sim.New("h100-80gb*1")
	if err != nil {
		return nil, nil, fmt.Errorf("simulated GPUs: %w", err)
	}
	if err := gpus.Init(); err != nil {
		return nil, nil, fmt.Errorf("simulated GPUs: %w", err)
	}
	done = func() { _ = gpus.Shutdown() }
	client, err := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		done()
		return nil, nil, fmt.Errorf("API client: %w", err)
	}
	reg = agent.NewRegistry()
	_, err = agent.New(agent.Config{
		NodeName: "node", Client: clientset.Wrap(client), ConfigMapNamespace: "carve-system", ConfigMapName: "carve-profiles",
		GPUs: gpus, Advertise: agent.AdvertiseDevicePlugin, PodResourcesSocket: agent.PodResourcesNone,
		Registerer: reg, Logger: log,
	})
	if err != nil {
		done()
		return nil, nil, fmt.Errorf("build the agent: %w", err)
	}
	return reg, done, nil
}

// withSuffixes returns names, with the series names of the histograms and
// summaries among mfs, and the allowed names.
func withSuffixes(names []string, mfs []*dto.MetricFamily) Names {
	out := Names{}
	for _, n := range names {
		out[n] = true
	}
	for _, mf := range mfs {
		for s := range seriesSuffixes(mf.GetType()) {
			out[mf.GetName()+s] = true
		}
	}
	for n := range Allowed() {
		out[n] = true
	}
	return out
}

// seriesSuffixes returns the suffixes the series of a metric of type typ
// add to its name, each with the label its series add: a histogram's
// _bucket (le), _sum and _count, a summary's _sum and _count ("" for
// none); the series of a summary's own name add quantile.
func seriesSuffixes(typ dto.MetricType) map[string]string {
	switch typ {
	case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
		return map[string]string{"_bucket": "le", "_sum": "", "_count": ""}
	case dto.MetricType_SUMMARY:
		return map[string]string{"_sum": "", "_count": ""}
	default:
		return nil
	}
}

// Problem is one finding of a check: where, and what.
type Problem struct {
	// Where names the panel, variable or alert.
	Where string
	// What says what is wrong.
	What string
}

// String formats the problem for a test failure.
func (p Problem) String() string { return p.Where + ": " + p.What }
