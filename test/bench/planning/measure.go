package planning

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/carve-dev/carve/partition"
)

// maxSamples bounds the samples of one series.
const maxSamples = 20000

// series is the measurements of one planner on one case.
type series struct {
	// times are the wall times of single plans of the whole node.
	times []time.Duration
	// bytes and allocs are allocated per plan.
	bytes, allocs float64
	// dnf is set when the planner ran out of its budget.
	dnf bool
}

// outcome is what was measured on one case.
type outcome struct {
	carve, brute series
	// plan is carve's plan; found the brute force's answer (its counters
	// from the first run).
	plan  partition.NodePlan
	found bruteResult
}

// planners are the two closures a case times.
type planners struct {
	carve func() error
	brute func() (bruteResult, error)
}

func newPlanners(ctx context.Context, in input, budget time.Duration) planners {
	return planners{
		carve: func() error { _, err := in.plan(); return err },
		brute: func() (bruteResult, error) { return bruteNode(ctx, in.node, in.targets, in.inUse, budget) },
	}
}

// measure plans the input with carve and with the brute force, alternating
// one plan of each (which goes first alternates too) for sampleTime, then
// measures the memory each allocates per plan.
func measure(ctx context.Context, in input, budget, sampleTime time.Duration) (outcome, error) {
	var out outcome
	var err error
	if out.plan, err = in.plan(); err != nil {
		return out, fmt.Errorf("carve's planner: %w", err)
	}
	p := newPlanners(ctx, in, budget)
	out.found, err = p.brute()
	var be *budgetError
	switch {
	case errors.As(err, &be):
		out.brute.dnf = true
	case err != nil:
		return out, err
	}
	if err := out.sample(ctx, p, sampleTime); err != nil {
		return out, err
	}
	out.carve.bytes, out.carve.allocs, err = memory(len(out.carve.times), p.carve)
	if err != nil || out.brute.dnf {
		return out, err
	}
	out.brute.bytes, out.brute.allocs, err = memory(len(out.brute.times), func() error { _, err := p.brute(); return err })
	return out, err
}

// sample times single plans, interleaved, until sampleTime is spent (at
// least three of each) or maxSamples are taken.
func (o *outcome) sample(ctx context.Context, p planners, sampleTime time.Duration) error {
	end := time.Now().Add(sampleTime)
	for i := 0; len(o.carve.times) < maxSamples && (i < 3 || time.Now().Before(end)); i++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("sampling: %w", err)
		}
		first, second := o.timeCarve, o.timeBrute
		if i%2 == 1 {
			first, second = second, first
		}
		if err := first(p); err != nil {
			return err
		}
		if err := second(p); err != nil {
			return err
		}
	}
	return nil
}

func (o *outcome) timeCarve(p planners) error {
	start := time.Now()
	if err := p.carve(); err != nil {
		return fmt.Errorf("carve's planner: %w", err)
	}
	o.carve.times = append(o.carve.times, time.Since(start))
	return nil
}

func (o *outcome) timeBrute(p planners) error {
	if o.brute.dnf {
		return nil
	}
	start := time.Now()
	_, err := p.brute()
	var be *budgetError
	switch {
	case errors.As(err, &be):
		o.brute.dnf = true
		return nil
	case err != nil:
		return err
	}
	o.brute.times = append(o.brute.times, time.Since(start))
	return nil
}

// memory runs f a tenth as many times as it was sampled (1 to 200) and
// returns the bytes and allocations per run, from the runtime's
// cumulative counters.
func memory(samples int, f func() error) (bytes, allocs float64, err error) {
	n := min(max(samples/10, 1), 200)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		if err := f(); err != nil {
			return 0, 0, err
		}
	}
	runtime.ReadMemStats(&after)
	return float64(after.TotalAlloc-before.TotalAlloc) / float64(n), float64(after.Mallocs-before.Mallocs) / float64(n), nil
}
