package configs

import (
	"slices"

	"github.com/carve-dev/carve/internal/textfmt"
)

// Two entries of a profile must not select the same GPU. The checks here
// report each entry that does once, naming the first earlier entry it
// overlaps, and take time linear in the entries and the GPU indices they
// list (never a pass over every pair of entries).

// gpuSet is a set of GPU indices 0..MaxGPUIndex.
type gpuSet [(MaxGPUIndex + 64) / 64]uint64

func setOf(sel GPUSelector) gpuSet {
	var s gpuSet
	for _, i := range sel.Indices {
		if i >= 0 && i <= MaxGPUIndex {
			s[i/64] |= 1 << (i % 64)
		}
	}
	return s
}

func (s gpuSet) indices() []int {
	var out []int
	for i := range MaxGPUIndex + 1 {
		if s[i/64]&(1<<(i%64)) != 0 {
			out = append(out, i)
		}
	}
	return out
}

// commonGPUs describes the GPUs two selectors both select, "" for none.
func commonGPUs(a, b GPUSelector) string {
	switch {
	case a.All && b.All:
		return "every GPU is"
	case a.All:
		return describeGPUs(b.Indices)
	case b.All:
		return describeGPUs(a.Indices)
	}
	sa, sb := setOf(a), setOf(b)
	var both gpuSet
	for i := range both {
		both[i] = sa[i] & sb[i]
	}
	return describeGPUs(both.indices())
}

// describeGPUs writes "GPU 3 is" or "GPUs 0-1 are", "" for none.
func describeGPUs(idx []int) string {
	idx = slices.Sorted(slices.Values(idx))
	switch len(idx) {
	case 0:
		return ""
	case 1:
		return textfmt.GPUs(idx) + " is"
	}
	return textfmt.GPUs(idx) + " are"
}

// firstSeen remembers, for the entries of one class, the first that
// selects all GPUs, the first of any kind, and the first per GPU index.
type firstSeen struct {
	all, any int
	at       map[int]int
}

func newFirstSeen() *firstSeen { return &firstSeen{all: -1, any: -1, at: map[int]int{}} }

func (f *firstSeen) add(i int, sel GPUSelector) {
	if f.any < 0 {
		f.any = i
	}
	if sel.All {
		if f.all < 0 {
			f.all = i
		}
		return
	}
	for _, g := range sel.Indices {
		if _, ok := f.at[g]; !ok {
			f.at[g] = i
		}
	}
}

// first returns the first remembered entry that sel overlaps, -1 for none.
func (f *firstSeen) first(sel GPUSelector) int {
	if sel.All {
		return f.any
	}
	best := f.all
	for _, g := range sel.Indices {
		if i, ok := f.at[g]; ok && (best < 0 || i < best) {
			best = i
		}
	}
	return best
}

// earlier returns the smaller of two entry indices, ignoring -1.
func earlier(a, b int) int {
	if a < 0 || (b >= 0 && b < a) {
		return b
	}
	return a
}

// overlaps reports GPUs that two entries of a profile could both select,
// judged without hardware knowledge: entries overlap when their index sets
// meet and either has no model filter or both filters are the same.
// Validate repeats the check with the models of a geometry or a node.
func (d *decoder) overlaps(path string, entries Profile) {
	every := newFirstSeen()            // all entries
	byClass := map[string]*firstSeen{} // entries by normalised model filter ("" for none)
	for j, e := range entries {
		class := normalModel(e.Model)
		i := every.first(e.GPUs)
		if class != "" {
			i = -1
			for _, c := range []string{"", class} {
				if f := byClass[c]; f != nil {
					i = earlier(i, f.first(e.GPUs))
				}
			}
		}
		if i >= 0 {
			d.overlap(path, entries, i, j)
		}
		every.add(j, e.GPUs)
		if byClass[class] == nil {
			byClass[class] = newFirstSeen()
		}
		byClass[class].add(j, e.GPUs)
	}
}

// overlap reports that entry j overlaps the earlier entry i.
func (d *decoder) overlap(path string, entries Profile, i, j int) {
	a, b := entries[i], entries[j]
	if a.GPUs.All && a.Model == "" {
		d.ps.add(textfmt.Item(path, j), "unreachable: %s (gpus: all, no model filter) already selects every GPU", textfmt.Item(path, i))
		return
	}
	d.ps.add(textfmt.Field(textfmt.Item(path, j), fieldGPUs), "%s also selected by %s; a GPU may be selected by one entry only",
		commonGPUs(a.GPUs, b.GPUs), textfmt.Item(path, i))
}

// firstTwo remembers the first entry seen and the first entry of another
// class than it, so that it can answer "the first entry of a class other
// than c" for any c.
type firstTwo struct {
	n     int // entries remembered: 0, 1 or 2
	i     [2]int
	class [2]string
}

func (f *firstTwo) add(i int, class string) {
	switch {
	case f.n == 0:
		f.i[0], f.class[0], f.n = i, class, 1
	case f.n == 1 && class != f.class[0]:
		f.i[1], f.class[1], f.n = i, class, 2
	}
}

// other returns the first remembered entry whose class is not class, -1
// for none.
func (f *firstTwo) other(class string) int {
	for k := range f.n {
		if f.class[k] != class {
			return f.i[k]
		}
	}
	return -1
}

// crossSeen is firstSeen for entries of mixed classes: it finds the first
// earlier entry of another class that a selector overlaps.
type crossSeen struct {
	all, any firstTwo
	at       map[int]*firstTwo
}

func (f *crossSeen) add(i int, class string, sel GPUSelector) {
	f.any.add(i, class)
	if sel.All {
		f.all.add(i, class)
		return
	}
	for _, g := range sel.Indices {
		if f.at[g] == nil {
			f.at[g] = &firstTwo{}
		}
		f.at[g].add(i, class)
	}
}

func (f *crossSeen) first(class string, sel GPUSelector) int {
	if sel.All {
		return f.any.other(class)
	}
	best := f.all.other(class)
	for _, g := range sel.Indices {
		if t := f.at[g]; t != nil {
			best = earlier(best, t.other(class))
		}
	}
	return best
}

// checkModelOverlaps reports entries whose index sets meet and whose
// different model filters both match a known model (Parse reports the
// other overlaps): each such entry once, naming the first earlier entry
// and a model both filters match.
func checkModelOverlaps(ps *problems, path string, entries Profile, models []GPUModel) {
	seen := make([]crossSeen, len(models)) // per model, the entries whose filter matches it
	for m := range seen {
		seen[m].at = map[int]*firstTwo{}
	}
	for j, e := range entries {
		if e.Model == "" {
			continue
		}
		class := normalModel(e.Model)
		first, on := -1, ""
		for m, model := range models {
			if !MatchModel(e.Model, model) {
				continue
			}
			if i := seen[m].first(class, e.GPUs); i >= 0 && (first < 0 || i < first) {
				first, on = i, model.Key
			}
			seen[m].add(j, class, e.GPUs)
		}
		if first >= 0 {
			ps.add(textfmt.Field(textfmt.Item(path, j), fieldGPUs), "on %s, %s also selected by %s (both model filters match %s)",
				on, commonGPUs(entries[first].GPUs, e.GPUs), textfmt.Item(path, first), on)
		}
	}
}
