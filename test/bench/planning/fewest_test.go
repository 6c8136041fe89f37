package planning

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/carve-dev/carve/partition"
)

// randomCasesPerModel is how many random layouts and targets
// TestCarveMakesTheFewestOps draws per GPU model.
const randomCasesPerModel = 150

// TestCarveMakesTheFewestOps checks carve's planner against the brute
// force on every MIG model of the catalogue: for random existing layouts
// (complete, incomplete and empty GPU instances, some in use) and random
// targets that fit, carve's plan has exactly as many operations as the
// fewest the brute force finds, and blocks the same GPUs.
func TestCarveMakesTheFewestOps(t *testing.T) {
	for _, m := range partition.Catalogue() {
		key := strings.ToLower(m.Key)
		t.Run(key, func(t *testing.T) {
			cases := keepOrRepairCases(m)
			rng := rand.New(rand.NewPCG(uint64(len(key)), 28))
			for range randomCasesPerModel {
				cases = append(cases, randomCase(t, rng, m))
			}
			for c, tc := range cases {
				l, target := tc.layout, tc.target
				in, err := buildInput(key, []layout{l}, target)
				if err != nil {
					t.Fatalf("case %d, %s: %v", c, describe(l), err)
				}
				plan, err := in.plan()
				if err != nil {
					t.Fatalf("case %d (%s -> %v): carve: %v", c, describe(l), target, err)
				}
				ops, blocked, _ := carveWork(in, plan)
				found, err := bruteNode(context.Background(), in.node, in.targets, in.inUse, time.Minute)
				if err != nil {
					t.Fatalf("case %d: brute force: %v", c, err)
				}
				if diff := cmp.Diff(size{found.ops, found.blocked}, size{ops, blocked}); diff != "" {
					t.Errorf("case %d, %s -> %v: carve's plan vs the fewest ops (-brute +carve):\n%s", c, describe(l), target, diff)
				}
			}
		})
	}
}

// fewestCase is one GPU's layout and target.
type fewestCase struct {
	layout layout
	target map[string]int
}

// keepOrRepairCases are, for every profile of m larger than its smallest
// and every placement of it, a GPU whose other slices hold empty GPU
// instances of the smallest profile and whose slices at that placement hold
// one complete smallest instance, wanted as the empty ones' count of the
// smallest profile and one of the larger: keeping the complete instance
// forces the larger one elsewhere and the empty ones out, while repairing
// the empty ones and moving the complete one makes fewer operations when
// there are three empty ones or more.
func keepOrRepairCases(m partition.Model) []fewestCase {
	small := smallest(m)
	var out []fewestCase
	for _, p := range m.Profiles {
		if p.MemorySlices <= small.MemorySlices {
			continue
		}
		for _, pc := range p.Placements {
			var l layout
			complete := false
			for _, sp := range small.Placements {
				inside := sp.Start >= pc.Start && sp.Start+sp.Size <= pc.Start+pc.Size
				switch {
				case inside && !complete:
					l = append(l, instance{profile: small.Name, start: sp.Start})
					complete = true
				case !inside && sp.Start+sp.Size <= m.MemorySlices && (sp.Start+sp.Size <= pc.Start || sp.Start >= pc.Start+pc.Size):
					l = append(l, instance{profile: small.Name, start: sp.Start, slices: -1})
				}
			}
			empty := len(l) - 1
			target := map[string]int{small.Name: min(empty, small.MaxCount-1), p.Name: 1}
			if _, err := partition.Place(m, target); err == nil && complete && empty > 0 {
				out = append(out, fewestCase{l, target})
			}
		}
	}
	return out
}

// randomCase draws a layout the simulated GPU accepts (the engines of
// "+me" and "+gfx" instances limit what a GPU holds beyond the slices) and
// a target that fits.
func randomCase(t *testing.T, rng *rand.Rand, m partition.Model) fewestCase {
	t.Helper()
	key := strings.ToLower(m.Key)
	for range 100 {
		l := randomLayout(rng, m)
		target := randomTarget(rng, m, l)
		_, err := buildInput(key, []layout{l}, target)
		if err == nil {
			return fewestCase{l, target}
		}
		if !strings.Contains(err.Error(), "insufficient resources") {
			t.Fatalf("%s: %v", describe(l), err)
		}
	}
	t.Fatalf("%s: no layout the simulator accepts in 100 draws", key)
	return fewestCase{}
}

// randomLayout places random instances of m, in random order, each at a
// free placement. Each layout draws how many of its instances are
// incomplete or empty (none to most: the plans that keep them and the ones
// that keep a complete instance instead differ in operations) and in use.
func randomLayout(rng *rand.Rand, m partition.Model) layout {
	var l layout
	var used uint64
	count := map[string]int{}
	incomplete := rng.IntN(5) // in 5
	small := smallest(m)
	for range 12 {
		p := m.Profiles[rng.IntN(len(m.Profiles))]
		if rng.IntN(2) == 0 {
			p = small // many small instances: the most ways to keep some
		}
		pc := p.Placements[rng.IntN(len(p.Placements))]
		mask := uint64(1)<<(pc.Start+pc.Size) - uint64(1)<<pc.Start
		if used&mask != 0 || count[p.Name] >= p.MaxCount {
			continue
		}
		used |= mask
		count[p.Name]++
		in := instance{profile: p.Name, start: pc.Start}
		switch {
		case rng.IntN(5) < incomplete:
			in.slices = -1
			if p.ComputeSlices > 1 && rng.IntN(2) == 0 {
				in.slices = 1
			}
		case rng.IntN(6) == 0:
			in.busy = true
		}
		l = append(l, in)
	}
	return l
}

// smallest returns m's profile of the fewest memory slices without
// variants (1g.10gb on an H100-80GB).
func smallest(m partition.Model) partition.GIProfile {
	best := m.Profiles[0]
	for _, p := range m.Profiles {
		if p.MemorySlices < best.MemorySlices || p.MemorySlices == best.MemorySlices && len(p.Name) < len(best.Name) {
			best = p
		}
	}
	return best
}

// randomTarget returns random counts of m's profiles that fit on one GPU.
// Half are near the layout (its profiles, one instance fewer, one of
// another profile more), where what to keep is the question the plans
// differ by; the others are drawn freely.
func randomTarget(rng *rand.Rand, m partition.Model, l layout) map[string]int {
	for {
		want := map[string]int{}
		if len(l) > 0 && rng.IntN(2) == 0 {
			for i, in := range l {
				if i != rng.IntN(len(l)) {
					want[in.profile]++
				}
			}
			want[m.Profiles[rng.IntN(len(m.Profiles))].Name]++
		} else {
			for range 1 + rng.IntN(6) {
				want[m.Profiles[rng.IntN(len(m.Profiles))].Name]++
			}
		}
		if _, err := partition.Place(m, want); err == nil {
			return want
		}
	}
}

// describe writes a layout for failure messages.
func describe(l layout) string {
	parts := make([]string, len(l))
	for i, in := range l {
		parts[i] = fmt.Sprintf("%s@%d", in.profile, in.start)
		if in.slices != 0 {
			parts[i] += fmt.Sprintf("(slices %d)", in.slices)
		}
		if in.busy {
			parts[i] += "(busy)"
		}
	}
	return "[" + strings.Join(parts, " ") + "]"
}
