package packing

import (
	"context"
	"errors"
	"fmt"

	"github.com/carve-dev/carve/partition"
)

// result is what one case measured, summed over its sequences.
type result struct {
	c Case
	// impl is the allocator implementation picked.
	impl string
	// claims is the number of claims; carve and nvidia how many found a
	// device, best and bound how many the brute force serves without and
	// with refusals (see best).
	claims, carve, nvidia, best, bound int
	// bestDone is false where the brute force did not run or gave up.
	bestDone bool
	// load is the offered load: the compute slices the claims would hold
	// on average if all were served, over the node's.
	load float64
	// seeds holds the counts of each sequence, in Seeds' order.
	seeds []seedResult
}

// seedResult is one sequence's counts.
type seedResult struct {
	seed                  uint64
	claims, carve, nvidia int
	// best and bound are -1 where not computed.
	best, bound int
}

// bestCount writes the brute force's count, or "-".
func (r result) bestCount() string {
	if !r.bestDone {
		return "-"
	}
	return fmt.Sprintf("%d (%d with refusals)", r.best, r.bound)
}

// measure replays each of the case's sequences.
func measure(ctx context.Context, c Case) (result, error) {
	m, err := c.model()
	if err != nil {
		return result{}, err
	}
	if c.Best && c.GPUs != 1 {
		return result{}, fmt.Errorf("the brute force handles one GPU, not %d", c.GPUs)
	}
	off, carve, err := carveNode(m, c.GPUs)
	if err != nil {
		return result{}, err
	}
	nvidia, err := nvidiaSlices(off)
	if err != nil {
		return result{}, err
	}
	r := result{c: c, bestDone: c.Best, load: offeredLoad(c, m)}
	if r.impl, err = implementation(ctx, carve); err != nil {
		return result{}, err
	}
	for _, seed := range c.Seeds {
		s, err := measureSeed(ctx, c, m, seed, carve, nvidia)
		if err != nil {
			return result{}, fmt.Errorf("seed %d: %w", seed, err)
		}
		r.seeds = append(r.seeds, s)
		r.claims += s.claims
		r.carve += s.carve
		r.nvidia += s.nvidia
		if s.best < 0 || s.bound < 0 {
			r.bestDone = false
		}
		r.best += s.best
		r.bound += s.bound
	}
	return r, nil
}

// measureSeed replays one sequence against both layouts, and runs the
// brute force on it where the case asks.
func measureSeed(ctx context.Context, c Case, m partition.Model, seed uint64, carve, nvidia sliceSet) (seedResult, error) {
	seq, err := generate(seed, c.Mix, c.Claims, c.GPUs, c.MaxLife)
	if err != nil {
		return seedResult{}, err
	}
	s := seedResult{seed: seed, claims: len(seq.Claims), best: -1, bound: -1}
	for _, lay := range []struct {
		slices sliceSet
		count  *int
	}{{carve, &s.carve}, {nvidia, &s.nvidia}} {
		found, err := replay(ctx, seq, lay.slices)
		if err != nil {
			return seedResult{}, err
		}
		*lay.count = countTrue(found)
	}
	if !c.Best {
		return s, nil
	}
	l, err := layout(m)
	if err != nil {
		return seedResult{}, err
	}
	for _, b := range []struct {
		refuse bool
		into   *int
	}{{false, &s.best}, {true, &s.bound}} {
		n, err := best(seq, l, b.refuse, c.BestBudget)
		switch {
		case errors.Is(err, errBudget):
			return s, nil
		case err != nil:
			return seedResult{}, err
		}
		*b.into = n
	}
	if s.best < s.carve || s.best < s.nvidia || s.bound < s.best {
		return seedResult{}, fmt.Errorf("the brute force served %d (%d with refusals), fewer than carve's %d or NVIDIA's order's %d: it is wrong", s.best, s.bound, s.carve, s.nvidia)
	}
	return s, nil
}

func countTrue(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// offeredLoad is the mean compute slices a claim of the mix takes, times
// the claims present on average (GPUs arrivals a step, each staying
// (1+MaxLife)/2 steps), over the node's compute slices.
func offeredLoad(c Case, m partition.Model) float64 {
	var slices, weight float64
	for _, s := range c.Mix {
		if p, ok := m.Profile(s.Profile); ok {
			slices += float64(s.Weight * p.ComputeSlices)
			weight += float64(s.Weight)
		}
	}
	if weight == 0 || m.ComputeSlices == 0 {
		return 0
	}
	present := float64(c.GPUs) * float64(1+c.MaxLife) / 2
	return slices / weight * present / float64(c.GPUs*m.ComputeSlices)
}
