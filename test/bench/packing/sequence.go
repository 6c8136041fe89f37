package packing

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
)

// Share is one MIG profile of a mix and its weight: the chance that a
// claim asks for it is its weight over the mix's total.
type Share struct {
	Profile string
	Weight  int
}

// Claim is one single-device claim of a sequence: it asks for a device of
// Profile at step Arrive and, if it got one, frees it at step Depart.
type Claim struct {
	Profile        string
	Arrive, Depart int
}

// Event is a claim's arrival or departure.
type Event struct {
	// Claim indexes Sequence.Claims.
	Claim  int
	Arrive bool
}

// Sequence is a random run of claims and the order their arrivals and
// departures happen in.
type Sequence struct {
	Claims []Claim
	Events []Event
}

// generate draws a sequence of n claims from seed: at each step first the
// claims whose time is up leave, then a number of claims drawn uniformly
// from 0 to 2*perStep arrive, each with a profile drawn from mix and a
// lifetime drawn uniformly from 1 to maxLife steps.
func generate(seed uint64, mix []Share, n, perStep, maxLife int) (Sequence, error) {
	total := 0
	for _, s := range mix {
		if s.Weight <= 0 {
			return Sequence{}, fmt.Errorf("profile %s: weight %d, want a positive one", s.Profile, s.Weight)
		}
		total += s.Weight
	}
	if total == 0 || n <= 0 || perStep <= 0 || maxLife <= 0 {
		return Sequence{}, fmt.Errorf("no sequence from %d profiles, %d claims, %d a step, lifetimes up to %d", len(mix), n, perStep, maxLife)
	}
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	var seq Sequence
	for step := 0; len(seq.Claims) < n; step++ {
		for k := r.IntN(2*perStep + 1); k > 0 && len(seq.Claims) < n; k-- {
			seq.Claims = append(seq.Claims, Claim{Profile: pick(r, mix, total), Arrive: step, Depart: step + 1 + r.IntN(maxLife)})
		}
	}
	seq.Events = events(seq.Claims)
	return seq, nil
}

// pick draws a profile from mix, whose weights add up to total.
func pick(r *rand.Rand, mix []Share, total int) string {
	x := r.IntN(total)
	for _, s := range mix {
		if x < s.Weight {
			return s.Profile
		}
		x -= s.Weight
	}
	return mix[len(mix)-1].Profile
}

// events orders the claims' arrivals and departures by step, departures
// of a step before its arrivals, each in claim order.
func events(claims []Claim) []Event {
	type timed struct {
		Event
		step int
	}
	var all []timed
	for i, c := range claims {
		all = append(all, timed{Event{Claim: i, Arrive: true}, c.Arrive}, timed{Event{Claim: i}, c.Depart})
	}
	slices.SortStableFunc(all, func(a, b timed) int {
		if a.step != b.step {
			return cmp.Compare(a.step, b.step)
		}
		if a.Arrive != b.Arrive {
			if a.Arrive {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.Claim, b.Claim)
	})
	out := make([]Event, len(all))
	for i, t := range all {
		out[i] = t.Event
	}
	return out
}
