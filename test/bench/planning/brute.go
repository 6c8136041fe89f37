package planning

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/carve-dev/carve/partition"
)

// budgetError says that a brute-force search ran out of time.
type budgetError struct{ budget time.Duration }

func (e *budgetError) Error() string {
	return fmt.Sprintf("brute force did not finish in %s", e.budget)
}

// bruteResult is what the brute force found for a node and how much it
// searched.
type bruteResult struct {
	// plans are the GPUs' plans, by index.
	plans []brutePlan
	// ops is the fewest operations over the GPUs that are not blocked.
	ops int
	// blocked counts the GPUs that have no plan leaving every busy device
	// as it is.
	blocked int
	// subsets counts the sets of existing instances examined as kept sets;
	// states the nodes of the placement enumeration visited.
	subsets, states int
}

// brutePlan is the brute force's plan of one GPU.
type brutePlan struct {
	index int
	// ops are the operations, in the order carve's plans run them; empty
	// when blocked.
	ops []partition.Op
	// blocked is set when every plan disturbs a device in use.
	blocked bool
}

// bruteForce is one exhaustive search of a node's plan, with its budget.
type bruteForce struct {
	ctx      context.Context
	budget   time.Duration
	deadline time.Time
	res      bruteResult
	ticks    int
}

// bruteNode finds, by exhaustive search, the plan of every GPU of a node
// with the fewest operations that destroys no device in use. The GPUs are
// searched one after the other, as they are independent. It fails with a
// *budgetError when the search takes longer than budget.
func bruteNode(ctx context.Context, n partition.Node, targets map[int]partition.Target, inUse map[string]bool, budget time.Duration) (bruteResult, error) {
	bf := &bruteForce{ctx: ctx, budget: budget, deadline: time.Now().Add(budget)}
	gpus := append([]partition.GPU(nil), n.GPUs...)
	sort.Slice(gpus, func(a, b int) bool { return gpus[a].Index < gpus[b].Index })
	for _, g := range gpus {
		p, err := bf.gpu(g, n.Models[g.Index], targets[g.Index], inUse)
		if err != nil {
			return bf.res, fmt.Errorf("GPU %d: %w", g.Index, err)
		}
		bf.res.plans = append(bf.res.plans, p)
		if p.blocked {
			bf.res.blocked++
		}
		bf.res.ops += len(p.ops)
	}
	return bf.res, nil
}

// tick counts one step of the search and, every few thousand steps, checks
// the budget and the context.
func (bf *bruteForce) tick() error {
	bf.ticks++
	if bf.ticks%4096 != 0 {
		return nil
	}
	if err := bf.ctx.Err(); err != nil {
		return fmt.Errorf("brute force: %w", err)
	}
	if time.Now().After(bf.deadline) {
		return &budgetError{budget: bf.budget}
	}
	return nil
}

// gpu returns the plan with the fewest operations that turns g into t,
// or says that every plan disturbs a device in use.
func (bf *bruteForce) gpu(g partition.GPU, m partition.Model, t partition.Target, inUse map[string]bool) (brutePlan, error) {
	p := brutePlan{index: g.Index}
	switch {
	case !g.MIGCapable && t.MIGEnabled():
		return p, fmt.Errorf("MIG target on a GPU without MIG: %w", partition.ErrNotSupported)
	case !g.MIGCapable:
		return p, nil
	case !t.MIGEnabled():
		p.ops, p.blocked = wholeGPU(g, inUse)
		return p, nil
	case len(m.Profiles) == 0:
		return p, fmt.Errorf("no MIG geometry for %s: %w", g.Model, partition.ErrCannotPlace)
	}
	s, err := newGPUSearch(bf, g, m, t.MIG, inUse)
	if err != nil {
		return p, err
	}
	if err := s.run(); err != nil {
		return p, err
	}
	switch {
	case s.bestAny < 0:
		return p, fmt.Errorf("no arrangement of the target fits: %w", partition.ErrCannotPlace)
	case s.best < 0:
		p.blocked = true
		return p, nil
	}
	p.ops = s.plan()
	return p, nil
}

// wholeGPU plans g as a whole GPU: there is nothing to choose, every
// instance goes. The plan is blocked when a device of the GPU is in use
// and the GPU must be reset.
func wholeGPU(g partition.GPU, inUse map[string]bool) ([]partition.Op, bool) {
	if g.MIGMode == partition.MIGDisabled {
		if g.PendingMIGMode != partition.MIGDisabled {
			return []partition.Op{gpuOp(partition.OpDisableMIG)}, false
		}
		return nil, false
	}
	blocked := inUse[g.UUID]
	var ops, gis []partition.Op
	for _, in := range g.Instances {
		ops = append(ops, destroyCIs(in)...)
		gis = append(gis, destroyGI(in))
		for _, ci := range in.CIs {
			blocked = blocked || inUse[ci.UUID]
		}
	}
	ops = append(ops, gis...)
	if g.PendingMIGMode != partition.MIGDisabled {
		ops = append(ops, gpuOp(partition.OpDisableMIG))
	}
	ops = append(ops, gpuOp(partition.OpResetGPU))
	if blocked {
		return nil, true
	}
	return ops, false
}
