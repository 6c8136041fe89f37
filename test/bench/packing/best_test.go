package packing

import (
	"errors"
	"testing"

	"github.com/carve-dev/carve/dra/partitionable"
	"github.com/carve-dev/carve/partition"
)

// TestBestByHand: small sequences whose optimum is worked out by hand.
func TestBestByHand(t *testing.T) {
	m, _ := partition.LookupModel("H100-80GB")
	l, err := layout(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		claims      []Claim
		best, bound int
	}{
		// A 1g placed anywhere but 0..3 leaves the 4g its place.
		{"1g then 4g", []Claim{{"1g.10gb", 0, 9}, {"4g.40gb", 1, 9}}, 2, 2},
		// Nothing fits beside a 7g, whatever the placements.
		{"1g then 7g", []Claim{{"1g.10gb", 0, 9}, {"7g.80gb", 1, 9}}, 1, 1},
		// Turning the 1g away serves the two 7g after it.
		{"1g then two 7g", []Claim{{"1g.10gb", 0, 9}, {"7g.80gb", 1, 2}, {"7g.80gb", 2, 3}}, 1, 2},
		// Two 3g fill the GPU; a 4g then fits only once one leaves, and
		// only if the one left is at 4.
		{"3g 3g, one leaves, 4g", []Claim{{"3g.40gb", 0, 9}, {"3g.40gb", 0, 2}, {"4g.40gb", 3, 9}}, 3, 3},
		// Seven 1g fill the compute slices: the eighth finds nothing.
		{"eight 1g", []Claim{{"1g.10gb", 0, 9}, {"1g.10gb", 0, 9}, {"1g.10gb", 0, 9}, {"1g.10gb", 0, 9},
			{"1g.10gb", 0, 9}, {"1g.10gb", 0, 9}, {"1g.10gb", 0, 9}, {"1g.10gb", 0, 9}}, 7, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seq := Sequence{Claims: tc.claims, Events: events(tc.claims)}
			b, err := best(seq, l, false, 1e6)
			if err != nil {
				t.Fatal(err)
			}
			r, err := best(seq, l, true, 1e6)
			if err != nil {
				t.Fatal(err)
			}
			if b != tc.best || r != tc.bound {
				t.Errorf("best %d, with refusals %d; want %d and %d", b, r, tc.best, tc.bound)
			}
		})
	}
}

// TestBestMatchesNaive: on short random sequences the brute force, which
// remembers states, finds what a plain enumeration of every choice finds,
// checked with the layout's own test of a set of placements.
func TestBestMatchesNaive(t *testing.T) {
	for _, key := range []string{"H100-80GB", "A30-24GB"} {
		m, _ := partition.LookupModel(key)
		l, err := layout(m)
		if err != nil {
			t.Fatal(err)
		}
		var mix []Share
		for _, p := range m.Profiles {
			mix = append(mix, Share{p.Name, 1})
		}
		for seed := uint64(1); seed <= 6; seed++ {
			seq, err := generate(seed, mix, 9, 1, 4)
			if err != nil {
				t.Fatal(err)
			}
			for _, refuse := range []bool{false, true} {
				got, err := best(seq, l, refuse, 1e6)
				if err != nil {
					t.Fatal(err)
				}
				if want := naive(seq, l, refuse, 0, map[int]int{}); got != want {
					t.Errorf("%s seed %d refuse %t: best %d, naive %d", key, seed, refuse, got, want)
				}
			}
		}
	}
}

// naive enumerates every choice from event i with the placements held.
func naive(seq Sequence, l *partitionable.Layout, refuse bool, i int, held map[int]int) int {
	if i == len(seq.Events) {
		return 0
	}
	e := seq.Events[i]
	if !e.Arrive {
		pl, ok := held[e.Claim]
		delete(held, e.Claim)
		v := naive(seq, l, refuse, i+1, held)
		if ok {
			held[e.Claim] = pl
		}
		return v
	}
	v, fitted := 0, false
	for pl, p := range l.Placements {
		if p.Profile.Name != seq.Claims[e.Claim].Profile {
			continue
		}
		set := []int{pl}
		for _, q := range held {
			set = append(set, q)
		}
		if !l.Allows(set) {
			continue
		}
		fitted = true
		held[e.Claim] = pl
		v = max(v, 1+naive(seq, l, refuse, i+1, held))
		delete(held, e.Claim)
	}
	if !fitted || refuse {
		v = max(v, naive(seq, l, refuse, i+1, held))
	}
	return v
}

// TestBestBudget: past its budget the brute force says so.
func TestBestBudget(t *testing.T) {
	m, _ := partition.LookupModel("H100-80GB")
	l, err := layout(m)
	if err != nil {
		t.Fatal(err)
	}
	seq, err := generate(1, []Share{{"1g.10gb", 1}}, 30, 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := best(seq, l, false, 10); !errors.Is(err, errBudget) {
		t.Errorf("err %v, want %v", err, errBudget)
	}
}
