// Package reconfig measures the reconfiguration work of `make bench`
// (BENCH=reconfig): on each transition of carve's reference suite
// (internal/transitions), the NVML calls carve's planner makes beside those
// of the wipe-and-recreate strategy NVIDIA's mig-parted applies (Wipe),
// both run on simulated GPUs (partition/sim) and checked to reach the
// target, with the instances each destroys only to rebuild them and the
// time the calls take on hardware at `--sim-latency realistic`.
//
// Nothing here is timed: the figures are counts and sums of per-call
// durations, the same on every run and every machine.
package reconfig

import (
	"context"
	"fmt"
	"io"

	"github.com/carve-dev/carve/internal/transitions"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/test/bench/report"
)

// Command measures this package's tables on their own.
const Command = "make bench BENCH=reconfig"

// Options configure Run.
type Options struct {
	// Short is the short mode `make test` runs. The suite runs in memory
	// in about a second, so the short mode measures all of it too.
	Short bool
	// Log receives a progress line per transition; nil discards them.
	Log io.Writer
	// Transitions are the transitions to measure; nil means the whole
	// reference suite (transitions.Suite).
	Transitions []transitions.Transition
}

// Run measures every transition and returns two tables: one row per
// transition (carve's calls, the wipe's, their ratio, the instances each
// destroyed that it then rebuilt as they were, and the time of the calls on
// hardware), and the same work summed by kind of call. It returns an error
// instead when a plan or the wipe does not reach the target on the
// simulator, or when carve destroys an instance its end geometry holds
// again.
func Run(ctx context.Context, o Options) ([]report.Table, error) {
	log := o.Log
	if log == nil {
		log = io.Discard
	}
	suite := o.Transitions
	if suite == nil {
		suite = transitions.Suite()
	}
	lat := sim.RealisticLatency()
	results := make([]result, 0, len(suite))
	for i, tr := range suite {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("reconfig: %w", err)
		}
		r, err := measure(ctx, tr, lat)
		if err != nil {
			return nil, fmt.Errorf("reconfig: %s: %w", tr.Name(), err)
		}
		fmt.Fprintf(log, "reconfig: %d/%d %s: carve %d calls, wipe %d calls\n",
			i+1, len(suite), tr.Name(), r.carve.total, r.wipe.total)
		results = append(results, r)
	}
	return []report.Table{transitionTable(results), kindTable(results, lat)}, nil
}
