package partitionable

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
)

// simGPU is one simulated GPU of model m in MIG mode, with no instances:
// the hardware's placement rules, as partition/sim enforces them.
type simGPU struct {
	dev partition.Device
}

func newSimGPU(t testing.TB, m partition.Model) *simGPU {
	t.Helper()
	mach, err := sim.New(m.Key)
	if err != nil {
		t.Fatalf("sim.New(%s): %v", m.Key, err)
	}
	if err := mach.Init(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mach.Shutdown() })
	dev, err := mach.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.SetMIGMode(partition.MIGEnabled); err != nil {
		t.Fatal(err)
	}
	if err := dev.Reset(); err != nil {
		t.Fatal(err)
	}
	return &simGPU{dev: dev}
}

// create makes pl's GPU instance: its ID, or false when the GPU refuses
// for lack of room (any other error fails the test).
func (g *simGPU) create(t testing.TB, pl Placement) (int, bool) {
	t.Helper()
	gi, err := g.dev.CreateGPUInstance(pl.Profile.ID, pl.At)
	if errors.Is(err, partition.ErrInsufficientResources) {
		return 0, false
	}
	if err != nil {
		t.Fatalf("create %s at %s: %v", pl.Profile.Name, pl.At, err)
	}
	return gi.ID, true
}

func (g *simGPU) destroy(t testing.TB, id int) {
	t.Helper()
	if err := g.dev.DestroyGPUInstance(id); err != nil {
		t.Fatalf("destroy GPU instance %d: %v", id, err)
	}
}

// createAll reports whether the GPU creates every placement of set, and
// destroys what it made.
func (g *simGPU) createAll(t testing.TB, l *Layout, set []int) bool {
	t.Helper()
	var made []int
	defer func() {
		for _, id := range made {
			g.destroy(t, id)
		}
	}()
	for _, i := range set {
		id, ok := g.create(t, l.Placements[i])
		if !ok {
			return false
		}
		made = append(made, id)
	}
	return true
}

func describe(l *Layout, set []int) string {
	var parts []string
	for _, i := range set {
		parts = append(parts, l.Placements[i].Profile.Name+"@"+l.Placements[i].At.String())
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// layouts are the cases every proof runs on: every model with all its
// profiles, and some with a few.
func layouts(t testing.TB) []*Layout {
	t.Helper()
	var out []*Layout
	for _, m := range partition.Catalogue() {
		l, err := NewLayout(m, nil)
		if err != nil {
			t.Fatalf("%s: %v", m.Key, err)
		}
		out = append(out, l)
	}
	for _, c := range []struct {
		model    string
		profiles []string
	}{
		{"H100-80GB", []string{"1g.10gb", "3g.40gb", "7g.80gb"}},
		{"H100-80GB", []string{"1g.10gb+me", "1g.20gb", "4g.40gb"}},
		{"A30-24GB", []string{"1g.6gb+me", "2g.12gb+me"}},
		{"RTX-PRO-6000-96GB", []string{"1g.24gb", "1g.24gb+me.all", "2g.48gb+me.all"}},
	} {
		m, _ := partition.LookupModel(c.model)
		l, err := NewLayout(m, c.profiles)
		if err != nil {
			t.Fatalf("%s %v: %v", c.model, c.profiles, err)
		}
		out = append(out, l)
	}
	return out
}

func name(l *Layout) string {
	if len(l.Placements) == 0 {
		return l.Model.Key
	}
	seen := map[string]bool{}
	var ps []string
	for _, pl := range l.Placements {
		if !seen[pl.Profile.Name] {
			seen[pl.Profile.Name] = true
			ps = append(ps, pl.Profile.Name)
		}
	}
	if len(ps) == len(l.Model.Profiles) {
		return l.Model.Key
	}
	return l.Model.Key + "/" + strings.Join(ps, ",")
}

// TestPairs: for every model, every pair of devices the counters allow
// together the simulated GPU creates together, and every pair they refuse
// it refuses; every device alone is allowed and created.
func TestPairs(t *testing.T) {
	for _, l := range layouts(t) {
		t.Run(name(l), func(t *testing.T) {
			g := newSimGPU(t, l.Model)
			for a := range l.Placements {
				if !l.Allows([]int{a}) || !g.createAll(t, l, []int{a}) {
					t.Errorf("%s alone: counters %v, GPU %v", describe(l, []int{a}), l.Allows([]int{a}), g.createAll(t, l, []int{a}))
				}
				for b := a + 1; b < len(l.Placements); b++ {
					set := []int{a, b}
					if counters, gpu := l.Allows(set), g.createAll(t, l, set); counters != gpu {
						t.Errorf("%s: counters allow %v, the GPU creates %v", describe(l, set), counters, gpu)
					}
				}
			}
		})
	}
}

// TestCountersAreTheHardwareRules proves, for every model, that the sets
// of devices the counters allow are exactly the sets the simulated GPU
// can create. Both families are closed under taking subsets, so they are
// equal when (1) every set F, the counters' family, holds is created, and
// (2) for every set S in F and every device d outside it that the
// counters refuse beside S, the GPU refuses d beside S: a set the GPU
// creates but the counters refuse would have a smallest refused subset
// S+d with S in F, which (2) rules out. The search walks F, creating each
// set as it goes.
func TestCountersAreTheHardwareRules(t *testing.T) {
	for _, l := range layouts(t) {
		t.Run(name(l), func(t *testing.T) {
			g := newSimGPU(t, l.Model)
			sets, failures := 0, 0
			var set []int
			var walk func(from int)
			walk = func(from int) {
				sets++
				for d := range l.Placements {
					if slices.Contains(set, d) || l.Allows(append(set, d)) {
						continue
					}
					if id, ok := g.create(t, l.Placements[d]); ok {
						g.destroy(t, id)
						failures++
						if failures <= 5 {
							t.Errorf("the counters refuse %s beside %s; the GPU creates it", describe(l, []int{d}), describe(l, set))
						}
					}
				}
				for d := from; d < len(l.Placements); d++ {
					if !l.Allows(append(set, d)) {
						continue
					}
					id, ok := g.create(t, l.Placements[d])
					if !ok {
						failures++
						if failures <= 5 {
							t.Errorf("the counters allow %s beside %s; the GPU refuses it", describe(l, []int{d}), describe(l, set))
						}
						continue
					}
					set = append(set, d)
					walk(d + 1)
					set = set[:len(set)-1]
					g.destroy(t, id)
				}
			}
			walk(0)
			if failures > 0 {
				t.Fatalf("%d disagreements over %d sets", failures, sets)
			}
			t.Logf("%d sets, %d counters", sets, len(l.Counters))
		})
	}
}

// FuzzCounters: for a random set of devices of a random model, the
// counters allow the set exactly when the simulated GPU creates it.
func FuzzCounters(f *testing.F) {
	f.Add(uint8(2), uint64(0b1))
	f.Add(uint8(2), uint64(0x1FFFFFF))
	f.Add(uint8(11), uint64(0xF0F0F))
	f.Add(uint8(12), uint64(0x3C000003))
	var ls []*Layout
	var gs []*simGPU
	for _, m := range partition.Catalogue() {
		l, err := NewLayout(m, nil)
		if err != nil {
			f.Fatal(err)
		}
		ls, gs = append(ls, l), append(gs, newSimGPU(f, m))
	}
	f.Fuzz(func(t *testing.T, model uint8, bits uint64) {
		l, g := ls[int(model)%len(ls)], gs[int(model)%len(gs)]
		var set []int
		for i := range l.Placements {
			if bits&(1<<uint(i)) != 0 {
				set = append(set, i)
			}
		}
		if counters, gpu := l.Allows(set), g.createAll(t, l, set); counters != gpu {
			t.Errorf("%s: counters allow %v, the GPU creates %v", describe(l, set), counters, gpu)
		}
	})
}

// TestOrder: on an H100 the devices go smallest profile first, and each
// profile's placements from the high end of the GPU, so the placements
// at 0 that the 4g and 7g need stay free longest.
func TestOrder(t *testing.T) {
	m, _ := partition.LookupModel("H100-80GB")
	l, err := NewLayout(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	var profiles []string
	for _, pl := range l.Placements {
		if _, ok := got[pl.Profile.Name]; !ok {
			profiles = append(profiles, pl.Profile.Name)
		}
		got[pl.Profile.Name] = append(got[pl.Profile.Name], pl.At.String())
	}
	if diff := cmp.Diff(m.ProfileNames(), profiles); diff != "" {
		t.Errorf("profile order (-want +got):\n%s", diff)
	}
	want := map[string][]string{
		"1g.10gb":    {"6:1", "5:1", "4:1", "3:1", "2:1", "1:1", "0:1"},
		"1g.10gb+me": {"6:1", "5:1", "4:1", "3:1", "2:1", "1:1", "0:1"},
		"1g.20gb":    {"6:2", "4:2", "2:2", "0:2"},
		"2g.20gb":    {"4:2", "2:2", "0:2"},
		"3g.40gb":    {"4:4", "0:4"},
		"4g.40gb":    {"0:4"},
		"7g.80gb":    {"0:8"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("placement order (-want +got):\n%s", diff)
	}
}

// TestCounters: the counters an H100 and an RTX PRO 6000 need, and what
// their devices take.
func TestCounters(t *testing.T) {
	for _, c := range []struct {
		model string
		want  []string
	}{
		{"H100-80GB", []string{"memory-slice-0", "memory-slice-1", "memory-slice-2", "memory-slice-3", "memory-slice-4", "memory-slice-5", "memory-slice-6", "memory-slice-7", "media-extensions"}},
		// Three units make a quarter: one counter each; the +me.all
		// instance takes every video decoder.
		{"RTX-PRO-6000-96GB", []string{"memory-slice-0", "memory-slice-3", "memory-slice-6", "memory-slice-9", "media-extensions", "video-decoders"}},
	} {
		m, _ := partition.LookupModel(c.model)
		l, err := NewLayout(m, nil)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(c.want, l.Counters); diff != "" {
			t.Errorf("%s counters (-want +got):\n%s", c.model, diff)
		}
	}
	m, _ := partition.LookupModel("H100-80GB")
	// Offering only two-slice and four-slice profiles, pairs of memory
	// slices go together.
	l, err := NewLayout(m, []string{"1g.20gb", "3g.40gb"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]int64{}
	for _, pl := range l.Placements {
		if pl.At.Start == 4 {
			got[pl.Profile.Name] = pl.Consumes
		}
	}
	want := map[string]map[string]int64{
		"1g.20gb": {"memory-slice-4": 1},
		"3g.40gb": {"memory-slice-4": 1, "memory-slice-6": 1},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("consumption at 4 (-want +got):\n%s\ncounters %v", diff, l.Counters)
	}
}

// TestNewLayoutErrors: a profile the model lacks, and a GPU without MIG,
// are refused with a message naming them.
func TestNewLayoutErrors(t *testing.T) {
	h100, _ := partition.LookupModel("H100-80GB")
	for _, c := range []struct {
		m        partition.Model
		profiles []string
		want     string
	}{
		{h100, []string{"1g.10gb", "1g.5gb"}, `unknown MIG profile "1g.5gb" for H100-80GB`},
		{partition.Model{Key: "L4-24GB"}, nil, "L4-24GB has no MIG profiles"},
		{h100, []string{}, "H100-80GB: no MIG profile offered"},
	} {
		_, err := NewLayout(c.m, c.profiles)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewLayout(%s, %v) = %v, want %q", c.m.Key, c.profiles, err, c.want)
		}
	}
}

func TestProfileLabel(t *testing.T) {
	got := fmt.Sprint(ProfileLabel("1g.24gb+me"), " ", ProfileLabel("1g.24gb-me"), " ", ProfileLabel("2g.48gb+me.all"), " ", ProfileLabel("4g.96gb+gfx"))
	if want := "1g24gb-me 1g24gb-nome 2g48gb-meall 4g96gb-gfx"; got != want {
		t.Errorf("labels %q, want %q", got, want)
	}
}
