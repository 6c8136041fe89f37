package monitoring

import (
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"

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
// carve-agent does (agent.New on agent.NewRegistry), once with the device
// plugin and once with the DRA driver, on a simulated GPU and an API
// client that is never called, and reads the names of everything
// registered in either.
func Exported(log *slog.Logger) (Names, error) {
	out := Names{}
	for _, mode := range advertiseModes() {
		reg, done, err := agentRegistry(log, mode)
		if err != nil {
			return nil, err
		}
		names, err := agent.MetricNames(reg)
		if err != nil {
			done()
			return nil, err
		}
		mfs, err := reg.Gather()
		done()
		if err != nil {
			return nil, fmt.Errorf("gather: %w", err)
		}
		maps.Copy(out, withSuffixes(names, mfs))
	}
	return out, nil
}

// advertiseModes are the --advertise modes whose metrics are read: the
// device plugin's and the DRA driver's (none exports a subset of both).
func advertiseModes() []string {
	return []string{agent.AdvertiseDevicePlugin, agent.AdvertiseDRA}
}

// agentRegistry builds the agent as carve-agent does (agent.New with
// --advertise mode, on agent.NewRegistry), on a simulated GPU and an API
// client that is never called, and returns its registry; done shuts the
// simulated GPU down and removes the DRA driver's directories.
func agentRegistry(log *slog.Logger, mode string) (reg *prometheus.Registry, done func(), err error) {
	gpus, err := sim.New("h100-80gb*1")
	if err != nil {
		return nil, nil, fmt.Errorf("simulated GPUs: %w", err)
	}
	if err := gpus.Init(); err != nil {
		return nil, nil, fmt.Errorf("simulated GPUs: %w", err)
	}
	dir, err := os.MkdirTemp("", "carve-monitoring-")
	if err != nil {
		_ = gpus.Shutdown()
		return nil, nil, fmt.Errorf("temporary directory: %w", err)
	}
	done = func() {
		_ = gpus.Shutdown()
		_ = os.RemoveAll(dir)
	}
	client, err := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		done()
		return nil, nil, fmt.Errorf("API client: %w", err)
	}
	reg = agent.NewRegistry()
	_, err = agent.New(agent.Config{
		NodeName: "node", Client: clientset.Wrap(client), ConfigMapNamespace: "carve-system", ConfigMapName: "carve-profiles",
		GPUs: gpus, Advertise: mode, PodResourcesSocket: agent.PodResourcesNone,
		KubeletRootDir: filepath.Join(dir, "kubelet"), CDIDir: filepath.Join(dir, "cdi"),
		Registerer: reg, Logger: log,
	})
	if err != nil {
		done()
		return nil, nil, fmt.Errorf("build the agent (--advertise %s): %w", mode, err)
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
