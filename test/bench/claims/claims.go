// Package claims measures claim-to-running latency under DRA (`make bench
// BENCH=claims`): how long a pod that takes a ResourceClaim waits for a MIG
// device that carve makes when the claim is prepared (a dynamic device),
// against one carve made beforehand (a static device). The carve-agent
// binary runs on the local cluster's node with --advertise dra and two
// simulated H100s at realistic simulated latency, under a hybrid profile:
// GPU 0 static (seven 1g.10gb), GPU 1 dynamic (1g.10gb and 3g.40gb made on
// demand).
package claims

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/test/bench/report"
	"github.com/carve-dev/carve/test/cluster"
)

// Command measures this package's table on its own.
const Command = "make bench BENCH=claims"

// Latencies of the simulated GPUs: realistic for the figures to publish;
// in short mode only the two calls that make a MIG device take time, so
// that the static GPU is made in a few seconds and a dynamic device still
// costs its NVML calls.
const (
	LatencyFull  = "realistic"
	LatencyShort = "create-gi=200ms,create-ci=100ms"
)

// Samples per kind of device: full and short mode.
const (
	SamplesFull  = 10
	SamplesShort = 2
)

// Options configure Run.
type Options struct {
	// Cluster is the running local cluster whose node the agent owns
	// (required). Run leaves it as it found it: agent stopped, claims,
	// pods, DeviceClass and profile ConfigMap deleted, node reset.
	Cluster *cluster.Cluster
	// Agent is the carve-agent binary, built as `make build` builds it
	// (required).
	Agent string
	// Short is the mode `make test` runs: SamplesShort samples per kind at
	// LatencyShort; the same code paths.
	Short bool
	// Log receives progress lines; nil discards them.
	Log io.Writer
	// WorkDir holds the run's files (simulator state, agent state and
	// log); empty makes a temporary directory, removed at the end.
	WorkDir string
}

// Kind is one kind of device a claim asks for.
type Kind struct {
	// Name is the row's name ("static 1g.10gb (GPU 0, made beforehand)").
	Name string
	// GPU is the simulated GPU's index, Profile the MIG profile.
	GPU     int
	Profile string
	// Dynamic marks a device made when its claim is prepared.
	Dynamic bool
}

// Kinds are the kinds measured, the baseline first.
func Kinds() []Kind {
	return []Kind{
		{Name: "static 1g.10gb (GPU 0, made beforehand)", GPU: 0, Profile: "1g.10gb"},
		{Name: "dynamic 1g.10gb (GPU 1, made at prepare)", GPU: 1, Profile: "1g.10gb", Dynamic: true},
		{Name: "dynamic 3g.40gb (GPU 1, made at prepare)", GPU: 1, Profile: "3g.40gb", Dynamic: true},
	}
}

// Sample is one claim and pod, timed from the claim's create call.
type Sample struct {
	// Allocated is when the claim was seen allocated, Running when the
	// pod was seen Running.
	Allocated, Running time.Duration
	// Made is when the agent logged the MIG device made (dynamic devices
	// only; 0 for static ones).
	Made time.Duration
	// Device is the device allocated.
	Device string
}

// Series are the samples of one kind.
type Series struct {
	Kind    Kind
	Samples []Sample
}

// Result is what Measure read.
type Result struct {
	// Latency is the simulated GPUs' --sim-latency, Make the time its
	// create-gi and create-ci take together (the NVML calls that make a
	// MIG device), and Remove its destroy-ci and destroy-gi.
	Latency      string
	Make, Remove time.Duration
	// Series are in the order of Kinds.
	Series []Series
	// Took is how long the measurement ran.
	Took time.Duration
}

// Run measures and returns the table.
func Run(ctx context.Context, o Options) ([]report.Table, error) {
	res, err := Measure(ctx, o)
	if err != nil {
		return nil, err
	}
	tables := Tables(res, o.Short)
	for _, t := range tables {
		if err := t.Check(); err != nil {
			return nil, fmt.Errorf("claims: %w", err)
		}
	}
	return tables, nil
}

// Measure runs the agent and times the claims.
func Measure(ctx context.Context, o Options) (res Result, err error) {
	if o.Cluster == nil || o.Agent == "" {
		return res, errors.New("claims: Options.Cluster and Options.Agent are required")
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.WorkDir == "" {
		dir, err := os.MkdirTemp("", "carve-bench-claims-")
		if err != nil {
			return res, fmt.Errorf("claims: %w", err)
		}
		defer func() { _ = os.RemoveAll(dir) }()
		o.WorkDir = dir
	}
	samples := SamplesFull
	res.Latency = LatencyFull
	if o.Short {
		res.Latency, samples = LatencyShort, SamplesShort
	}
	l, err := sim.ParseLatency(res.Latency)
	if err != nil {
		return res, fmt.Errorf("claims: %w", err)
	}
	res.Make, res.Remove = l.CreateGI+l.CreateCI, l.DestroyCI+l.DestroyGI
	start := time.Now()
	m := &measurer{o: o, c: o.Cluster, cs: o.Cluster.Clientset(), latency: res.Latency, samples: samples}
	if err := m.clean(ctx); err != nil {
		return res, fmt.Errorf("claims: before the run: %w", err)
	}
	defer func() {
		if cerr := m.clean(context.WithoutCancel(ctx)); cerr != nil {
			err = errors.Join(err, fmt.Errorf("claims: after the run: %w", cerr))
		}
	}()
	if res.Series, err = m.measure(ctx); err != nil {
		return res, fmt.Errorf("claims: %w", err)
	}
	res.Took = time.Since(start)
	m.logf("done in %s", res.Took.Round(100*time.Millisecond))
	return res, nil
}
