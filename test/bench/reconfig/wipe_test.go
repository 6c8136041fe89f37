package reconfig

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/carve-dev/carve/partition"
)

// The wipe baseline makes exactly mig-parted's calls, listed here by hand
// from its apply logic, on hand-written H100 GPUs.
func TestWipeSteps(t *testing.T) {
	m := lookup(t, "H100-80GB")
	half := func(gi int) []partition.Instance { return []partition.Instance{inst(t, m, "3g.40gb", 0, gi)} }
	all1g := func(gi int) []partition.Instance {
		var out []partition.Instance
		for s := range 7 {
			out = append(out, inst(t, m, "1g.10gb", s, gi+s))
		}
		return out
	}
	halves := []partition.Instance{inst(t, m, "4g.40gb", 0, 1), inst(t, m, "3g.40gb", 4, 2)}
	wantAll1g := partition.Target{MIG: map[string]int{"1g.10gb": 7}}
	create1g := func(gpu int) []Step {
		var out []Step
		for s := range 7 {
			out = append(out, create(t, m, gpu, "1g.10gb", s)...)
		}
		return out
	}
	tests := []struct {
		name    string
		gpus    []partition.GPU
		targets map[int]partition.Target
		want    []Step
	}{{
		name:    "half to half-plus wipes the 3g and makes it again with three 1g",
		gpus:    []partition.GPU{gpu(0, true, half(1)), gpu(1, true, half(1))},
		targets: both(partition.Target{MIG: map[string]int{"3g.40gb": 1, "1g.10gb": 3}}),
		want: join(
			destroy(0, half(1)[0]), create(t, m, 0, "3g.40gb", 0),
			create(t, m, 0, "1g.10gb", 4), create(t, m, 0, "1g.10gb", 5), create(t, m, 0, "1g.10gb", 6),
			destroy(1, half(1)[0]), create(t, m, 1, "3g.40gb", 0),
			create(t, m, 1, "1g.10gb", 4), create(t, m, 1, "1g.10gb", 5), create(t, m, 1, "1g.10gb", 6)),
	}, {
		name:    "whole GPUs to all-1g: MIG on and a reset on each, then 7 GI and 7 CI each",
		gpus:    []partition.GPU{gpu(0, false, nil), gpu(1, false, nil)},
		targets: both(wantAll1g),
		want: join(
			[]Step{mode(0, partition.OpEnableMIG), mode(1, partition.OpEnableMIG), mode(0, partition.OpResetGPU), mode(1, partition.OpResetGPU)},
			create1g(0), create1g(1)),
	}, {
		name:    "all-1g to balanced creates the largest first",
		gpus:    []partition.GPU{gpu(0, true, all1g(1))},
		targets: map[int]partition.Target{0: {MIG: map[string]int{"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}},
		want: join(destroy(0, all1g(1)...),
			create(t, m, 0, "3g.40gb", 4), create(t, m, 0, "2g.20gb", 0), create(t, m, 0, "1g.10gb", 2), create(t, m, 0, "1g.10gb", 3)),
	}, {
		name:    "a GPU already as wanted is skipped, even at other placements",
		gpus:    []partition.GPU{gpu(0, true, half(1)), gpu(1, true, []partition.Instance{inst(t, m, "3g.40gb", 4, 7)})},
		targets: map[int]partition.Target{0: {MIG: map[string]int{"4g.40gb": 1, "3g.40gb": 1}}, 1: {MIG: map[string]int{"3g.40gb": 1}}},
		want:    join(destroy(0, half(1)[0]), create(t, m, 0, "4g.40gb", 0), create(t, m, 0, "3g.40gb", 4)),
	}, {
		name:    "one GPU's mode to change empties and resets the GPU already as wanted too",
		gpus:    []partition.GPU{gpu(0, true, all1g(1)), gpu(1, false, nil)},
		targets: both(wantAll1g),
		want: join(destroy(0, all1g(1)...),
			[]Step{mode(0, partition.OpEnableMIG), mode(1, partition.OpEnableMIG), mode(0, partition.OpResetGPU), mode(1, partition.OpResetGPU)},
			create1g(0), create1g(1)),
	}, {
		name:    "MIG off destroys by NVML profile ID, 3g (2) before 4g (3), then the mode and the resets",
		gpus:    []partition.GPU{gpu(0, true, halves), gpu(1, true, halves)},
		targets: map[int]partition.Target{},
		want: join(destroy(0, halves[1], halves[0]), []Step{mode(0, partition.OpDisableMIG)},
			destroy(1, halves[1], halves[0]), []Step{mode(1, partition.OpDisableMIG), mode(0, partition.OpResetGPU), mode(1, partition.OpResetGPU)}),
	}, {
		name:    "nothing to do when every GPU is as wanted",
		gpus:    []partition.GPU{gpu(0, true, halves), gpu(1, false, nil)},
		targets: map[int]partition.Target{0: {MIG: map[string]int{"3g.40gb": 1, "4g.40gb": 1}}},
		want:    nil,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			node := partition.Node{GPUs: tc.gpus, Models: map[int]partition.Model{}}
			for _, g := range tc.gpus {
				node.Models[g.Index] = m
			}
			got, err := Wipe(node, tc.targets)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Wipe (-want +got):\n%s", diff)
			}
		})
	}
}

// mig-parted counts compute instances, naming those smaller than their GPU
// instance by their slices.
func TestMigConfig(t *testing.T) {
	m := lookup(t, "H100-80GB")
	full := inst(t, m, "3g.40gb", 0, 1)
	split := inst(t, m, "3g.40gb", 4, 2)
	split.CIs = []partition.ComputeInstance{{ID: 0, GIID: 2, ComputeSlices: 1}, {ID: 1, GIID: 2, ComputeSlices: 2}}
	empty := inst(t, m, "1g.10gb", 0, 3)
	empty.CIs = nil
	got := migConfig([]partition.Instance{full, split, empty})
	want := map[string]int{"3g.40gb": 1, "1c.3g.40gb": 1, "2c.3g.40gb": 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("migConfig (-want +got):\n%s", diff)
	}
}

// lookup returns a catalogue model.
func lookup(t *testing.T, key string) partition.Model {
	t.Helper()
	m, ok := partition.LookupModel(key)
	if !ok {
		t.Fatalf("no model %s", key)
	}
	return m
}

// gpu is a snapshot of an H100 with MIG on or off and its instances.
func gpu(index int, mig bool, instances []partition.Instance) partition.GPU {
	mode := partition.MIGDisabled
	if mig {
		mode = partition.MIGEnabled
	}
	return partition.GPU{
		Index: index, UUID: fmt.Sprintf("GPU-%d", index), Model: "H100-80GB", MIGCapable: true,
		MIGMode: mode, PendingMIGMode: mode, Instances: instances,
	}
}

// inst is a complete instance of a profile at a start, with GPU instance
// giID and one compute instance 0 that fills it.
func inst(t *testing.T, m partition.Model, profile string, start, giID int) partition.Instance {
	t.Helper()
	p, ok := m.Profile(profile)
	if !ok {
		t.Fatalf("%s has no profile %s", m.Key, profile)
	}
	return partition.Instance{
		GIID: giID, ProfileID: p.ID, Profile: profile, Placement: partition.Placement{Start: start, Size: p.MemorySlices},
		ComputeSlices: p.ComputeSlices, MemoryMiB: p.MemoryMiB,
		CIs: []partition.ComputeInstance{{ID: 0, GIID: giID, ComputeSlices: p.ComputeSlices, UUID: fmt.Sprintf("MIG-%d-%d", start, giID)}},
	}
}

// destroy is what clearing the instances, given in mig-parted's order,
// does: each one's compute instance, then its GPU instance.
func destroy(gpu int, ins ...partition.Instance) []Step {
	var out []Step
	for _, in := range ins {
		out = append(out,
			Step{GPU: gpu, Op: partition.Op{Kind: partition.OpDestroyCI, Profile: in.Profile, ProfileID: in.ProfileID, Placement: in.Placement, GIID: in.GIID, CIID: 0, UUID: in.CIs[0].UUID}},
			Step{GPU: gpu, Op: partition.Op{Kind: partition.OpDestroyGI, Profile: in.Profile, ProfileID: in.ProfileID, Placement: in.Placement, GIID: in.GIID, CIID: -1}})
	}
	return out
}

// create is a GPU instance of a profile made at a start, then its compute
// instance.
func create(t *testing.T, m partition.Model, gpu int, profile string, start int) []Step {
	t.Helper()
	p, _ := m.Profile(profile)
	op := partition.Op{Kind: partition.OpCreateGI, Profile: profile, ProfileID: p.ID, Placement: partition.Placement{Start: start, Size: p.MemorySlices}, GIID: -1, CIID: -1}
	ci := op
	ci.Kind = partition.OpCreateCI
	return []Step{{GPU: gpu, Op: op}, {GPU: gpu, Op: ci}}
}

// mode is a GPU-wide op.
func mode(gpu int, k partition.OpKind) Step {
	return Step{GPU: gpu, Op: partition.Op{Kind: k, ProfileID: -1, GIID: -1, CIID: -1}}
}

// both is the same target on GPUs 0 and 1.
func both(t partition.Target) map[int]partition.Target { return map[int]partition.Target{0: t, 1: t} }

// join concatenates step lists.
func join(parts ...[]Step) []Step {
	var out []Step
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
