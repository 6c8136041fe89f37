package partition_test

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/carve-dev/carve/partition"
)

// roles names the profiles of the 8-slice family by shape, so one table
// covers A100-40GB, A100-80GB, H100-80GB and H200-141GB.
type roles map[string]string

// familyRoles maps a role ("1g", "1g+me", "1g2" = one compute slice on two
// memory slices, "2g", "3g", "4g", "7g") to the model's profile name.
func familyRoles(t *testing.T, m partition.Model) roles {
	t.Helper()
	r := roles{}
	for _, p := range m.Profiles {
		role := fmt.Sprintf("%dg", p.ComputeSlices)
		if p.ComputeSlices == 1 && p.MemorySlices == 2 {
			role = "1g2"
		}
		if p.MediaExtensions {
			role += "+me"
		}
		if _, dup := r[role]; dup {
			t.Fatalf("%s: two profiles with role %s", m.Key, role)
		}
		r[role] = p.Name
	}
	return r
}

// expand turns "3g x2, 1g" into counts, and replaces {3g} style
// placeholders in messages with the model's names.
func (r roles) counts(t *testing.T, spec string) map[string]int {
	t.Helper()
	out := map[string]int{}
	if spec == "" {
		return out
	}
	for part := range strings.SplitSeq(spec, ",") {
		var role string
		n := 1
		fields := strings.Fields(part)
		role = fields[0]
		if len(fields) == 2 {
			if _, err := fmt.Sscanf(fields[1], "x%d", &n); err != nil {
				t.Fatalf("bad count in %q", part)
			}
		}
		name, ok := r[role]
		if !ok {
			name = role // an unknown profile, on purpose
		}
		out[name] += n
	}
	return out
}

func (r roles) text(s string, m partition.Model) string {
	for role, name := range r {
		s = strings.ReplaceAll(s, "{"+role+"}", name)
	}
	return strings.ReplaceAll(s, "{model}", m.Key)
}

func eightSliceModels() []partition.Model {
	var out []partition.Model
	for _, m := range partition.Catalogue() {
		if m.MemorySlices == 8 {
			out = append(out, m)
		}
	}
	return out
}

func mustModel(t testing.TB, key string) partition.Model {
	t.Helper()
	m, ok := partition.LookupModel(key)
	if !ok {
		t.Fatalf("no catalogue model %s", key)
	}
	return m
}

// slotsText renders slots as "3g.40gb@4:4 1g.10gb@0:1 ...", sorted by start.
func slotsText(slots []partition.Slot) string {
	parts := make([]string, len(slots))
	for i, s := range slots {
		parts[i] = fmt.Sprintf("%s@%d:%d", s.Profile, s.Placement.Start, s.Placement.Size)
	}
	return strings.Join(parts, " ")
}

// TestPlaceGeometryFacts checks every consequence listed in
// docs/hardware.md on every 8-slice model, with the profile names of
// each model.
func TestPlaceGeometryFacts(t *testing.T) {
	tests := []struct {
		name string
		want string // role counts
		// at, when set, is the exact placement expected ({role} names).
		at string
		// errs are substrings of the error; none means it must fit.
		errs []string
	}{
		{name: "4g and 3g fit, 4g at 0 and 3g at 4", want: "4g, 3g", at: "{4g}@0:4 {3g}@4:4"},
		{name: "4g twice does not", want: "4g x2", errs: []string{"{4g} x2: at most 1 fits on {model}"}},
		{name: "3g twice fits", want: "3g x2", at: "{3g}@0:4 {3g}@4:4"},
		{name: "3g twice and a 1g: memory", want: "3g x2, 1g", errs: []string{"needs 9 of 8 memory slices", "{3g} x2 cover all 8 memory slices, leaving none for {1g} x1"}},
		{name: "3g twice and a 1g+me: memory", want: "3g x2, 1g+me", errs: []string{"needs 9 of 8 memory slices", "{3g} x2 cover all 8 memory slices, leaving none for {1g+me} x1"}},
		{name: "3g twice and a two-slice 1g: memory", want: "3g x2, 1g2", errs: []string{"needs 10 of 8 memory slices", "leaving none for {1g2} x1"}},
		{name: "3g and four 1g fit only with 3g at 4", want: "3g, 1g x4", at: "{1g}@0:1 {1g}@1:1 {1g}@2:1 {1g}@3:1 {3g}@4:4"},
		{name: "order matters: the small ones do not take slice 4", want: "1g x4, 3g", at: "{1g}@0:1 {1g}@1:1 {1g}@2:1 {1g}@3:1 {3g}@4:4"},
		{name: "3g and five 1g never fit", want: "3g, 1g x5", errs: []string{"needs 8 of 7 compute slices", "{3g} x1 uses 3, leaving 4 for {1g} x5, which need 5"}},
		{name: "three 2g and a 1g fit", want: "2g x3, 1g", at: "{2g}@0:2 {2g}@2:2 {2g}@4:2 {1g}@6:1"},
		{name: "4g, 2g and 1g fit", want: "4g, 2g, 1g", at: "{4g}@0:4 {2g}@4:2 {1g}@6:1"},
		{name: "one +me fits", want: "1g+me, 1g x6", at: "{1g}@0:1 {1g}@1:1 {1g}@2:1 {1g}@3:1 {1g}@4:1 {1g}@5:1 {1g+me}@6:1"},
		{name: "two +me do not", want: "1g+me x2", errs: []string{"{1g+me} x2: at most 1 fits on {model}"}},
		{name: "seven 1g fit", want: "1g x7"},
		{name: "eight 1g do not", want: "1g x8", errs: []string{"{1g} x8: at most 7 fit on {model}"}},
		{name: "four two-slice 1g fit", want: "1g2 x4", at: "{1g2}@0:2 {1g2}@2:2 {1g2}@4:2 {1g2}@6:2"},
		{name: "five two-slice 1g do not", want: "1g2 x5", errs: []string{"{1g2} x5: at most 4 fit on {model}"}},
		{name: "four 2g do not", want: "2g x4", errs: []string{"{2g} x4: at most 3 fit on {model}"}},
		{name: "three 3g do not", want: "3g x3", errs: []string{"{3g} x3: at most 2 fit on {model}"}},
		{name: "7g alone fits", want: "7g", at: "{7g}@0:8"},
		{name: "7g and a 1g: compute", want: "7g, 1g", errs: []string{"needs 8 of 7 compute slices", "{7g} x1 covers all 7 compute slices, leaving none for {1g} x1"}},
		{name: "3g and 2g twice fit with 3g at 4", want: "3g, 2g x2", at: "{2g}@0:2 {2g}@2:2 {3g}@4:4"},
		{name: "4g and two 2g: compute", want: "4g, 2g x2", errs: []string{"needs 8 of 7 compute slices"}},
		{name: "two-slice 1g leaves slice 7 to itself", want: "1g x6, 1g2", at: "{1g}@0:1 {1g}@1:1 {1g}@2:1 {1g}@3:1 {1g}@4:1 {1g}@5:1 {1g2}@6:2"},
		{name: "nothing at all", want: ""},
		{name: "unknown profile", want: "9g.99gb", errs: []string{`unknown MIG profile "9g.99gb" for {model} (it has {1g}, {1g+me}, {1g2}, {2g}, {3g}, {4g}, {7g})`}},
		{name: "unknown comes before counts", want: "9g.99gb, 1g x8", errs: []string{`unknown MIG profile "9g.99gb"`}},
		{name: "max count comes before memory", want: "3g x3, 1g", errs: []string{"{3g} x3: at most 2 fit"}},
		{name: "several counts over the maximum are all named", want: "1g x8, 4g x2", errs: []string{"{1g} x8: at most 7 fit on {model}; {4g} x2: at most 1 fits on {model}"}},
	}
	for _, m := range eightSliceModels() {
		r := familyRoles(t, m)
		for _, tc := range tests {
			t.Run(m.Key+"/"+tc.name, func(t *testing.T) {
				slots, err := partition.Place(m, r.counts(t, tc.want))
				if len(tc.errs) == 0 {
					if err != nil {
						t.Fatalf("Place: %v", err)
					}
					checkSlots(t, m, r.counts(t, tc.want), slots)
					if tc.at != "" {
						if got, want := slotsText(slots), r.text(tc.at, m); got != want {
							t.Errorf("placement\n got %s\nwant %s", got, want)
						}
					}
					return
				}
				if err == nil {
					t.Fatalf("Place = %s, want an error", slotsText(slots))
				}
				if !errors.Is(err, partition.ErrCannotPlace) {
					t.Errorf("error %v does not wrap ErrCannotPlace", err)
				}
				for _, want := range tc.errs {
					if want = r.text(want, m); !strings.Contains(err.Error(), want) {
						t.Errorf("error %q\nlacks %q", err, want)
					}
				}
			})
		}
	}
}

// TestPlaceA30 checks the A30's own geometry.
func TestPlaceA30(t *testing.T) {
	m := mustModel(t, "A30-24GB")
	tests := []struct {
		name   string
		counts map[string]int
		at     string
		errs   []string
	}{
		{name: "four 1g", counts: map[string]int{"1g.6gb": 4}, at: "1g.6gb@0:1 1g.6gb@1:1 1g.6gb@2:1 1g.6gb@3:1"},
		{name: "five 1g", counts: map[string]int{"1g.6gb": 5}, errs: []string{"1g.6gb x5: at most 4 fit on A30-24GB"}},
		{name: "two 2g", counts: map[string]int{"2g.12gb": 2}, at: "2g.12gb@0:2 2g.12gb@2:2"},
		{name: "three 2g", counts: map[string]int{"2g.12gb": 3}, errs: []string{"2g.12gb x3: at most 2 fit on A30-24GB"}},
		{name: "2g and 2g+me", counts: map[string]int{"2g.12gb": 1, "2g.12gb+me": 1}, at: "2g.12gb@0:2 2g.12gb+me@2:2"},
		{name: "2g and two 1g", counts: map[string]int{"2g.12gb": 1, "1g.6gb": 2}, at: "2g.12gb@0:2 1g.6gb@2:1 1g.6gb@3:1"},
		{name: "1g+me and 1g x3", counts: map[string]int{"1g.6gb+me": 1, "1g.6gb": 3}},
		{name: "two different +me", counts: map[string]int{"2g.12gb+me": 1, "1g.6gb+me": 1}, errs: []string{"1g.6gb+me x1 and 2g.12gb+me x1: at most one +me instance fits on a GPU"}},
		{name: "two 2g+me", counts: map[string]int{"2g.12gb+me": 2}, errs: []string{"2g.12gb+me x2: at most 1 fits on A30-24GB"}},
		{name: "4g alone", counts: map[string]int{"4g.24gb": 1}, at: "4g.24gb@0:4"},
		{name: "4g and a 1g", counts: map[string]int{"4g.24gb": 1, "1g.6gb": 1}, errs: []string{"needs 5 of 4 compute slices: 4g.24gb x1 covers all 4 compute slices, leaving none for 1g.6gb x1"}},
		{name: "two 2g and a 1g", counts: map[string]int{"2g.12gb": 2, "1g.6gb": 1}, errs: []string{"needs 5 of 4 compute slices: 2g.12gb x2 cover all 4 compute slices, leaving none for 1g.6gb x1"}},
		{name: "H100 name on an A30", counts: map[string]int{"1g.10gb": 1}, errs: []string{`unknown MIG profile "1g.10gb" for A30-24GB (it has 1g.6gb, 1g.6gb+me, 2g.12gb, 2g.12gb+me, 4g.24gb)`}},
		{name: "negative count", counts: map[string]int{"1g.6gb": -1}, errs: []string{"negative count: 1g.6gb x-1"}},
		{name: "zero counts are ignored", counts: map[string]int{"1g.6gb": 0, "4g.24gb": 1}, at: "4g.24gb@0:4"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			slots, err := partition.Place(m, tc.counts)
			if len(tc.errs) == 0 {
				if err != nil {
					t.Fatalf("Place: %v", err)
				}
				checkSlots(t, m, tc.counts, slots)
				if tc.at != "" && slotsText(slots) != tc.at {
					t.Errorf("placement\n got %s\nwant %s", slotsText(slots), tc.at)
				}
				return
			}
			if !errors.Is(err, partition.ErrCannotPlace) {
				t.Fatalf("error %v, want one wrapping ErrCannotPlace", err)
			}
			var pe *partition.PlaceError
			if !errors.As(err, &pe) || pe.Model != "A30-24GB" {
				t.Errorf("error %#v is not a *PlaceError for A30-24GB", err)
			}
			for _, want := range tc.errs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q\nlacks %q", err, want)
				}
			}
		})
	}
}

// oddModel is a made-up model whose placements conflict although every
// count and slice total is fine, as a device could report.
func oddModel() partition.Model {
	at := func(size int, starts ...int) []partition.Placement {
		var ps []partition.Placement
		for _, s := range starts {
			ps = append(ps, partition.Placement{Start: s, Size: size})
		}
		return ps
	}
	return partition.Model{
		Key: "ODD-8GB", MemorySlices: 4, ComputeSlices: 8,
		Profiles: []partition.GIProfile{
			{ID: 0, Name: "1g.1gb", ComputeSlices: 1, MemorySlices: 1, MaxCount: 4, Placements: at(1, 0, 1, 2)},
			{ID: 1, Name: "2g.2gb", ComputeSlices: 2, MemorySlices: 2, MaxCount: 2, Placements: at(2, 0, 2)},
			{ID: 2, Name: "2g.2gb+mid", ComputeSlices: 2, MemorySlices: 2, MaxCount: 1, Placements: at(2, 1)},
			{ID: 3, Name: "3g.2gb", ComputeSlices: 3, MemorySlices: 2, MaxCount: 1, Placements: at(2, 0, 2)},
		},
	}
}

// TestPlaceConflictWords checks the words of placement conflicts, which the
// catalogue's totals checks happen to pre-empt but device models may not.
func TestPlaceConflictWords(t *testing.T) {
	m := oddModel()
	tests := []struct {
		name   string
		counts map[string]int
		want   string
	}{
		{
			name:   "forced placement leaves nothing usable",
			counts: map[string]int{"2g.2gb+mid": 1, "2g.2gb": 1},
			want:   "placement conflict: the only way to place 2g.2gb+mid x1 is at 1:2, leaving slices 0, 3 free, so no room is left for 2g.2gb (2g.2gb can start at slice 0 or 2, 2 slices each)",
		},
		{
			name:   "forced placement leaves room for some",
			counts: map[string]int{"2g.2gb+mid": 1, "1g.1gb": 2},
			want:   "placement conflict: the only way to place 2g.2gb+mid x1 is at 1:2, leaving slices 0, 3 free, so room is left for only 1 of the 2 1g.1gb (1g.1gb can start at slice 0-2, 1 slice each)",
		},
		{
			name:   "several arrangements, none leaves room",
			counts: map[string]int{"3g.2gb": 1, "2g.2gb+mid": 1},
			want:   "placement conflict: wherever 3g.2gb x1 sits, no room is left for 2g.2gb+mid (2g.2gb+mid can start at slice 1, 2 slices each)",
		},
		{
			name:   "totals are checked before placements",
			counts: map[string]int{"3g.2gb": 1, "2g.2gb": 1, "1g.1gb": 1},
			want:   "needs 5 of 4 memory slices: 3g.2gb x1, 2g.2gb x1 cover all 4 memory slices, leaving none for 1g.1gb x1",
		},
		{
			name:   "a profile that cannot use all its slots",
			counts: map[string]int{"1g.1gb": 4},
			want:   "placement conflict: 1g.1gb x4: only 3 can be placed at once on ODD-8GB (1g.1gb can start at slice 0-2, 1 slice each)",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			slots, err := partition.Place(m, tc.counts)
			if err == nil {
				t.Fatalf("Place = %s, want a conflict", slotsText(slots))
			}
			if !errors.Is(err, partition.ErrCannotPlace) {
				t.Errorf("error %v does not wrap ErrCannotPlace", err)
			}
			if err.Error() != tc.want {
				t.Errorf("error\n got %q\nwant %q", err, tc.want)
			}
			if verdict := bruteForce(m, tc.counts); verdict {
				t.Errorf("brute force finds a placement the test says is impossible")
			}
		})
	}
}

// checkSlots asserts that slots are a valid placement of exactly counts on
// m: right profiles and IDs, valid placements, no overlaps, limits kept,
// sorted by start.
func checkSlots(t *testing.T, m partition.Model, counts map[string]int, slots []partition.Slot) {
	t.Helper()
	got := map[string]int{}
	compute, me := 0, 0
	for i, s := range slots {
		p, ok := m.Profile(s.Profile)
		if !ok {
			t.Fatalf("slot %d: unknown profile %q", i, s.Profile)
		}
		if p.ID != s.ProfileID {
			t.Errorf("slot %d: profile ID %d, want %d", i, s.ProfileID, p.ID)
		}
		valid := false
		for _, q := range p.Placements {
			valid = valid || q == s.Placement
		}
		if !valid {
			t.Errorf("slot %d: %s at %+v is not a valid placement", i, s.Profile, s.Placement)
		}
		for j := range i {
			if slots[j].Placement.Overlaps(s.Placement) {
				t.Errorf("slots %d and %d overlap: %s", j, i, slotsText(slots))
			}
		}
		if i > 0 && slots[i-1].Placement.Start > s.Placement.Start {
			t.Errorf("slots not sorted by start: %s", slotsText(slots))
		}
		got[s.Profile]++
		compute += p.ComputeSlices
		if p.MediaExtensions {
			me++
		}
	}
	for name, n := range counts {
		if got[name] != n {
			t.Errorf("%s: %d placed, want %d", name, got[name], n)
		}
		if p, _ := m.Profile(name); n > p.MaxCount {
			t.Errorf("%s: %d placed, above the maximum %d", name, n, p.MaxCount)
		}
	}
	if len(slots) != total(counts) {
		t.Errorf("%d slots, want %d", len(slots), total(counts))
	}
	if compute > m.ComputeSlices || me > 1 || !mediaFits(m, got) {
		t.Errorf("limits broken: %d compute slices, %d +me, media engines fit %v", compute, me, mediaFits(m, got))
	}
}

func total(counts map[string]int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

// bruteForce decides whether counts fit on m the dumb way: try every
// placement for every instance, in the given order, and check the limits at
// the end. It shares nothing with Place.
func bruteForce(m partition.Model, counts map[string]int) bool {
	names := make([]string, 0, len(counts))
	for name := range counts {
		names = append(names, name)
	}
	sort.Strings(names)
	compute, me := 0, 0
	for _, name := range names {
		p, ok := m.Profile(name)
		if !ok {
			return false
		}
		if counts[name] > p.MaxCount {
			return false
		}
		compute += counts[name] * p.ComputeSlices
		if p.MediaExtensions {
			me += counts[name]
		}
	}
	if compute > m.ComputeSlices || me > 1 || !mediaFits(m, counts) {
		return false
	}
	return bruteForceAround(m, counts, make([]bool, m.MemorySlices))
}

// mediaFits reports whether counts need no more video decoders, encoders,
// JPEG decoders and optical flow accelerators than the profile with the
// most compute slices (the whole GPU) has.
func mediaFits(m partition.Model, counts map[string]int) bool {
	var whole partition.GIProfile
	for _, p := range m.Profiles {
		if p.ComputeSlices > whole.ComputeSlices {
			whole = p
		}
	}
	var need [4]int
	for name, n := range counts {
		p, _ := m.Profile(name)
		for i, e := range [4]int{p.Decoders, p.Encoders, p.JPEGs, p.OFAs} {
			need[i] += n * e
		}
	}
	for i, have := range [4]int{whole.Decoders, whole.Encoders, whole.JPEGs, whole.OFAs} {
		if need[i] > have {
			return false
		}
	}
	return true
}

// multisets lists every multiset of m's profiles with each count up to the
// profile's maximum and at most the model's memory slices in all.
func multisets(m partition.Model) []map[string]int {
	var out []map[string]int
	cur := map[string]int{}
	var walk func(i, memory int)
	walk = func(i, memory int) {
		if i == len(m.Profiles) {
			c := map[string]int{}
			for k, v := range cur {
				if v > 0 {
					c[k] = v
				}
			}
			out = append(out, c)
			return
		}
		p := m.Profiles[i]
		// One instance past the maximum and past the slices, to cover
		// the refusals too.
		for n := 0; n <= p.MaxCount+1 && memory+(n-1)*p.MemorySlices <= m.MemorySlices; n++ {
			cur[p.Name] = n
			walk(i+1, memory+n*p.MemorySlices)
		}
		cur[p.Name] = 0
	}
	walk(0, 0)
	return out
}

// TestPlaceOracle compares Place with the brute force on every multiset of
// every catalogue model (and the odd model), and checks every placement it
// returns.
func TestPlaceOracle(t *testing.T) {
	for _, m := range append(partition.Catalogue(), oddModel()) {
		t.Run(m.Key, func(t *testing.T) {
			sets := multisets(m)
			fit, reasons := 0, map[string]int{}
			for _, counts := range sets {
				slots, err := partition.Place(m, counts)
				want := bruteForce(m, counts)
				if (err == nil) != want {
					t.Fatalf("%v: Place error %v, brute force says fits=%v", counts, err, want)
				}
				if err != nil {
					if !errors.Is(err, partition.ErrCannotPlace) || err.Error() == "" {
						t.Fatalf("%v: bad error %v", counts, err)
					}
					reasons[strings.SplitN(err.Error(), ":", 2)[0]]++
					continue
				}
				fit++
				checkSlots(t, m, counts, slots)
			}
			if fit == 0 || fit == len(sets) {
				t.Fatalf("%d of %d multisets fit: the enumeration is not exercising both verdicts", fit, len(sets))
			}
			t.Logf("%s: %d multisets, %d fit; refusals by reason: %v", m.Key, len(sets), fit, reasons)
		})
	}
}

// TestPlaceDeterministic checks that the same input gives the same output,
// whatever the map order.
func TestPlaceDeterministic(t *testing.T) {
	m := mustModel(t, "H100-80GB")
	counts := map[string]int{"1g.10gb": 2, "1g.20gb": 1, "2g.20gb": 1, "1g.10gb+me": 1}
	first, err := partition.Place(m, counts)
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		again, err := partition.Place(m, counts)
		if err != nil {
			t.Fatalf("Place: %v", err)
		}
		if diff := cmp.Diff(first, again); diff != "" {
			t.Fatalf("Place gave other slots (-first +again):\n%s", diff)
		}
	}
	// Largest first, each at the lowest start that leaves room for the rest.
	if want := "2g.20gb@0:2 1g.20gb@2:2 1g.10gb@4:1 1g.10gb@5:1 1g.10gb+me@6:1"; slotsText(first) != want {
		t.Errorf("got %s, want %s", slotsText(first), want)
	}
}
