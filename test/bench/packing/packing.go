// Package packing measures how well the scheduler packs carve's on-demand
// MIG devices: the "packing" figure of `make bench` (make bench
// BENCH=packing). Seeded random sequences of single-device claims of mixed
// MIG profiles arrive and leave on a node of dynamic GPUs; each arrival is
// allocated by the scheduler's own allocator library against the node's
// ResourceSlices, and the share of claims that found a device is compared
// between carve's slices, the same devices and counters in the order
// NVIDIA's DRA driver publishes its DynamicMIG devices, and, on one GPU,
// the best any choice of placements could do (a brute force).
//
// Nothing here is timed: the figures are counts, the same on every run.
package packing

import (
	"context"
	"fmt"
	"io"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/test/bench/report"
)

// Command measures this package's table on its own.
const Command = "make bench BENCH=packing"

// Options configure Run.
type Options struct {
	// Short is the mode `make test` runs: the same cases with fewer and
	// shorter sequences.
	Short bool
	// Log receives a progress line per case; nil discards them.
	Log io.Writer
	// Cases are the cases measured; nil means Cases(Short).
	Cases []Case
}

// Run replays every case's sequences against carve's slices and NVIDIA's
// order, and the brute force where the case asks for it, and returns one
// table.
func Run(ctx context.Context, o Options) ([]report.Table, error) {
	log := o.Log
	if log == nil {
		log = io.Discard
	}
	cases := o.Cases
	if cases == nil {
		cases = Cases(o.Short)
	}
	var results []result
	impl := ""
	for _, c := range cases {
		r, err := measure(ctx, c)
		if err != nil {
			return nil, fmt.Errorf("packing: %s: %w", c.Name(), err)
		}
		fmt.Fprintf(log, "packing: %s: carve %d, NVIDIA's order %d, best %s of %d claims\n", c.Name(), r.carve, r.nvidia, r.bestCount(), r.claims)
		if impl != "" && r.impl != impl {
			return nil, fmt.Errorf("packing: %s: the allocator picked is %s, before it was %s", c.Name(), r.impl, impl)
		}
		impl = r.impl
		results = append(results, r)
	}
	t := table(results, impl)
	if err := t.Check(); err != nil {
		return nil, fmt.Errorf("packing: %w", err)
	}
	return []report.Table{t}, nil
}

// Case is one node and one kind of traffic.
type Case struct {
	// Model is the GPUs' catalogue key; GPUs how many the node has, all
	// dynamic.
	Model string
	GPUs  int
	// Mix are the profiles claims ask for, with their weights; MixName
	// names the mix in the table.
	MixName string
	Mix     []Share
	// Claims is the number of claims of one sequence; Seeds seed one
	// sequence each.
	Claims int
	Seeds  []uint64
	// MaxLife is the longest a claim stays, in steps; on average GPUs
	// claims arrive a step.
	MaxLife int
	// Best runs the brute force (one GPU only), with a budget of states
	// per sequence.
	Best       bool
	BestBudget int
}

// Name is "H100-80GB x1, mixed".
func (c Case) Name() string { return fmt.Sprintf("%s x%d, %s", c.Model, c.GPUs, c.MixName) }

// model looks the case's model up.
func (c Case) model() (partition.Model, error) {
	m, ok := partition.LookupModel(c.Model)
	if !ok {
		return partition.Model{}, fmt.Errorf("no GPU model %q in the catalogue", c.Model)
	}
	return m, nil
}
