package partition_test

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/carve-dev/carve/partition"
)

// Bounds on a fuzzed placement case, so that the brute force stays fast.
const (
	fuzzMaxOccupied = 8  // existing instances tried (pairs of bytes)
	fuzzMaxWanted   = 12 // instances asked for (bytes)
)

// placeCase is a placement problem derived from fuzz input: a model, valid
// existing instances and the instances to place.
type placeCase struct {
	model partition.Model
	// occupied is a valid GPU state: allowed placements, no overlaps,
	// counts within the maxima, one "+me" at most, compute slices within
	// the model's.
	occupied []partition.Slot
	// counts are the instances to place: known profiles (some past their
	// maximum), zero counts, and an unknown profile.
	counts map[string]int
}

// fuzzModels are the models FuzzPlace picks from: the catalogue and the
// made-up model whose placements conflict.
func fuzzModels() []partition.Model { return append(partition.Catalogue(), oddModel()) }

// decodePlaceCase derives a placeCase from fuzz input. occupied is read as
// (profile, placement) byte pairs, each kept only when it leaves the state
// valid; each byte of wanted adds one instance of a profile (the byte past
// the last profile is an unknown one), or with its high bit set names the
// profile with a count of zero.
func decodePlaceCase(model uint8, occupied, wanted []byte) placeCase {
	models := fuzzModels()
	c := placeCase{model: models[int(model)%len(models)], counts: map[string]int{}}
	m := c.model
	n := len(m.Profiles)
	var used uint64
	count := map[string]int{}
	compute, me := 0, 0
	for i := 0; i+1 < len(occupied) && i < 2*fuzzMaxOccupied; i += 2 {
		p := m.Profiles[int(occupied[i])%n]
		at := p.Placements[int(occupied[i+1])%len(p.Placements)]
		mask := (uint64(1)<<at.Size - 1) << at.Start
		if used&mask != 0 || count[p.Name] >= p.MaxCount || compute+p.ComputeSlices > m.ComputeSlices ||
			(p.MediaExtensions && me > 0) {
			continue
		}
		used |= mask
		count[p.Name]++
		compute += p.ComputeSlices
		if p.MediaExtensions {
			me++
		}
		c.occupied = append(c.occupied, partition.Slot{Profile: p.Name, ProfileID: p.ID, Placement: at})
	}
	for _, b := range wanted[:min(len(wanted), fuzzMaxWanted)] {
		name := "0g.0gb" // unknown to every model
		if i := int(b&0x7f) % (n + 1); i < n {
			name = m.Profiles[i].Name
		}
		if b&0x80 != 0 {
			c.counts[name] += 0
		} else {
			c.counts[name]++
		}
	}
	return c
}

// FuzzPlace checks Place against the brute force on fuzzed models, counts
// and existing instances. Invariants: Place finds a placement iff the brute
// force does, and otherwise fails with an error wrapping ErrCannotPlace;
// a placement it finds is valid (allowed starts, no overlaps, counts within
// the maxima, sorted by start), the same on every call, and the one its
// documentation promises: taking the instances largest first, each sits at
// the lowest allowed start that leaves room for all the instances after it.
// Around existing instances (through PlanGPU, which places the rest of a
// target around the instances it keeps), the plan fails iff the target does
// not fit, and otherwise keeps as many existing instances as any valid
// arrangement can, unchanged, and ends in a valid placement of the target.
func FuzzPlace(f *testing.F) {
	seeds := []struct {
		model            uint8
		occupied, wanted []byte
	}{
		{2, nil, []byte{4, 0, 0, 0, 0}},          // H100: 3g x1, 1g x4 puts the 3g at 4:4
		{2, nil, []byte{0, 0, 0, 0, 0, 0, 0, 0}}, // 1g x8: above the maximum
		{2, nil, []byte{1, 1}},                   // two +me
		{2, nil, []byte{7, 0x84}},                // an unknown profile, a zero count
		{3, nil, []byte{6}},                      // H200: 7g
		{0, nil, []byte{3, 3, 3, 0, 1}},          // A100: 2g x3, 1g, 1g+me
		{1, nil, []byte{5, 4}},                   // 4g and 3g
		{2, []byte{4, 0}, []byte{4}},             // a 3g at 0:4 kept beside another 3g
		{2, []byte{0, 0, 0, 3, 0, 6}, []byte{4}}, // 1g at 0, 3, 6; the 3g needs 0:4 or 4:4
		{2, []byte{0, 0, 0, 4}, []byte{4}},       // 1g at 0 and 4: one must go for the 3g
		{2, []byte{3, 2, 2, 0}, []byte{3}},       // 2g at 4:2, 1g2 at 0:2, another 2g
		{4, []byte{2, 1}, []byte{4}},             // A30: a 2g and a 4g do not fit
		{4, []byte{0, 0, 1, 1}, []byte{0, 1, 2}}, // A30: +me kept
		{5, nil, []byte{2, 1}},                   // odd model: a conflict the totals miss
		{5, []byte{0, 2}, []byte{2, 3, 0}},       // odd model around a 1g at 2
	}
	for _, s := range seeds {
		f.Add(s.model, s.occupied, s.wanted)
	}
	f.Fuzz(func(t *testing.T, model uint8, occupied, wanted []byte) {
		c := decodePlaceCase(model, occupied, wanted)
		checkPlace(t, c.model, c.counts)
		checkPlaceAround(t, c)
	})
}

// checkPlace compares Place with the brute force on counts, and checks the
// placement it returns.
func checkPlace(t *testing.T, m partition.Model, counts map[string]int) {
	t.Helper()
	slots, err := partition.Place(m, counts)
	want := bruteForce(m, counts)
	if (err == nil) != want {
		t.Fatalf("%s %v: Place error %v, brute force says fits=%v", m.Key, counts, err, want)
	}
	if err != nil {
		var pe *partition.PlaceError
		if !errors.Is(err, partition.ErrCannotPlace) || !errors.As(err, &pe) || pe.Model != m.Key || err.Error() == "" {
			t.Fatalf("%s %v: bad error %#v", m.Key, counts, err)
		}
		return
	}
	checkSlots(t, m, counts, slots)
	again, err := partition.Place(m, maps.Clone(counts))
	if err != nil {
		t.Fatalf("%s %v: second Place: %v", m.Key, counts, err)
	}
	if diff := cmp.Diff(slots, again); diff != "" {
		t.Fatalf("%s %v: Place is not deterministic (-first +second):\n%s", m.Key, counts, diff)
	}
	checkLowestStarts(t, m, counts, slots)
}

// searchOrder returns the instances of slots in the order Place documents
// for its search: more memory slices, more compute slices, fewer
// placements, then the model's profile order; identical instances by start
// (a lower free start would have been taken by the earlier one).
func searchOrder(m partition.Model, slots []partition.Slot) []partition.Slot {
	pos := map[string]int{}
	for i, p := range m.Profiles {
		pos[p.Name] = i
	}
	out := slices.Clone(slots)
	sort.SliceStable(out, func(a, b int) bool {
		pa, pb := m.Profiles[pos[out[a].Profile]], m.Profiles[pos[out[b].Profile]]
		switch {
		case pa.MemorySlices != pb.MemorySlices:
			return pa.MemorySlices > pb.MemorySlices
		case pa.ComputeSlices != pb.ComputeSlices:
			return pa.ComputeSlices > pb.ComputeSlices
		case len(pa.Placements) != len(pb.Placements):
			return len(pa.Placements) < len(pb.Placements)
		case pa.Name != pb.Name:
			return pos[pa.Name] < pos[pb.Name]
		}
		return out[a].Placement.Start < out[b].Placement.Start
	})
	return out
}

// checkLowestStarts checks Place's tie-break: in search order, no instance
// could have taken an allowed placement listed before its own, free of the
// instances before it, and still left room for the instances after it.
func checkLowestStarts(t *testing.T, m partition.Model, counts map[string]int, slots []partition.Slot) {
	t.Helper()
	order := searchOrder(m, slots)
	used := make([]bool, m.MemorySlices)
	take := func(at partition.Placement, v bool) {
		for s := at.Start; s < at.End(); s++ {
			used[s] = v
		}
	}
	for i, s := range order {
		rest := map[string]int{}
		for _, r := range order[i+1:] {
			rest[r.Profile]++
		}
		p, _ := m.Profile(s.Profile)
		for _, at := range p.Placements {
			if at == s.Placement {
				break
			}
			free := true
			for k := at.Start; k < at.End(); k++ {
				free = free && !used[k]
			}
			if !free {
				continue
			}
			take(at, true)
			fits := bruteForceAround(m, rest, used)
			take(at, false)
			if fits {
				t.Fatalf("%s %v: Place gave %s, but instance %d (%s) could sit at %s, lower than %s, and leave room for the rest",
					m.Key, counts, slotsText(slots), i, s.Profile, at, s.Placement)
			}
		}
		take(s.Placement, true)
	}
}

// checkPlaceAround plans a GPU that holds c.occupied towards a target of
// those instances plus c.counts, and checks the plan against the brute
// force.
func checkPlaceAround(t *testing.T, c placeCase) {
	t.Helper()
	m := c.model
	target := maps.Clone(c.counts)
	g := partition.GPU{
		Index: 0, UUID: "GPU-0", Product: m.Product, Model: m.Key, MemoryMiB: m.MemoryMiB,
		MIGCapable: true, MIGMode: partition.MIGEnabled, PendingMIGMode: partition.MIGEnabled,
	}
	existing := map[int]partition.Slot{}
	for i, s := range c.occupied {
		p, _ := m.Profile(s.Profile)
		id := 10 + i
		existing[id] = s
		g.Instances = append(g.Instances, partition.Instance{
			GIID: id, ProfileID: p.ID, Profile: p.Name, Placement: s.Placement,
			ComputeSlices: p.ComputeSlices, MemoryMiB: p.MemoryMiB,
			CIs: []partition.ComputeInstance{{ID: 0, GIID: id, ComputeSlices: p.ComputeSlices, UUID: fmt.Sprintf("MIG-%d", id)}},
		})
		target[s.Profile]++
	}
	plan, err := partition.PlanGPU(g, m, partition.Target{MIG: target}, nil)
	if want := bruteForce(m, target); (err == nil) != want {
		t.Fatalf("%s: %s -> %v: PlanGPU error %v, brute force says fits=%v", m.Key, slotsText(c.occupied), target, err, want)
	}
	if err != nil {
		if !errors.Is(err, partition.ErrCannotPlace) {
			t.Fatalf("%s: %s -> %v: error %v does not wrap ErrCannotPlace", m.Key, slotsText(c.occupied), target, err)
		}
		return
	}
	final := make([]partition.Slot, 0, len(plan.Instances))
	kept := 0
	for _, in := range plan.Instances {
		final = append(final, partition.Slot{Profile: in.Profile, ProfileID: in.ProfileID, Placement: in.Placement})
		switch in.Status {
		case partition.StatusKept:
			was, ok := existing[in.GIID]
			if !ok || was.Profile != in.Profile || was.Placement != in.Placement {
				t.Fatalf("%s: %s -> %v: kept instance %+v is not an existing one unchanged", m.Key, slotsText(c.occupied), target, in)
			}
			kept++
		case partition.StatusNew:
			if in.GIID != -1 {
				t.Fatalf("%s: new instance %+v has a GI ID", m.Key, in)
			}
		default:
			t.Fatalf("%s: instance %+v: status %s, with every existing instance complete", m.Key, in, in.Status)
		}
	}
	checkSlots(t, m, target, final)
	if most := mostKept(m, c.occupied, target); kept != most {
		t.Fatalf("%s: %s -> %v: kept %d instances, the most possible is %d (final %s)",
			m.Key, slotsText(c.occupied), target, kept, most, slotsText(final))
	}
}

// mostKept finds, the dumb way, the most of the existing instances that can
// stay while the rest of target is placed around them: every subset,
// checked by the brute force with the subset's slices taken.
func mostKept(m partition.Model, existing []partition.Slot, target map[string]int) int {
	best := 0
	for mask := range 1 << len(existing) {
		left := maps.Clone(target)
		used := make([]bool, m.MemorySlices)
		n, ok := 0, true
		for i, s := range existing {
			if mask&(1<<i) == 0 {
				continue
			}
			left[s.Profile]--
			ok = ok && left[s.Profile] >= 0
			for k := s.Placement.Start; k < s.Placement.End(); k++ {
				used[k] = true
			}
			n++
		}
		if ok && n > best && bruteForceAround(m, left, used) {
			best = n
		}
	}
	return best
}
