// Package planning measures carve's planner (partition.PlanNode) as nodes
// grow, on GPUs read from simulated machines, against an exhaustive
// brute-force search for the plan with the fewest operations: the
// "planning cost" figure of `make bench` (make bench BENCH=planning).
package planning

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/test/bench/report"
)

// Options configure Run.
type Options struct {
	// Short is the mode `make test` runs: a few samples per case, the
	// same cases and code paths.
	Short bool
	// Log receives progress lines; nil discards them.
	Log io.Writer
	// Budget bounds one brute-force plan of a node; past it the cell says
	// the search did not finish. 0 means 10 s, or 1 s in short mode.
	Budget time.Duration
	// SampleTime is how long each case is sampled, carve and the brute
	// force taking turns. 0 means 8 s, or 20 ms in short mode.
	SampleTime time.Duration
	// GPUs are the node sizes measured; nil means 1, 8 and 64.
	GPUs []int
}

// withDefaults fills the zero fields.
func (o Options) withDefaults() Options {
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Budget == 0 {
		o.Budget = 10 * time.Second
		if o.Short {
			o.Budget = time.Second
		}
	}
	if o.SampleTime == 0 {
		o.SampleTime = 8 * time.Second
		if o.Short {
			o.SampleTime = 20 * time.Millisecond
		}
	}
	if o.GPUs == nil {
		o.GPUs = []int{1, 8, 64}
	}
	return o
}

// Run measures the time and memory of one plan of a whole node by carve's
// planner and by the brute force, for a typical change and for the
// hardest inputs of carve's planner, at each node size, and returns one
// table with a baseline and a ratio column.
func Run(ctx context.Context, o Options) ([]report.Table, error) {
	o = o.withDefaults()
	t := newTable()
	var rows []row
	for _, sc := range scenarios() {
		for _, n := range o.GPUs {
			r, err := runCase(ctx, sc, n, o)
			if err != nil {
				return nil, fmt.Errorf("planning, %s on %s: %w", sc.name, gpus(n), err)
			}
			fmt.Fprintf(o.Log, "planning: %s, %s: carve %s, brute force %s\n", sc.name, gpus(n), r.carveCell(), r.bruteCell(o.Budget))
			rows = append(rows, r)
		}
	}
	t.Rows = cells(rows, o.Budget)
	t.Notes = notes(rows, o)
	t.Goals = goals(rows)
	if err := t.Check(); err != nil {
		return nil, fmt.Errorf("planning: %w", err)
	}
	return []report.Table{t}, nil
}

// runCase builds the simulated node of one case and measures it.
func runCase(ctx context.Context, sc scenario, n int, o Options) (row, error) {
	in, err := buildInput(sc.model, sc.layouts(n), sc.target)
	if err != nil {
		return row{}, err
	}
	out, err := measure(ctx, in, o.Budget, o.SampleTime)
	if err != nil {
		return row{}, err
	}
	r := row{name: sc.name, gpus: n, out: out}
	r.carveOps, r.carveBlocked, r.carveKept = carveWork(in, out.plan)
	return r, nil
}

// carveWork sums carve's plan: the ops of the GPUs not blocked, the
// blocked GPUs, and the kept sets its search builds. The planner has no
// counter; the kept sets follow from its documented search: one when it
// keeps every keepable instance, else every subset of them (2^k).
func carveWork(in input, p partition.NodePlan) (ops, blocked, keptSets int) {
	for _, gp := range p.GPUs {
		if gp.IsBlocked() {
			blocked++
		}
		ops += len(gp.Ops)
		keptSets += carveKeptSets(in, gp)
	}
	return ops, blocked, keptSets
}

// carveKeptSets returns the kept sets carve's planner builds for one GPU.
func carveKeptSets(in input, gp partition.GPUPlan) int {
	t, m := in.targets[gp.Index], in.node.Models[gp.Index]
	g, ok := gpuByIndex(in.node.GPUs, gp.Index)
	if !ok || !g.MIGCapable || g.MIGMode != partition.MIGEnabled || !t.MIGEnabled() {
		return 0
	}
	keepable := 0
	for _, inst := range g.Instances {
		e := resolve(m, inst, nil)
		if e.profile >= 0 && e.placed && t.MIG[m.Profiles[e.profile].Name] > 0 {
			keepable++
		}
	}
	keepable = min(keepable, 16)
	kept := 0
	for _, pi := range gp.Instances {
		if pi.Status != partition.StatusNew {
			kept++
		}
	}
	if kept == keepable {
		return 1
	}
	return 1 << keepable
}

// gpuByIndex finds a GPU by index.
func gpuByIndex(gpus []partition.GPU, index int) (partition.GPU, bool) {
	for _, g := range gpus {
		if g.Index == index {
			return g, true
		}
	}
	return partition.GPU{}, false
}
