package allocate

import (
	"context"
	"fmt"
	"time"

	"github.com/carve-dev/carve/test/bench/report"
)

// side is which server a call went to.
type side byte

const (
	carveSide side = 'c'
	stubSide  side = 's'
)

// call is one timed RPC; it returns the RPC's error.
type call func(ctx context.Context) error

// series are the timings of one case: one per call and side, and the
// order in which the calls were made.
type series struct {
	carve, stub []time.Duration
	order       []side
	// stubMap is the median time of the stub's per-call device map, alone.
	stubMap time.Duration
}

// limits bound one case: calls per side, and the time of the timed calls
// (the case ends after the pair running when it passes).
type limits struct {
	warmup, calls int
	budget        time.Duration
}

// interleave makes warmup untimed calls per side, then up to calls timed
// calls per side alternating carve, stub, carve, stub..., stopping early
// (after a whole pair) once the budget has passed.
func interleave(ctx context.Context, l limits, carve, stub call) (series, error) {
	for i := range l.warmup {
		if err := carve(ctx); err != nil {
			return series{}, fmt.Errorf("carve, warm-up call %d: %w", i+1, err)
		}
		if err := stub(ctx); err != nil {
			return series{}, fmt.Errorf("stub, warm-up call %d: %w", i+1, err)
		}
	}
	s := series{carve: make([]time.Duration, 0, l.calls), stub: make([]time.Duration, 0, l.calls), order: make([]side, 0, 2*l.calls)}
	deadline := time.Now().Add(l.budget)
	for i := range l.calls {
		if i%256 == 255 && (ctx.Err() != nil || l.budget > 0 && time.Now().After(deadline)) {
			break
		}
		d, err := timed(ctx, carve)
		if err != nil {
			return series{}, fmt.Errorf("carve, call %d: %w", i+1, err)
		}
		s.carve, s.order = append(s.carve, d), append(s.order, carveSide)
		if d, err = timed(ctx, stub); err != nil {
			return series{}, fmt.Errorf("stub, call %d: %w", i+1, err)
		}
		s.stub, s.order = append(s.stub, d), append(s.order, stubSide)
	}
	if err := ctx.Err(); err != nil {
		return series{}, fmt.Errorf("interrupted after %d calls per side: %w", len(s.carve), err)
	}
	return s, nil
}

// timed runs c once and returns how long it took.
func timed(ctx context.Context, c call) (time.Duration, error) {
	t0 := time.Now()
	err := c(ctx)
	return time.Since(t0), err
}

// row is the table row of a case: name, calls, p50 and p99 of each side,
// and the ratios carve/stub.
func (s series) row(name string) []string {
	c50, c99 := report.Percentile(s.carve, 0.50), report.Percentile(s.carve, 0.99)
	s50, s99 := report.Percentile(s.stub, 0.50), report.Percentile(s.stub, 0.99)
	return []string{
		name, fmt.Sprint(len(s.carve)),
		report.Duration(c50), report.Duration(c99),
		report.Duration(s50), report.Duration(s99),
		report.Ratio(float64(c50), float64(s50)), report.Ratio(float64(c99), float64(s99)),
	}
}

// p50 is the median of carve's calls (or the stub's), as a float.
func (s series) p50(carve bool) float64 {
	if carve {
		return float64(report.Percentile(s.carve, 0.50))
	}
	return float64(report.Percentile(s.stub, 0.50))
}
