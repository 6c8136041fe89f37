package configs

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/carve-dev/carve/internal/textfmt"
)

// Validate checks the MIG geometry of every profile entry with mig or
// dynamic against g, and reports every problem at once as an *Error.
//
// With the GPUs of a node (gpus not nil), each entry is checked on the
// models of the GPUs it selects there: GPU indices the node lacks, GPUs
// that two entries select, MIG (mig or dynamic) on GPUs that cannot run
// it, MIG profiles the model lacks, and sets of instances that do not fit
// (g.Fit).
//
// Without a node (gpus nil), an entry with a model filter is checked on
// every model of g the filter matches (a filter that matches none
// is a problem); an entry without one must fit on at least one model that
// has all of its MIG profiles, since which models it lands on is known only
// on a node.
func (f *File) Validate(g Geometry, gpus []GPU) error {
	_, err := f.Check(g, gpus)
	return err
}

// Check is Validate that also returns the places it could not check
// (Problem.Unverified): without a node, an entry whose model filter
// matches no model of g, and an entry without a filter none of whose MIG
// profiles any model of g has. On a mixed fleet such an entry is for a GPU
// newer than the catalogue; it is checked where it applies, on the nodes
// that have that GPU (ValidateProfile with their GPUs), and does not make
// the file invalid elsewhere.
func (f *File) Check(g Geometry, gpus []GPU) ([]Problem, error) {
	if g == nil {
		return nil, errors.New("configs: validate: no geometry to check MIG profiles against")
	}
	var ps problems
	models := knownModels(g)
	for _, name := range sortedKeys(f.Profiles) {
		checkProfile(&ps, name, f.Profiles[name], g, models, gpus)
	}
	return ps.unverifiedPlaces(), ps.err()
}

// ValidateProfile checks the MIG geometry of one profile as Validate checks
// every profile: on the GPUs of a node when gpus is not nil, else on the
// models of g. It reports the profile's problems as an *Error, and an
// unknown profile as an *UnknownProfileError.
//
// On a fleet of mixed nodes a file holds profiles meant for other nodes (GPU
// indices this node lacks, MIG profiles of another model), so an agent
// validates the whole file without a node (Validate with gpus nil) and only
// the profile it selects on its own GPUs.
func (f *File) ValidateProfile(profile string, g Geometry, gpus []GPU) error {
	if g == nil {
		return fmt.Errorf("configs: validate profile %q: no geometry to check MIG profiles against", profile)
	}
	entries, ok := f.Profiles[profile]
	if !ok {
		return &UnknownProfileError{Name: profile, Known: sortedKeys(f.Profiles)}
	}
	var ps problems
	checkProfile(&ps, profile, entries, g, knownModels(g), gpus)
	return ps.err()
}

// checkProfile validates the profile name: on a node's GPUs when gpus is not
// nil, else on models.
func checkProfile(ps *problems, name string, entries Profile, g Geometry, models []GPUModel, gpus []GPU) {
	path := textfmt.Field(fieldProfiles, name)
	if gpus != nil {
		checkNode(ps, path, entries, g, models, gpus)
		return
	}
	checkModels(ps, path, entries, g, models)
}

// entrySelects reports whether an entry selects a GPU: by index and, when
// it has one, by its model filter.
func entrySelects(e Entry, gpu GPU) bool {
	return e.GPUs.Selects(gpu.Index) && MatchModel(e.Model, GPUModel{Key: gpu.Model, Product: gpu.Product})
}

// matchNode matches a profile's entries onto a node's GPUs. It reports GPU
// indices listed by an entry that the node lacks, GPUs selected by two
// entries, and GPUs the node lists twice, and returns, per GPU index, the
// index of the first entry that selects it.
func matchNode(ps *problems, path string, entries Profile, gpus []GPU) map[int]int {
	have := make(map[int]bool, len(gpus))
	var indices []int
	for _, gpu := range gpus {
		if have[gpu.Index] {
			ps.add("", "the node lists GPU %d twice", gpu.Index)
			continue
		}
		have[gpu.Index] = true
		indices = append(indices, gpu.Index)
	}
	sort.Ints(indices)
	for i, e := range entries {
		var missing []int
		for _, idx := range e.GPUs.Indices {
			if !e.GPUs.All && !have[idx] {
				missing = append(missing, idx)
			}
		}
		if len(missing) > 0 {
			sort.Ints(missing)
			verb := "is"
			if len(missing) > 1 {
				verb = "are"
			}
			ps.add(textfmt.Field(textfmt.Item(path, i), fieldGPUs), "%s %s not on this node (it has %s)", textfmt.GPUs(missing), verb, describeNode(indices))
		}
	}
	byGPU := make(map[int]int, len(gpus))
	for _, gpu := range gpus {
		for i, e := range entries {
			if !entrySelects(e, gpu) {
				continue
			}
			if first, ok := byGPU[gpu.Index]; ok && first != i {
				ps.add(textfmt.Field(textfmt.Item(path, i), fieldGPUs), "GPU %d (%s) is also selected by %s; a GPU may be selected by one entry only",
					gpu.Index, gpuModelName(gpu), textfmt.Item(path, first))
				continue
			}
			byGPU[gpu.Index] = i
		}
	}
	return byGPU
}

func describeNode(indices []int) string {
	if len(indices) == 1 {
		return textfmt.GPUs(indices) + " only"
	}
	return textfmt.GPUs(indices)
}

func gpuModelName(gpu GPU) string {
	if gpu.Model != "" {
		return gpu.Model
	}
	if gpu.Product != "" {
		return gpu.Product
	}
	return "unknown model"
}

// checkNode validates a profile on the GPUs of a node.
func checkNode(ps *problems, path string, entries Profile, g Geometry, models []GPUModel, gpus []GPU) {
	byGPU := matchNode(ps, path, entries, gpus)
	for i, e := range entries {
		if e.MIG == nil && e.Dynamic == nil {
			continue
		}
		field := fieldMIG
		if e.Dynamic != nil {
			field = fieldDynamic
		}
		p := textfmt.Field(textfmt.Item(path, i), field)
		capable := map[string][]int{}   // model -> GPU indices
		incapable := map[string][]int{} // model -> GPU indices
		for _, gpu := range gpus {
			if ei, ok := byGPU[gpu.Index]; !ok || ei != i {
				continue
			}
			name := gpuModelName(gpu)
			if gpu.MIGCapable {
				capable[name] = append(capable[name], gpu.Index)
			} else {
				incapable[name] = append(incapable[name], gpu.Index)
			}
		}
		for _, name := range sortedKeys(incapable) {
			idx := incapable[name]
			sort.Ints(idx)
			ps.add(p, "%s (%s) cannot run MIG", textfmt.GPUs(idx), name)
		}
		for _, name := range sortedKeys(capable) {
			idx := capable[name]
			sort.Ints(idx)
			where := fmt.Sprintf(" (%s)", textfmt.GPUs(idx))
			m, ok := findModel(models, name)
			switch {
			case !ok:
				ps.add(p, "no MIG geometry is known for %s%s", name, where)
			case e.Dynamic != nil:
				checkDynamic(ps, p, m, e.Dynamic, where)
			default:
				checkMIG(ps, p, g, m, e.MIG, where)
			}
		}
	}
}

func findModel(models []GPUModel, key string) (GPUModel, bool) {
	for _, m := range models {
		if strings.EqualFold(m.Key, key) {
			return m, true
		}
	}
	return GPUModel{}, false
}

// checkModels validates a profile on the models a geometry knows.
func checkModels(ps *problems, path string, entries Profile, g Geometry, models []GPUModel) {
	keys := make([]string, len(models))
	for i, m := range models {
		keys[i] = m.Key
	}
	for i, e := range entries {
		ep := textfmt.Item(path, i)
		switch {
		case e.Dynamic != nil:
			checkDynamicModels(ps, ep, e, models, keys)
		case e.MIG == nil:
			checkSharingModel(ps, textfmt.Field(ep, fieldModel), e.Model, models, keys)
		default:
			checkMIGModels(ps, ep, e, g, models, keys)
		}
	}
	checkModelOverlaps(ps, path, entries, models)
}

// checkMIGModels checks the mig of the entry at path without a node: on
// every model its filter matches, or, without a filter, that some model
// that has its MIG profiles can hold its instances.
func checkMIGModels(ps *problems, path string, e Entry, g Geometry, models []GPUModel, keys []string) {
	p := textfmt.Field(path, fieldMIG)
	cands, ok := candidates(ps, path, p, e.Model, sortedKeys(e.MIG), models, keys)
	if !ok {
		return
	}
	if e.Model != "" {
		for _, m := range cands {
			checkMIG(ps, p, g, m, e.MIG, "")
		}
		return
	}
	// Without a filter or a node, the entry is fine if some model that
	// has its profiles can hold it; the node's own GPUs are checked when
	// it is applied (and with carvectl validate --gpus).
	var why []string
	for _, m := range cands {
		err := g.Fit(m.Key, e.MIG)
		if err == nil {
			return
		}
		why = append(why, fmt.Sprintf("on %s: %v", m.Key, err))
	}
	ps.add(p, "%s cannot be placed on any known GPU model (%s)", describeMIG(e.MIG), strings.Join(why, "; "))
}

// checkDynamicModels checks the dynamic MIG profiles of the entry at path
// without a node: on every model its filter matches, or, without a
// filter, that some model has them all.
func checkDynamicModels(ps *problems, path string, e Entry, models []GPUModel, keys []string) {
	p := textfmt.Field(path, fieldDynamic)
	names := slices.Sorted(slices.Values(e.Dynamic.Profiles))
	cands, ok := candidates(ps, path, textfmt.Field(p, fieldProfiles), e.Model, names, models, keys)
	if !ok || e.Model == "" {
		return
	}
	for _, m := range cands {
		checkDynamic(ps, p, m, e.Dynamic, "")
	}
}

// candidates returns the models an entry at path may land on, judged
// without a node: those its model filter matches, or, without a filter,
// those that have all of its MIG profile names (at the place p). It
// reports an entry for no model known here as unverified, and one whose
// names no model has all of as a problem, and then returns false; it
// returns false too for an entry without a filter or names, which has
// nothing to check without a node.
func candidates(ps *problems, path, p, filter string, names []string, models []GPUModel, keys []string) ([]GPUModel, bool) {
	var cands []GPUModel
	if filter != "" {
		for _, m := range models {
			if MatchModel(filter, m) {
				cands = append(cands, m)
			}
		}
		if len(cands) == 0 {
			ps.unverified(textfmt.Field(path, fieldModel), "%q matches no GPU model known here (known: %s); the entry is checked only on nodes that have such a GPU", filter, strings.Join(keys, ", "))
			return nil, false
		}
		return cands, true
	}
	if len(names) == 0 {
		return nil, false
	}
	var has []string
	anyKnown := false
	for _, m := range models {
		var known []string
		for _, n := range names {
			if slices.Contains(m.Profiles, n) {
				known = append(known, n)
			}
		}
		if len(known) == len(names) {
			cands = append(cands, m)
		}
		anyKnown = anyKnown || len(known) > 0
		if len(known) == 0 {
			known = []string{"none of them"}
		}
		has = append(has, m.Key+" has "+strings.Join(known, ", "))
	}
	switch {
	case len(cands) == 0 && !anyKnown:
		ps.unverified(p, "no GPU model known here has any of %s; the entry is checked only on nodes whose GPUs have them", strings.Join(names, ", "))
		return nil, false
	case len(cands) == 0:
		ps.add(p, "no known GPU model has all of %s (%s); add a model filter or fix the names",
			strings.Join(names, ", "), strings.Join(has, "; "))
		return nil, false
	}
	return cands, true
}

// checkSharingModel notes the model filter of an entry without MIG when it
// matches no GPU model known here, MIG-capable or not: a typo would
// otherwise select nothing without a word. It is a note (unverified), not
// an error, since the filter may name a GPU newer than carve.
func checkSharingModel(ps *problems, path, filter string, models []GPUModel, keys []string) {
	if filter == "" || slices.ContainsFunc(models, func(m GPUModel) bool { return MatchModel(filter, m) }) {
		return
	}
	others := productsWithoutMIG()
	for _, product := range others {
		if MatchModel(filter, GPUModel{Product: product}) {
			return
		}
	}
	ps.unverified(path, "%q matches no GPU model known here (known: %s, and GPUs without MIG such as %s); the entry is checked only on nodes that have such a GPU",
		filter, strings.Join(keys, ", "), strings.Join(others[:4], ", "))
}

// checkMIG checks that a model has the entry's MIG profiles and can hold
// all the instances at once.
func checkMIG(ps *problems, path string, g Geometry, m GPUModel, mig map[string]int, where string) {
	var unknown []string
	for _, name := range sortedKeys(mig) {
		if !slices.Contains(m.Profiles, name) {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		verb := "is not a MIG profile"
		if len(unknown) > 1 {
			verb = "are not MIG profiles"
		}
		ps.add(path, "%s %s of %s%s; it has %s", strings.Join(unknown, ", "), verb, m.Key, where, strings.Join(m.Profiles, ", "))
		return
	}
	if len(mig) == 0 {
		return
	}
	if err := g.Fit(m.Key, mig); err != nil {
		ps.add(path, "%s cannot be placed on %s%s: %v", describeMIG(mig), m.Key, where, err)
	}
}

// checkDynamic checks that a model has the dynamic MIG profiles of an
// entry, reporting each it lacks at its place in the list (p is the
// entry's dynamic field).
func checkDynamic(ps *problems, p string, m GPUModel, dyn *Dynamic, where string) {
	for k, name := range dyn.Profiles {
		if !slices.Contains(m.Profiles, name) {
			ps.add(textfmt.Item(textfmt.Field(p, fieldProfiles), k), "%s is not a MIG profile of %s%s; it has %s", name, m.Key, where, strings.Join(m.Profiles, ", "))
		}
	}
}

// describeMIG writes a set of instances largest first:
// "3g.40gb x2 + 1g.10gb".
func describeMIG(mig map[string]int) string {
	names := sortedKeys(mig)
	sort.SliceStable(names, func(i, j int) bool {
		ci, cj := computeSlices(names[i]), computeSlices(names[j])
		if ci != cj {
			return ci > cj
		}
		return names[i] < names[j]
	})
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = n
		if mig[n] != 1 {
			parts[i] += fmt.Sprintf(" x%d", mig[n])
		}
	}
	return strings.Join(parts, " + ")
}

// computeSlices reads the compute slices of a MIG profile name ("3g.40gb"
// -> 3), 0 when the name does not start with them.
func computeSlices(name string) int {
	n, _, ok := strings.Cut(name, "g")
	if !ok {
		return 0
	}
	c, err := strconv.Atoi(n)
	if err != nil {
		return 0
	}
	return c
}
