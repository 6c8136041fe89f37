// Package memory measures carve-agent's resident memory (`make bench
// BENCH=memory`): the carve-agent binary runs on the local cluster's node
// with a simulated DGX H100, idle on whole GPUs, after a few repartitions,
// and at 896 devices (8 GPUs x 7 MIG 1g.10gb x 16 replicas), then again
// with --advertise dra, idle and dense; its RSS is read from /proc and
// broken down into the binary mapped, the Go heap, stacks and the
// runtime's own. Beside it, in the same run, three floor programs do the
// least any Go node agent does (one informer on its Node, one gRPC server
// on a unix socket): with client-go's clientset (./floor), with a client
// of core/v1 only (./floor-narrow), and with the clientset and the DRA
// kubelet plugin library (./floor-dra).
package memory

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/carve-dev/carve/test/bench/report"
	"github.com/carve-dev/carve/test/cluster"
)

// Options configure Run.
type Options struct {
	// Cluster is the running local cluster whose node the agent owns
	// (required). Run leaves it as it found it: agent stopped, profile
	// ConfigMap deleted, node labels and annotation reset.
	Cluster *cluster.Cluster
	// Agent is the carve-agent binary to measure, built as `make build`
	// builds it (required).
	Agent string
	// Short is the mode `make test` runs: shorter idle periods and fewer
	// repartitions, the same code paths.
	Short bool
	// Log receives progress lines; nil discards them.
	Log io.Writer
	// WorkDir holds the run's files (simulator state, logs, the floor
	// program); empty makes a temporary directory, removed at the end.
	WorkDir string
}

// Goal is the goal for carve-agent's RSS, and Before the figure
// measured before the work on it (the issue's): a simulated DGX H100 with
// 8 whole GPUs after a few repartitions.
const (
	Goal   = 40 << 20
	Before = 64 << 20
)

// Run measures carve-agent's memory and returns its tables, each with a
// baseline column and a ratio column.
func Run(ctx context.Context, o Options) ([]report.Table, error) {
	res, err := Measure(ctx, o)
	if err != nil {
		return nil, err
	}
	tables := Tables(res, o.Short)
	for _, t := range tables {
		if err := t.Check(); err != nil {
			return nil, fmt.Errorf("memory: %w", err)
		}
	}
	return tables, nil
}

// Measure runs the agent and the floor program and returns the readings.
func Measure(ctx context.Context, o Options) (res Result, err error) {
	if o.Cluster == nil || o.Agent == "" {
		return res, errors.New("memory: Options.Cluster and Options.Agent are required")
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.WorkDir == "" {
		dir, err := os.MkdirTemp("", "carve-bench-memory-")
		if err != nil {
			return res, fmt.Errorf("memory: %w", err)
		}
		defer func() { _ = os.RemoveAll(dir) }()
		o.WorkDir = dir
	}
	start := time.Now()
	m := &measurer{o: o, c: o.Cluster, cs: o.Cluster.Clientset(), settle: 10 * time.Second, repartitions: 4}
	if o.Short {
		m.settle, m.repartitions = 2*time.Second, 2
	}
	if err := m.cleanNode(ctx); err != nil {
		return res, fmt.Errorf("memory: before the run: %w", err)
	}
	defer func() {
		if cerr := m.cleanNode(context.WithoutCancel(ctx)); cerr != nil {
			err = errors.Join(err, fmt.Errorf("memory: after the run: %w", cerr))
		}
	}()
	res, err = m.measure(ctx)
	if err != nil {
		return res, fmt.Errorf("memory: %w", err)
	}
	res.Took = time.Since(start)
	m.logf("done in %s", res.Took.Round(100*time.Millisecond))
	return res, nil
}
