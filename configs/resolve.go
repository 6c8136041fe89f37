package configs

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"slices"
	"sort"

	"github.com/carve-dev/carve/internal/textfmt"
)

// Resolve matches a profile onto the GPUs of a node and returns one
// Assignment per GPU, in index order. A GPU that no entry selects is a
// whole GPU, MIG off, not shared. It is an error, reported as an *Error
// naming the places, when an entry lists a GPU index the node lacks, when
// two entries select one GPU, or when an entry asks MIG of a GPU that
// cannot run it. An unknown profile is an *UnknownProfileError.
func (f *File) Resolve(profile string, gpus []GPU) ([]Assignment, error) {
	entries, ok := f.Profiles[profile]
	if !ok {
		return nil, &UnknownProfileError{Name: profile, Known: sortedKeys(f.Profiles)}
	}
	sorted := slices.Clone(gpus)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Index < sorted[j].Index })
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
	if err := ps.err(); err != nil {
		return nil, err
	}
	return out, nil
}

// ProfileHash returns a stable hash of a profile's content: the first 16
// hex digits of the SHA-256 of its canonical JSON (map keys sorted, GPU
// indices sorted). Two profiles that differ only in name or in the order of
// GPU indices hash alike. It returns "" for an unknown profile.
func (f *File) ProfileHash(profile string) string {
	entries, ok := f.Profiles[profile]
	if !ok {
		return ""
	}
	canon := make(Profile, len(entries))
	for i, e := range entries {
		e.GPUs.Indices = slices.Clone(e.GPUs.Indices)
		slices.Sort(e.GPUs.Indices)
		canon[i] = e
	}
	b, err := json.Marshal(canon)
	if err != nil {
		return "" // cannot happen: every type in a Profile marshals
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}
