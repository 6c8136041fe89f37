package partition

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// ErrCannotPlace means a set of MIG instances does not fit on one GPU of a
// model. Errors from Place wrap it (as a *PlaceError that says why).
var ErrCannotPlace = errors.New("MIG instances cannot be placed")

// PlaceError says why a set of MIG instances cannot be placed on a GPU
// model, in words meant for an operator. It wraps ErrCannotPlace.
type PlaceError struct {
	// Model is the key of the GPU model, e.g. "H100-80GB".
	Model string
	// Reason is the explanation, e.g. "1g.10gb x8: at most 7 fit on
	// H100-80GB" or "needs 9 of 8 memory slices: ...".
	Reason string
}

// Error returns the reason.
func (e *PlaceError) Error() string { return e.Reason }

// Unwrap returns ErrCannotPlace.
func (e *PlaceError) Unwrap() error { return ErrCannotPlace }

// Slot is one MIG instance placed on a GPU.
type Slot struct {
	// Profile is the MIG profile name, e.g. "3g.40gb".
	Profile string `json:"profile"`
	// ProfileID is NVML's GPU instance profile ID.
	ProfileID int `json:"profileID"`
	// Placement is where the GPU instance sits.
	Placement Placement `json:"placement"`
}

// Place finds a placement for every MIG instance in counts (profile name ->
// number of instances) on one GPU of model m, or proves that none exists.
//
// The search is exact: it backtracks over the placements of the whole set,
// largest instances first (more memory slices, then more compute slices,
// then fewer possible placements, then the model's profile order), and
// remembers which (instance, occupied slices) states have no completion, so
// it never tries an arrangement twice. Ties are broken towards low starts:
// each instance, in that order, takes the lowest start that still leaves room
// for all the instances after it. So "3g.40gb x1" sits at 0:4, and
// "3g.40gb x1, 1g.10gb x4" puts the 3g.40gb at 4:4 because nothing else works.
// The result is sorted by placement start. Zero counts are ignored.
//
// When the instances do not fit, the error wraps ErrCannotPlace and gives the
// first reason that applies, in this order: a profile the model lacks, a
// count above the profile's maximum, more than one "+me" instance, more
// compute slices than the model has, more memory slices than it has, and
// otherwise the placement conflict that prevents the set.
func Place(m Model, counts map[string]int) ([]Slot, error) {
	if m.MemorySlices > 64 {
		return nil, &PlaceError{Model: m.Key, Reason: fmt.Sprintf("%s has %d memory slices; carve handles at most 64", m.Key, m.MemorySlices)}
	}
	groups, err := checkCounts(m, counts)
	if err != nil {
		return nil, err
	}
	slots, ok := placeAround(groups, 0)
	if !ok {
		return nil, &PlaceError{Model: m.Key, Reason: "placement conflict: " + describeConflict(m, groups)}
	}
	return slots, nil
}

// group is a number of instances of one profile, the unit of the search.
type group struct {
	profile GIProfile
	count   int
}

func (g group) String() string { return g.profile.Name + " x" + strconv.Itoa(g.count) }

// largerFirst orders profiles for the search: more memory slices, more
// compute slices, fewer placements (more constrained), then model order.
func largerFirst(a, b GIProfile, ia, ib int) bool {
	if a.MemorySlices != b.MemorySlices {
		return a.MemorySlices > b.MemorySlices
	}
	if a.ComputeSlices != b.ComputeSlices {
		return a.ComputeSlices > b.ComputeSlices
	}
	if len(a.Placements) != len(b.Placements) {
		return len(a.Placements) < len(b.Placements)
	}
	return ia < ib
}

// checkCounts validates counts against the model's profiles, limits and
// slice totals, and returns the non-zero groups, largest first.
func checkCounts(m Model, counts map[string]int) ([]group, error) {
	fail := func(format string, args ...any) ([]group, error) {
		return nil, &PlaceError{Model: m.Key, Reason: fmt.Sprintf(format, args...)}
	}
	var unknown, negative []string
	for name, n := range counts {
		if _, ok := m.Profile(name); !ok {
			unknown = append(unknown, strconv.Quote(name))
		} else if n < 0 {
			negative = append(negative, fmt.Sprintf("%s x%d", name, n))
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		what := "unknown MIG profile"
		if len(unknown) > 1 {
			what += "s"
		}
		return fail("%s %s for %s (it has %s)", what, strings.Join(unknown, ", "), m.Key, strings.Join(m.ProfileNames(), ", "))
	}
	if len(negative) > 0 {
		sort.Strings(negative)
		return fail("negative count: %s", strings.Join(negative, ", "))
	}

	var groups []group
	order := make([]int, 0, len(m.Profiles))
	for i, p := range m.Profiles {
		if counts[p.Name] > 0 {
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(a, b int) bool {
		return largerFirst(m.Profiles[order[a]], m.Profiles[order[b]], order[a], order[b])
	})
	for _, i := range order {
		groups = append(groups, group{profile: m.Profiles[i], count: counts[m.Profiles[i].Name]})
	}

	var over []string
	for _, i := range profileOrder(m, groups) {
		g := groups[i]
		if g.count > g.profile.MaxCount {
			verb := "fit"
			if g.profile.MaxCount == 1 {
				verb = "fits"
			}
			over = append(over, fmt.Sprintf("%s: at most %d %s on %s", g, g.profile.MaxCount, verb, m.Key))
		}
	}
	if len(over) > 0 {
		return fail("%s", strings.Join(over, "; "))
	}

	var me []string
	meCount, compute, memory := 0, 0, 0
	for _, i := range profileOrder(m, groups) {
		if g := groups[i]; g.profile.MediaExtensions {
			me = append(me, g.String())
			meCount += g.count
		}
	}
	for _, g := range groups {
		compute += g.count * g.profile.ComputeSlices
		memory += g.count * g.profile.MemorySlices
	}
	if meCount > 1 {
		return fail("%s: at most one +me instance fits on a GPU", strings.Join(me, " and "))
	}
	if compute > m.ComputeSlices {
		return fail("needs %d of %d compute slices: %s", compute, m.ComputeSlices,
			explainTotal(groups, m.ComputeSlices, "compute", func(p GIProfile) int { return p.ComputeSlices }))
	}
	if memory > m.MemorySlices {
		return fail("needs %d of %d memory slices: %s", memory, m.MemorySlices,
			explainTotal(groups, m.MemorySlices, "memory", func(p GIProfile) int { return p.MemorySlices }))
	}
	if err := checkMedia(m, groups); err != nil {
		return nil, err
	}
	return groups, nil
}

// checkMedia fails when the groups need more media engines of a kind
// than the GPU has: "1g.24gb+me.all x1 and 1g.24gb x1 need 5 of 4 video
// decoders, ...".
func checkMedia(m Model, groups []group) error {
	var need Engines
	var users []string
	for _, i := range profileOrder(m, groups) {
		g := groups[i]
		if p := g.profile; p.Decoders+p.Encoders+p.JPEGs+p.OFAs > 0 {
			users = append(users, g.String())
		}
		need = need.Plus(g.profile.Engines, g.count)
	}
	over := need.MediaBeyond(m.MediaEngines())
	if len(over) == 0 {
		return nil
	}
	verb := "needs"
	if len(users) > 1 || groups[0].count > 1 {
		verb = "need"
	}
	return &PlaceError{Model: m.Key, Reason: fmt.Sprintf("%s %s %s on a GPU", strings.Join(users, " and "), verb, strings.Join(over, ", "))}
}

// profileOrder returns the indexes of groups in the model's profile order
// (smallest first), for messages that list several profiles.
func profileOrder(m Model, groups []group) []int {
	pos := make(map[string]int, len(m.Profiles))
	for i, p := range m.Profiles {
		pos[p.Name] = i
	}
	idx := make([]int, len(groups))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return pos[groups[idx[a]].profile.Name] < pos[groups[idx[b]].profile.Name] })
	return idx
}

// explainTotal says how a set of groups (largest first) exceeds a total of
// slices: the largest instances that fit and what they leave for the rest,
// e.g. "3g.40gb x2 cover all 8 memory slices, leaving none for 1g.10gb x1".
func explainTotal(groups []group, total int, kind string, size func(GIProfile) int) string {
	used, k := 0, 0
	for k < len(groups) && used+groups[k].count*size(groups[k].profile) <= total {
		used += groups[k].count * size(groups[k].profile)
		k++
	}
	rest, restNeed := make([]string, 0, len(groups)-k), 0
	for _, g := range groups[k:] {
		rest = append(rest, g.String())
		restNeed += g.count * size(g.profile)
	}
	if k == 0 {
		return fmt.Sprintf("%s need %d %s slices", strings.Join(rest, ", "), restNeed, kind)
	}
	head := make([]string, k)
	for i, g := range groups[:k] {
		head[i] = g.String()
	}
	verb, verbAll := "uses", "covers"
	if k > 1 || groups[0].count > 1 {
		verb, verbAll = "use", "cover"
	}
	if used == total {
		return fmt.Sprintf("%s %s all %d %s slices, leaving none for %s", strings.Join(head, ", "), verbAll, total, kind, strings.Join(rest, ", "))
	}
	restVerb := "needs"
	if len(rest) > 1 || groups[k].count > 1 {
		restVerb = "need"
	}
	return fmt.Sprintf("%s %s %d, leaving %d for %s, which %s %d", strings.Join(head, ", "), verb, used, total-used, strings.Join(rest, ", "), restVerb, restNeed)
}

// placementMask returns the bit mask of the memory slices a placement covers.
func placementMask(p Placement) uint64 {
	if p.Size >= 64 {
		return ^uint64(0)
	}
	return ((uint64(1) << uint(p.Size)) - 1) << uint(p.Start)
}

// searcher is one exact search over the placements of a list of instances.
type searcher struct {
	profiles []GIProfile // per instance, largest first
	masks    [][]uint64  // per instance, the masks of its placements
	choice   []int       // per instance, the index of its chosen placement
	dead     map[[2]uint64]bool
}

func newSearcher(groups []group) *searcher {
	s := &searcher{}
	for _, g := range groups {
		ms := make([]uint64, len(g.profile.Placements))
		for i, p := range g.profile.Placements {
			ms[i] = placementMask(p)
		}
		for range g.count {
			s.profiles = append(s.profiles, g.profile)
			s.masks = append(s.masks, ms)
		}
	}
	s.choice = make([]int, len(s.profiles))
	return s
}

// run places instances i.. on the free slices of occupied, lowest starts
// first; it records states without completion so none is explored twice.
func (s *searcher) run(i int, occupied uint64) bool {
	if i == len(s.profiles) {
		return true
	}
	key := [2]uint64{uint64(i), occupied}
	if s.dead[key] {
		return false
	}
	for j, m := range s.masks[i] {
		if occupied&m != 0 {
			continue
		}
		s.choice[i] = j
		if s.run(i+1, occupied|m) {
			return true
		}
	}
	if s.dead == nil {
		s.dead = make(map[[2]uint64]bool)
	}
	s.dead[key] = true
	return false
}

// placeAround places the groups on the memory slices not in occupied, and
// returns the slots sorted by start.
func placeAround(groups []group, occupied uint64) ([]Slot, bool) {
	s := newSearcher(groups)
	if !s.run(0, occupied) {
		return nil, false
	}
	slots := make([]Slot, len(s.profiles))
	for i, p := range s.profiles {
		slots[i] = Slot{Profile: p.Name, ProfileID: p.ID, Placement: p.Placements[s.choice[i]]}
	}
	sort.Slice(slots, func(a, b int) bool { return slots[a].Placement.Start < slots[b].Placement.Start })
	return slots, true
}

// fits reports whether the groups can all be placed together.
func fits(groups []group) bool { return newSearcher(groups).run(0, 0) }

// describeConflict explains why groups that pass every count and total check
// still cannot be placed: it finds the largest instances that can be placed
// and the first instance they leave no room for.
func describeConflict(m Model, groups []group) string {
	for j, g := range groups {
		before := groups[:j]
		for c := 1; c <= g.count; c++ {
			try := append(append([]group(nil), before...), group{profile: g.profile, count: c})
			if fits(try) {
				continue
			}
			return conflictWords(m, before, g, c-1)
		}
	}
	// Unreachable when groups do not fit; kept for safety.
	return "no arrangement of the instances fits"
}

// conflictWords phrases a conflict: the instances before (which fit) leave
// room for only fit of the blocked group's instances.
func conflictWords(m Model, before []group, blocked group, fit int) string {
	where := fmt.Sprintf("%s can start at slice %s, %d slice%s each", blocked.profile.Name,
		startsWords(blocked.profile.Placements), blocked.profile.MemorySlices, plural(blocked.profile.MemorySlices))
	if len(before) == 0 {
		return fmt.Sprintf("%s: only %d can be placed at once on %s (%s)", blocked, fit, m.Key, where)
	}
	names := make([]string, len(before))
	for i, g := range before {
		names[i] = g.String()
	}
	room := fmt.Sprintf("no room is left for %s", blocked.profile.Name)
	if fit > 0 {
		room = fmt.Sprintf("room is left for only %d of the %d %s", fit, blocked.count, blocked.profile.Name)
	}
	arrangements := arrangements(before, 2)
	if len(arrangements) == 1 {
		var parts []string
		var occupied uint64
		for _, g := range before {
			var at []string
			for _, sl := range arrangements[0] {
				if sl.Profile == g.profile.Name {
					at = append(at, sl.Placement.String())
					occupied |= placementMask(sl.Placement)
				}
			}
			parts = append(parts, fmt.Sprintf("%s at %s", g.profile.Name, strings.Join(at, ", ")))
		}
		how := strings.Join(parts, " and ")
		if len(before) == 1 {
			how = strings.TrimPrefix(how, before[0].profile.Name+" ")
		}
		return fmt.Sprintf("the only way to place %s is %s, leaving %s, so %s (%s)",
			strings.Join(names, ", "), how, freeWords(occupied, m.MemorySlices), room, where)
	}
	verb := "sit"
	if len(before) == 1 && before[0].count == 1 {
		verb = "sits"
	}
	return fmt.Sprintf("wherever %s %s, %s (%s)", strings.Join(names, ", "), verb, room, where)
}

// arrangements lists up to limit distinct ways to place the groups,
// identical instances taking increasing placements.
func arrangements(groups []group, limit int) [][]Slot {
	var out [][]Slot
	var cur []Slot
	var walk func(gi, left, from int, occupied uint64)
	walk = func(gi, left, from int, occupied uint64) {
		if len(out) >= limit {
			return
		}
		if gi == len(groups) {
			out = append(out, append([]Slot(nil), cur...))
			return
		}
		if left == 0 {
			if gi+1 < len(groups) {
				walk(gi+1, groups[gi+1].count, 0, occupied)
			} else {
				walk(gi+1, 0, 0, occupied)
			}
			return
		}
		p := groups[gi].profile
		for k := from; k < len(p.Placements); k++ {
			m := placementMask(p.Placements[k])
			if occupied&m != 0 {
				continue
			}
			cur = append(cur, Slot{Profile: p.Name, ProfileID: p.ID, Placement: p.Placements[k]})
			walk(gi, left-1, k+1, occupied|m)
			cur = cur[:len(cur)-1]
		}
	}
	if len(groups) == 0 {
		return [][]Slot{nil}
	}
	walk(0, groups[0].count, 0, 0)
	return out
}

// startsWords lists the starts of placements: "0, 2, 4 or 6", or "0-6"
// for a run of three or more consecutive starts.
func startsWords(ps []Placement) string {
	starts := make([]int, len(ps))
	for i, p := range ps {
		starts[i] = p.Start
	}
	if n := len(starts); n >= 3 && starts[n-1]-starts[0] == n-1 {
		return fmt.Sprintf("%d-%d", starts[0], starts[n-1])
	}
	words := make([]string, len(starts))
	for i, s := range starts {
		words[i] = strconv.Itoa(s)
	}
	if len(words) <= 1 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// freeWords names the memory slices not in occupied: "slices 6-7 free",
// "slice 7 free" or "no slice free".
func freeWords(occupied uint64, total int) string {
	var runs []string
	n := 0
	for s := 0; s < total; {
		if occupied&(1<<uint(s)) != 0 {
			s++
			continue
		}
		e := s
		for e+1 < total && occupied&(1<<uint(e+1)) == 0 {
			e++
		}
		n += e - s + 1
		if e == s {
			runs = append(runs, strconv.Itoa(s))
		} else {
			runs = append(runs, fmt.Sprintf("%d-%d", s, e))
		}
		s = e + 1
	}
	if n == 0 {
		return "no slice free"
	}
	return fmt.Sprintf("slice%s %s free", plural(n), strings.Join(runs, ", "))
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
