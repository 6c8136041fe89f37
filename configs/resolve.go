package configs

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/carve-dev/carve/internal/textfmt"
)

// Resolve matches a profile onto the GPUs of a node and returns one
// Assignment per GPU, in index order. A GPU that no entry selects is a
// whole GPU, MIG off, not shared; a profile with entries that selects none
// of the node's GPUs (written for another model) is an error, not a node
// of whole GPUs reported as done. It is also an error, reported as an *Error
// naming the places, when an entry lists a GPU index the node lacks, when
// two entries select one GPU, or when an entry asks MIG (mig or dynamic)
// of a GPU that cannot run it. A dynamic GPU's Assignment has MIG on with
// no instances, and its Dynamic. An unknown profile is an
// *UnknownProfileError.
func (f *File) Resolve(profile string, gpus []GPU) ([]Assignment, error) {
	entries, ok := f.Profiles[profile]
	if !ok {
		return nil, &UnknownProfileError{Name: profile, Known: sortedKeys(f.Profiles)}
	}
	sorted := byIndex(gpus)
	path := textfmt.Field(fieldProfiles, profile)
	var ps problems
	byGPU := matchNode(&ps, path, entries, sorted)
	out := make([]Assignment, 0, len(sorted))
	for k, gpu := range sorted {
		if k > 0 && sorted[k-1].Index == gpu.Index {
			continue // reported by matchNode
		}
		a := Assignment{GPU: gpu.Index, Entry: -1, Replicas: 1}
		if i, ok := byGPU[gpu.Index]; ok {
			e := entries[i]
			a.Entry = i
			if e.MIG != nil {
				if !gpu.MIGCapable {
					ps.add(textfmt.Field(textfmt.Item(path, i), fieldMIG), "GPU %d (%s) cannot run MIG", gpu.Index, gpuModelName(gpu))
				}
				a.MIG = maps.Clone(e.MIG)
			}
			if e.Dynamic != nil {
				if !gpu.MIGCapable {
					ps.add(textfmt.Field(textfmt.Item(path, i), fieldDynamic), "GPU %d (%s) cannot run MIG", gpu.Index, gpuModelName(gpu))
				}
				a.MIG = map[string]int{} // MIG on; the instances are made for claims
				a.Dynamic = &Dynamic{Profiles: slices.Clone(e.Dynamic.Profiles)}
			}
			if ts := e.TimeSlicing; ts != nil {
				if ts.Replicas.PerProfile != nil {
					a.MIGReplicas = maps.Clone(ts.Replicas.PerProfile)
				} else if ts.Replicas.Count > 0 {
					a.Replicas = ts.Replicas.Count
				}
				a.RenameShared = ts.RenameShared
				a.FailRequestsGreaterThanOne = ts.FailRequestsGreaterThanOne
			}
		}
		out = append(out, a)
	}
	if len(entries) > 0 && len(out) > 0 && !slices.ContainsFunc(out, func(a Assignment) bool { return a.Entry >= 0 }) {
		ps.add(path, "selects none of this node's GPUs (%s): its entries are for %s; give this node a profile for its GPUs (a rule or the %s label), or add an entry for them",
			countModels(sorted), describeModels(entries), f.PinLabel())
	}
	if err := ps.err(); err != nil {
		return nil, err
	}
	return out, nil
}

// countModels counts gpus by model: "8 x A100-SXM4-40GB".
func countModels(gpus []GPU) string {
	var names []string
	count := map[string]int{}
	for _, g := range gpus {
		n := gpuModelName(g)
		if count[n] == 0 {
			names = append(names, n)
		}
		count[n]++
	}
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%d x %s", count[n], n)
	}
	return strings.Join(parts, ", ")
}

// describeModels names the model filters of entries, once each.
func describeModels(entries Profile) string {
	var models []string
	for _, e := range entries {
		m := "GPUs without a model filter"
		if e.Model != "" {
			m = "model " + e.Model
		}
		if !slices.Contains(models, m) {
			models = append(models, m)
		}
	}
	return strings.Join(models, ", ")
}

// ProfileHash returns a stable hash of a profile's content: the first 16
// hex digits of the SHA-256 of its canonical JSON (map keys sorted, GPU
// indices and dynamic MIG profiles sorted). Two profiles that differ only
// in name or in the order of GPU indices or dynamic MIG profiles hash
// alike. It returns "" for an unknown profile.
func (f *File) ProfileHash(profile string) string {
	entries, ok := f.Profiles[profile]
	if !ok {
		return ""
	}
	canon := make(Profile, len(entries))
	for i, e := range entries {
		e.GPUs.Indices = slices.Clone(e.GPUs.Indices)
		slices.Sort(e.GPUs.Indices)
		if e.Dynamic != nil {
			e.Dynamic = &Dynamic{Profiles: slices.Sorted(slices.Values(e.Dynamic.Profiles))}
		}
		canon[i] = e
	}
	b, err := json.Marshal(canon)
	if err != nil {
		return "" // cannot happen: every type in a Profile marshals
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// SelectingNone returns the profiles, sorted, that have entries yet select
// none of gpus (written for other GPU models): a node of these GPUs given
// one of them does not resolve it (Resolve). A file for a mixed fleet has
// such profiles for each kind of node, which its rules and labels keep off
// the other kinds.
func (f *File) SelectingNone(gpus []GPU) []string {
	if len(gpus) == 0 {
		return nil
	}
	sorted := byIndex(gpus)
	var out []string
	for _, name := range sortedKeys(f.Profiles) {
		entries := f.Profiles[name]
		if len(entries) == 0 {
			continue
		}
		var ps problems
		if len(matchNode(&ps, "", entries, sorted)) == 0 {
			out = append(out, name)
		}
	}
	return out
}

// byIndex returns a copy of gpus sorted by index, as matchNode takes them.
func byIndex(gpus []GPU) []GPU {
	sorted := slices.Clone(gpus)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Index < sorted[j].Index })
	return sorted
}
