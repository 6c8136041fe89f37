package packing

import (
	"errors"
	"fmt"
	"slices"

	"github.com/carve-dev/carve/dra/partitionable"
)

// errBudget is returned when the brute force visits more states than its
// budget.
var errBudget = errors.New("the brute force went over its budget of states")

// best returns the most claims of the sequence that one GPU of layout l
// can serve when every placement is chosen knowing the whole sequence: each
// claim, when it arrives, is given a placement of its profile that the
// counters allow beside the placements of the claims then present, and
// keeps it until it leaves; a claim that no placement fits is turned away,
// and so is one that fits when refuse is true and turning it away serves
// more later. It searches every such choice, remembering the best count
// from each (event, placements held) state, and gives up past budget
// states.
func best(seq Sequence, l *partitionable.Layout, refuse bool, budget int) (int, error) {
	b := brute{seq: seq, l: l, refuse: refuse, memo: map[string]int{}, budget: budget, used: make([]int64, len(l.Counters))}
	counter := map[string]int{}
	for i, c := range l.Counters {
		counter[c] = i
	}
	b.take = make([][]int64, len(l.Placements))
	for i, pl := range l.Placements {
		b.take[i] = make([]int64, len(l.Counters))
		for c, n := range pl.Consumes {
			b.take[i][counter[c]] = n
		}
	}
	b.capacity = make([]int64, len(l.Counters))
	for i, c := range l.Counters {
		b.capacity[i] = l.Capacity[c]
	}
	b.of = map[string][]int{}
	for i, pl := range l.Placements {
		b.of[pl.Profile.Name] = append(b.of[pl.Profile.Name], i)
	}
	for _, c := range seq.Claims {
		if len(b.of[c.Profile]) == 0 {
			return 0, fmt.Errorf("%s has no profile %s", l.Model.Key, c.Profile)
		}
	}
	b.held = map[int]int{}
	return b.from(0)
}

// brute is the state of best's search.
type brute struct {
	seq      Sequence
	l        *partitionable.Layout
	take     [][]int64 // placement -> counter -> amount
	capacity []int64
	of       map[string][]int // profile -> its placements
	used     []int64
	held     map[int]int // claim -> placement
	memo     map[string]int
	// refuse lets a claim be turned away when a placement fits.
	refuse bool
	budget int
}

// from returns the most claims served from event i on.
func (b *brute) from(i int) (int, error) {
	if i == len(b.seq.Events) {
		return 0, nil
	}
	key := b.key(i)
	if v, ok := b.memo[key]; ok {
		return v, nil
	}
	if len(b.memo) >= b.budget {
		return 0, errBudget
	}
	e := b.seq.Events[i]
	var v int
	var err error
	if !e.Arrive {
		v, err = b.depart(i, e.Claim)
	} else {
		v, err = b.arrive(i, e.Claim)
	}
	if err != nil {
		return 0, err
	}
	b.memo[key] = v
	return v, nil
}

// depart frees the claim's placement, if it has one, and goes on.
func (b *brute) depart(i, claim int) (int, error) {
	pl, ok := b.held[claim]
	if !ok {
		return b.from(i + 1)
	}
	b.put(claim, pl, -1)
	v, err := b.from(i + 1)
	b.put(claim, pl, 1)
	return v, err
}

// arrive tries each placement that fits and, where none does or refuse
// is set, turning the claim away.
func (b *brute) arrive(i, claim int) (int, error) {
	v, tried := 0, false
	for _, pl := range b.of[b.seq.Claims[claim].Profile] {
		if !b.fits(pl) {
			continue
		}
		tried = true
		b.put(claim, pl, 1)
		w, err := b.from(i + 1)
		b.put(claim, pl, -1)
		if err != nil {
			return 0, err
		}
		v = max(v, w+1)
	}
	if tried && !b.refuse {
		return v, nil
	}
	w, err := b.from(i + 1)
	if err != nil {
		return 0, err
	}
	return max(v, w), nil
}

func (b *brute) fits(pl int) bool {
	for c, n := range b.take[pl] {
		if b.used[c]+n > b.capacity[c] {
			return false
		}
	}
	return true
}

// put adds (sign 1) or removes (-1) the claim at placement pl.
func (b *brute) put(claim, pl int, sign int64) {
	for c, n := range b.take[pl] {
		b.used[c] += sign * n
	}
	if sign > 0 {
		b.held[claim] = pl
	} else {
		delete(b.held, claim)
	}
}

// key writes event i and the placements held, by claim.
func (b *brute) key(i int) string {
	pairs := make([][2]int, 0, len(b.held))
	for c, pl := range b.held {
		pairs = append(pairs, [2]int{c, pl})
	}
	slices.SortFunc(pairs, func(x, y [2]int) int { return x[0] - y[0] })
	out := fmt.Appendf(nil, "%d", i)
	for _, p := range pairs {
		out = fmt.Appendf(out, ";%d:%d", p[0], p[1])
	}
	return string(out)
}
