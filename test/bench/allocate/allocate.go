package allocate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"k8s.io/klog/v2"

	"github.com/carve-dev/carve/test/bench/report"
)

// Name is the benchmark's name: `make bench BENCH=allocate`.
const Name = "allocate"

// Calls per side and case, and the time budget of a case, in each mode.
const (
	DefaultCalls  = 20000
	DefaultBudget = 10 * time.Second
	ShortCalls    = 200
	ShortBudget   = 5 * time.Second
)

// Options configure Run.
type Options struct {
	// Short is the mode `make test` runs: few calls, the same code paths.
	Short bool
	// Log receives progress lines; nil discards them.
	Log io.Writer
	// Calls is the number of timed calls per side and case; 0 means
	// DefaultCalls (ShortCalls with Short).
	Calls int
	// Budget bounds the timed calls of one case, which stops early (with
	// fewer calls, as the table says) once it has passed; 0 means
	// DefaultBudget (ShortBudget with Short).
	Budget time.Duration
}

// limits returns the bounds of one case.
func (o Options) limits() limits {
	l := limits{warmup: 500, calls: DefaultCalls, budget: DefaultBudget}
	if o.Short {
		l = limits{warmup: 10, calls: ShortCalls, budget: ShortBudget}
	}
	if o.Calls > 0 {
		l.calls = o.Calls
	}
	if o.Budget > 0 {
		l.budget = o.Budget
	}
	return l
}

// Run measures Allocate and GetPreferredAllocation over gRPC, carve's
// device plugin against the kubelet's stub plugin serving the same devices,
// interleaved, and returns two tables (Allocate, GetPreferredAllocation),
// each with the stub's figures and the ratios carve/stub.
//
// The stub logs every call through klog: Run sends klog to a discarding
// logger while it runs and restores klog's default output (klog.ClearLogger)
// when it returns.
func Run(ctx context.Context, o Options) (_ []report.Table, err error) {
	log := o.Log
	if log == nil {
		log = io.Discard
	}
	restoreKlog := silenceKlog()
	defer restoreKlog()
	b, err := startBench(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, b.close()) }()
	cases := b.cases()
	results := make([]series, len(cases))
	for i, c := range cases {
		if results[i], err = c.measure(ctx, o.limits()); err != nil {
			return nil, err
		}
		row := results[i].row(c.name)
		fmt.Fprintf(log, "allocate: %s: %s calls each, p50 carve %s stub %s (%s), p99 carve %s stub %s (%s)\n", row[0], row[1], row[2], row[4], row[6], row[3], row[5], row[7])
	}
	return tables(cases, results, o.limits()), nil
}

// bench is the two simulated nodes with their servers.
type bench struct {
	small, big *servers
}

// The nodes: 8 whole GPUs x 4 replicas (32 devices of nvidia.com/gpu), and
// 8 GPUs x 7 MIG 1g.10gb x 16 replicas (896 of nvidia.com/mig-1g.10gb).
const (
	smallReplicas = 4
	bigProfile    = "1g.10gb"
	bigPerGPU     = 7
	bigReplicas   = 16
)

// startBench builds both nodes and starts their servers.
func startBench(ctx context.Context) (*bench, error) {
	small, err := newNode(ctx, nil, smallReplicas)
	if err != nil {
		return nil, err
	}
	b := &bench{}
	if b.small, err = startServers(ctx, small); err != nil {
		return nil, err
	}
	big, err := newNode(ctx, map[string]int{bigProfile: bigPerGPU}, bigReplicas)
	if err != nil {
		return nil, errors.Join(err, b.close())
	}
	if b.big, err = startServers(ctx, big); err != nil {
		return nil, errors.Join(err, b.close())
	}
	return b, nil
}

// close stops the servers of both nodes.
func (b *bench) close() error {
	var errs []error
	for _, s := range []*servers{b.small, b.big} {
		if s != nil {
			errs = append(errs, s.close())
		}
	}
	return errors.Join(errs...)
}

// silenceKlog sends klog to a logger that drops everything before
// formatting it, and returns what restores klog's default output.
func silenceKlog() (restore func()) {
	klog.SetSlogLogger(slog.New(slog.DiscardHandler))
	return klog.ClearLogger
}
