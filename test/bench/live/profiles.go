package live

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/carve-dev/carve/configs"
)

// editedProfile is the profile the node is pinned to for the ConfigMap
// trigger: its content changes, its name does not.
const editedProfile = "edited"

// machine is the simulated machine the agent runs on; the profiles and the
// counts below are for its eight H100-80GB.
const machine = "dgx-h100"

// kind is one kind of change: between profiles a and b, each with the
// node's allocatable counts it leads to on the machine.
type kind struct {
	// name is what the tables call it.
	name string
	// a and b are the two profiles; the series starts on a.
	a, b profile
}

// profile is a named profile, its entries (a YAML flow sequence) and the
// carve resources it makes on the machine.
type profile struct {
	name, entries string
	counts        map[string]int64
}

// kinds are the changes measured: a replica change (whole GPUs, time-sliced
// 4 and 8 times: the same resource, more devices) and a MIG change (three
// MIG profiles per GPU and seven 1g.10gb: resources appear and disappear,
// MIG devices are destroyed and created).
func kinds() []kind {
	return []kind{
		{
			name: "replicas 4 <-> 8",
			a:    profile{"shared-4", "[{gpus: all, timeSlicing: {replicas: 4}}]", map[string]int64{"nvidia.com/gpu": 32}},
			b:    profile{"shared-8", "[{gpus: all, timeSlicing: {replicas: 8}}]", map[string]int64{"nvidia.com/gpu": 64}},
		},
		{
			name: "MIG mixed <-> all-1g",
			a: profile{"mixed", "[{gpus: all, mig: {1g.10gb: 2, 2g.20gb: 1, 3g.40gb: 1}}]", map[string]int64{
				"nvidia.com/mig-1g.10gb": 16, "nvidia.com/mig-2g.20gb": 8, "nvidia.com/mig-3g.40gb": 8,
			}},
			b: profile{"all-1g", "[{gpus: all, mig: {1g.10gb: 7}}]", map[string]int64{"nvidia.com/mig-1g.10gb": 56}},
		},
	}
}

// profileFile is the profile file: every profile of every kind under its
// own name, and the edited profile with the entries of edited.
func profileFile(edited profile) string {
	var b strings.Builder
	b.WriteString("version: v1\nprofiles:\n")
	byName := map[string]string{editedProfile: edited.entries}
	for _, k := range kinds() {
		byName[k.a.name], byName[k.b.name] = k.a.entries, k.b.entries
	}
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		fmt.Fprintf(&b, "  %s: %s\n", name, byName[name])
	}
	return b.String()
}

// target is what a change leads to: the profile file, the node's profile
// label, the record the agent writes once it is there (profile name and
// hash), and the carve resources.
type target struct {
	file, label, hash string
	counts            map[string]int64
}

// targetFor is the target for reaching p (a profile of k) by trigger tr:
// by label, the node is labelled p and the file stays as it is (the
// edited profile as k.a); by ConfigMap, the node stays on the edited
// profile, whose content becomes p's.
func targetFor(k kind, p profile, tr trigger) (target, error) {
	t := target{file: profileFile(k.a), label: p.name, counts: p.counts}
	if tr == byConfigMap {
		t.file, t.label = profileFile(p), editedProfile
	}
	f, err := configs.Parse([]byte(t.file))
	if err != nil {
		return t, fmt.Errorf("profile file for %s: %w", p.name, err)
	}
	t.hash = f.ProfileHash(t.label)
	return t, nil
}

// trigger is what makes the change: the node label or a ConfigMap edit.
type trigger int

const (
	byLabel trigger = iota
	byConfigMap
)

func (tr trigger) String() string {
	if tr == byConfigMap {
		return "ConfigMap edit"
	}
	return "node label"
}
