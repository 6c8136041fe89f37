// Package partitionable models a MIG-capable GPU as Dynamic Resource
// Allocation partitionable devices (KEP-4815): a set of counters that say
// what MIG placements conflict on, and one candidate device per legal
// (profile, placement) that consumes exactly the counters its placement
// takes, so that the scheduler allocates together only devices the GPU can
// create together. It also orders the placements so that the scheduler's
// first-fit allocator packs them (Layout.Placements).
//
// It knows nothing of the driver's device names and attributes; package dra
// builds the published devices and slices from a Layout.
package partitionable

import (
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/carve-dev/carve/partition"
)

// Names of the counters besides the memory slices (MemorySliceCounter) and
// the per-profile instance counts (InstancesCounter).
const (
	// CounterComputeSlices counts the GPU's compute slices.
	CounterComputeSlices = "compute-slices"
	// CounterMediaExtensions is the GPU's one set of media extensions,
	// which a "+me" or "+me.all" instance takes.
	CounterMediaExtensions = "media-extensions"
	// CounterDecoders, CounterEncoders, CounterJPEGs and CounterOFAs count
	// the GPU's media engines of each kind.
	CounterDecoders = "video-decoders"
	CounterEncoders = "video-encoders"
	CounterJPEGs    = "jpeg-decoders"
	CounterOFAs     = "optical-flow-accelerators"
)

// MemorySliceCounter names the counter of memory slice i (the first slice
// of a run of slices that every placement covers all or none of).
func MemorySliceCounter(i int) string { return fmt.Sprintf("memory-slice-%d", i) }

// InstancesCounter names the counter that bounds the instances of a
// profile: "instances-1g10gb-me" for "1g.10gb+me".
func InstancesCounter(profile string) string { return "instances-" + ProfileLabel(profile) }

// ProfileLabel writes a MIG profile name in the characters a DNS label
// holds: lower case, dots dropped, "+" as "-" and "-" as "-no" ("1g.24gb+me"
// is "1g24gb-me", "1g.24gb-me" is "1g24gb-nome", "1g.24gb+me.all" is
// "1g24gb-meall").
func ProfileLabel(profile string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(profile) {
		switch {
		case r == '.':
		case r == '+':
			b.WriteByte('-')
		case r == '-':
			b.WriteString("-no")
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	return strings.Trim(b.String(), "-")
}

// Layout is how one GPU model offers its MIG placements as partitionable
// devices: the counters of one GPU with their values, and the candidate
// placements in the order the devices are published.
type Layout struct {
	// Model is the GPU model.
	Model partition.Model
	// Counters are the counter names in a fixed order; Capacity holds each
	// one's value on one GPU.
	Counters []string
	Capacity map[string]int64
	// Placements are the offered (profile, placement) pairs, in publishing
	// order (see NewLayout).
	Placements []Placement
}

// Placement is one candidate MIG device: a profile at a placement, and the
// counters it consumes.
type Placement struct {
	// Profile is the GPU instance profile.
	Profile partition.GIProfile
	// At is where its GPU instance goes.
	At partition.Placement
	// Consumes holds the amount of each counter it takes (no zero
	// entries).
	Consumes map[string]int64
}

// NewLayout returns the layout of model m offering the profiles named
// (nil: every profile of the model).
//
// The counters are derived from the rules the hardware (and the
// simulator) enforces when a GPU instance is created: no two placements
// overlap, at most MaxCount instances of a profile, at most the GPU's
// compute slices and media engines in all, at most one instance with media
// extensions. Each rule is a bound on a sum over the instances, so each is
// a counter: one per memory slice (value 1, taken by each placement that
// covers it; slices that every offered placement covers together count
// once), one for compute slices, one per kind of media engine, one for the
// media extensions and one per profile's instance count. A counter is kept
// only when some set of placements that the counters kept before it allow
// would break its rule; the others follow from those kept, so the sets
// the counters allow are exactly the sets the hardware allows, and no
// counter is published whose rule those before it already enforce. The
// tests prove this against the simulator for every model of the
// catalogue.
//
// The placements are published smallest profile first (the model's order),
// and a profile's placements in the order that keeps the largest profiles
// placeable: each placement is weighed by the other placements it
// overlaps, counted per profile from the largest profile down and
// compared in that order, fewer first, then higher start first. On an
// eight-slice GPU a 1g takes slice 6 first and slice 0 last, a 3g takes
// 4:4 before 0:4, which leaves the 4g and 7g placements at 0 free for as
// long as possible. A first-fit allocator that takes devices in this order
// packs a GPU as a person would.
func NewLayout(m partition.Model, profiles []string) (*Layout, error) {
	offered, err := offeredProfiles(m, profiles)
	if err != nil {
		return nil, err
	}
	if len(offered) == 0 {
		return nil, fmt.Errorf("%s: no MIG profile offered", m.Key)
	}
	l := &Layout{Model: m, Capacity: map[string]int64{}}
	for _, p := range offered {
		for _, at := range p.Placements {
			l.Placements = append(l.Placements, Placement{Profile: p, At: at, Consumes: map[string]int64{}})
		}
	}
	l.addMemoryCounters()
	for _, c := range candidates(m, offered) {
		l.addIfNeeded(c)
	}
	for _, name := range l.Counters {
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			return nil, fmt.Errorf("%s: counter %q: %s", m.Key, name, strings.Join(errs, "; "))
		}
	}
	if len(l.Counters) > resourceapi.ResourceSliceMaxCountersPerCounterSet {
		return nil, fmt.Errorf("%s: its placements need %d counters, more than a counter set holds (%d)",
			m.Key, len(l.Counters), resourceapi.ResourceSliceMaxCountersPerCounterSet)
	}
	l.order()
	return l, nil
}

// offeredProfiles returns the model's profiles that names lists (all for
// nil), in the model's order; a name the model lacks is an error.
func offeredProfiles(m partition.Model, names []string) ([]partition.GIProfile, error) {
	if len(m.Profiles) == 0 {
		return nil, fmt.Errorf("%s has no MIG profiles", m.Key)
	}
	if m.MemorySlices > 64 {
		return nil, fmt.Errorf("%s has %d memory slices; carve handles at most 64", m.Key, m.MemorySlices)
	}
	for _, n := range names {
		if _, ok := m.Profile(n); !ok {
			return nil, fmt.Errorf("unknown MIG profile %q for %s (it has %s)", n, m.Key, strings.Join(m.ProfileNames(), ", "))
		}
	}
	labels := map[string]string{}
	var out []partition.GIProfile
	for _, p := range m.Profiles {
		if other, dup := labels[ProfileLabel(p.Name)]; dup {
			return nil, fmt.Errorf("%s: profiles %s and %s have the same label %s", m.Key, other, p.Name, ProfileLabel(p.Name))
		}
		labels[ProfileLabel(p.Name)] = p.Name
		if names == nil || slices.Contains(names, p.Name) {
			out = append(out, p)
		}
	}
	return out, nil
}

// addMemoryCounters adds a counter per run of memory slices that the
// offered placements cover together: two slices with the same set of
// covering placements are one counter.
func (l *Layout) addMemoryCounters() {
	seen := map[string]string{}
	for s := range l.Model.MemorySlices {
		var cover []byte
		for _, pl := range l.Placements {
			if pl.At.Start <= s && s < pl.At.End() {
				cover = append(cover, '1')
			} else {
				cover = append(cover, '0')
			}
		}
		key := string(cover)
		if !strings.Contains(key, "1") {
			continue
		}
		name, ok := seen[key]
		if !ok {
			name = MemorySliceCounter(s)
			seen[key] = name
			l.Counters = append(l.Counters, name)
			l.Capacity[name] = 1
		}
		for i := range l.Placements {
			if key[i] == '1' {
				l.Placements[i].Consumes[name] = 1
			}
		}
	}
}

// candidate is a rule of the hardware besides the memory slices, as a
// counter: its value on a GPU and what one instance of a profile takes.
type candidate struct {
	name  string
	value int64
	take  func(partition.GIProfile) int64
}

// candidates lists the rules in the order NewLayout weighs them.
func candidates(m partition.Model, offered []partition.GIProfile) []candidate {
	media := m.MediaEngines()
	out := []candidate{
		{CounterComputeSlices, int64(m.ComputeSlices), func(p partition.GIProfile) int64 { return int64(p.ComputeSlices) }},
		{CounterMediaExtensions, 1, func(p partition.GIProfile) int64 {
			if p.MediaExtensions {
				return 1
			}
			return 0
		}},
		{CounterDecoders, int64(media.Decoders), func(p partition.GIProfile) int64 { return int64(p.Decoders) }},
		{CounterEncoders, int64(media.Encoders), func(p partition.GIProfile) int64 { return int64(p.Encoders) }},
		{CounterJPEGs, int64(media.JPEGs), func(p partition.GIProfile) int64 { return int64(p.JPEGs) }},
		{CounterOFAs, int64(media.OFAs), func(p partition.GIProfile) int64 { return int64(p.OFAs) }},
	}
	for _, p := range offered {
		out = append(out, candidate{InstancesCounter(p.Name), int64(p.MaxCount), func(q partition.GIProfile) int64 {
			if q.ID == p.ID {
				return 1
			}
			return 0
		}})
	}
	return out
}

// addIfNeeded adds the candidate's counter when some set of placements
// that the counters so far allow breaks its rule.
func (l *Layout) addIfNeeded(c candidate) {
	take := make([]int64, len(l.Placements))
	for i, pl := range l.Placements {
		take[i] = c.take(pl.Profile)
	}
	if !l.exceeds(take, c.value) {
		return
	}
	l.Counters = append(l.Counters, c.name)
	l.Capacity[c.name] = c.value
	for i := range l.Placements {
		if take[i] > 0 {
			l.Placements[i].Consumes[c.name] = take[i]
		}
	}
}

// exceeds reports whether some set of placements the counters allow takes
// more than limit in all, where placement i takes take[i]: a search over
// the sets, each placement in or out, cut where the counters refuse.
func (l *Layout) exceeds(take []int64, limit int64) bool {
	used := map[string]int64{}
	var walk func(i int, sum int64) bool
	walk = func(i int, sum int64) bool {
		if sum > limit {
			return true
		}
		if i == len(l.Placements) {
			return false
		}
		if walk(i+1, sum) {
			return true
		}
		if take[i] == 0 || !l.fits(used, l.Placements[i]) {
			return false
		}
		add(used, l.Placements[i].Consumes, 1)
		found := walk(i+1, sum+take[i])
		add(used, l.Placements[i].Consumes, -1)
		return found
	}
	return walk(0, 0)
}

// fits reports whether pl's consumption fits beside used.
func (l *Layout) fits(used map[string]int64, pl Placement) bool {
	for c, n := range pl.Consumes {
		if used[c]+n > l.Capacity[c] {
			return false
		}
	}
	return true
}

func add(used, take map[string]int64, sign int64) {
	for c, n := range take {
		used[c] += sign * n
	}
}

// Allows reports whether the counters allow the placements (indexes into
// Placements) to be allocated together.
func (l *Layout) Allows(set []int) bool {
	used := map[string]int64{}
	for _, i := range set {
		add(used, l.Placements[i].Consumes, 1)
	}
	for c, n := range used {
		if n > l.Capacity[c] {
			return false
		}
	}
	return true
}

// order sorts the placements into publishing order; see NewLayout.
func (l *Layout) order() {
	rank := map[int]int{} // profile ID -> position in the model's order
	for i, p := range l.Model.Profiles {
		rank[p.ID] = i
	}
	largest := slices.Clone(l.Model.Profiles)
	slices.SortStableFunc(largest, func(a, b partition.GIProfile) int { return largerFirst(a, b, rank) })
	weight := func(pl Placement) []int {
		w := make([]int, len(largest))
		for k, p := range largest {
			for _, at := range p.Placements {
				if (p.ID != pl.Profile.ID || at != pl.At) && at.Overlaps(pl.At) {
					w[k]++
				}
			}
		}
		return w
	}
	weights := make(map[[3]int][]int, len(l.Placements))
	for _, pl := range l.Placements {
		weights[[3]int{pl.Profile.ID, pl.At.Start, pl.At.Size}] = weight(pl)
	}
	slices.SortStableFunc(l.Placements, func(a, b Placement) int {
		if ra, rb := rank[a.Profile.ID], rank[b.Profile.ID]; ra != rb {
			return ra - rb
		}
		wa, wb := weights[[3]int{a.Profile.ID, a.At.Start, a.At.Size}], weights[[3]int{b.Profile.ID, b.At.Start, b.At.Size}]
		if c := slices.Compare(wa, wb); c != 0 {
			return c
		}
		return b.At.Start - a.At.Start
	})
}

// largerFirst orders profiles largest first: more memory slices, then
// more compute slices, then the model's order.
func largerFirst(a, b partition.GIProfile, rank map[int]int) int {
	if a.MemorySlices != b.MemorySlices {
		return b.MemorySlices - a.MemorySlices
	}
	if a.ComputeSlices != b.ComputeSlices {
		return b.ComputeSlices - a.ComputeSlices
	}
	return rank[a.ID] - rank[b.ID]
}

// CounterSet returns the counter set of one GPU with this layout, named
// name.
func (l *Layout) CounterSet(name string) resourceapi.CounterSet {
	cs := resourceapi.CounterSet{Name: name, Counters: make(map[string]resourceapi.Counter, len(l.Counters))}
	for _, c := range l.Counters {
		cs.Counters[c] = resourceapi.Counter{Value: *resource.NewQuantity(l.Capacity[c], resource.DecimalSI)}
	}
	return cs
}

// Consumption returns what placement pl takes from the counter set named
// set.
func (pl Placement) Consumption(set string) resourceapi.DeviceCounterConsumption {
	dc := resourceapi.DeviceCounterConsumption{CounterSet: set, Counters: make(map[string]resourceapi.Counter, len(pl.Consumes))}
	for c, n := range pl.Consumes {
		dc.Counters[c] = resourceapi.Counter{Value: *resource.NewQuantity(n, resource.DecimalSI)}
	}
	return dc
}
