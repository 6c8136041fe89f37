package reconfig

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
)

// tally is the work one strategy did on one transition.
type tally struct {
	// ops counts the mutating NVML calls by kind; total is their sum.
	ops   map[partition.OpKind]int
	total int
	// destroyed counts the GPU instances destroyed, by destroy-gi or by a
	// reset that found them; destroyedWanted those of them that the GPU
	// holds again at the end (same profile at the same placement), named
	// in wanted.
	destroyed       int
	destroyedWanted int
	wanted          []string
	// kept counts the GPU instances of before never destroyed.
	kept int
	// time is how long the calls take one after another on hardware.
	time time.Duration
}

// instanceKey names a GPU instance by where it is: GPU, profile and
// placement. An instance destroyed and one created with the same key are
// the same device to what runs on it (the simulator even gives both the
// same MIG device UUID).
type instanceKey struct {
	gpu     int
	profile string
	at      partition.Placement
}

// String writes the key as "GPU 0: 3g.40gb at 0:4".
func (k instanceKey) String() string { return fmt.Sprintf("GPU %d: %s at %s", k.gpu, k.profile, k.at) }

// count tallies steps that took the GPUs from before to after. It follows
// the instances through the steps (destroy-gi and reset-gpu remove them,
// create-gi adds them) and fails when that does not end where the machine
// did, so that the counts are checked against the machine.
func count(before []partition.GPU, steps []Step, after []partition.GPU, lat sim.Latency) (tally, error) {
	t := tally{ops: map[partition.OpKind]int{}, total: len(steps)}
	live := instanceSet(before)
	var gone []instanceKey
	ops := make([]partition.Op, len(steps))
	for i, s := range steps {
		ops[i] = s.Op
		t.ops[s.Op.Kind]++
		k := instanceKey{gpu: s.GPU, profile: s.Op.Profile, at: s.Op.Placement}
		switch s.Op.Kind {
		case partition.OpDestroyGI:
			delete(live, k)
			gone = append(gone, k)
		case partition.OpResetGPU:
			gone = append(gone, takeGPU(live, s.GPU)...)
		case partition.OpCreateGI:
			live[k] = true
		}
	}
	end := instanceSet(after)
	if !maps.Equal(live, end) {
		return tally{}, fmt.Errorf("the steps lead to %v, the machine is at %v", sortedKeys(live), sortedKeys(end))
	}
	t.destroyed = len(gone)
	t.kept = keptOf(instanceSet(before), gone)
	for _, k := range gone {
		if end[k] {
			t.destroyedWanted++
			t.wanted = append(t.wanted, k.String())
		}
	}
	t.time = lat.Estimate(ops)
	return t, nil
}

// keptOf counts the instances of before that are not among gone.
func keptOf(before map[instanceKey]bool, gone []instanceKey) int {
	for _, k := range gone {
		delete(before, k)
	}
	return len(before)
}

// takeGPU removes the instances of one GPU from live and returns them, in
// key order: what a reset of that GPU destroys.
func takeGPU(live map[instanceKey]bool, gpu int) []instanceKey {
	var out []instanceKey
	for _, k := range sortedKeys(live) {
		if k.gpu == gpu {
			delete(live, k)
			out = append(out, k)
		}
	}
	return out
}

// instanceSet returns the GPU instances of gpus by key.
func instanceSet(gpus []partition.GPU) map[instanceKey]bool {
	out := map[instanceKey]bool{}
	for _, g := range gpus {
		for _, in := range g.Instances {
			out[instanceKey{gpu: g.Index, profile: in.Profile, at: in.Placement}] = true
		}
	}
	return out
}

// sortedKeys returns a set's keys by GPU, placement and profile.
func sortedKeys(set map[instanceKey]bool) []instanceKey {
	return slices.SortedFunc(maps.Keys(set), func(a, b instanceKey) int {
		return cmp.Or(cmp.Compare(a.gpu, b.gpu), cmp.Compare(a.at.Start, b.at.Start),
			cmp.Compare(a.at.Size, b.at.Size), cmp.Compare(a.profile, b.profile))
	})
}
