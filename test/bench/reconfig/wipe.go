package reconfig

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/carve-dev/carve/partition"
)

// Step is one mutating NVML call of a sequence that spans a node: the GPU
// it runs on and the call, written as an op of carve's plans so that one
// cost model (sim.Latency) and one applier (partition.Applier) serve both
// strategies.
type Step struct {
	GPU int
	Op  partition.Op
}

// Wipe returns the mutating NVML calls, in order, with which NVIDIA's
// mig-parted (`nvidia-mig-parted apply`) turns the node's GPUs into the
// targets (by GPU index; a GPU without one is a whole GPU, MIG off), as its
// source reads (NVIDIA/mig-parted, cmd/nvidia-mig-parted/apply and
// pkg/mig/config):
//
//   - Mode: when the MIG mode of any MIG-capable GPU differs from its
//     config, every such GPU in MIG mode has all its compute and GPU
//     instances destroyed, every one has its mode set (even where it
//     already is as wanted), and then every GPU of the node is reset.
//   - Config: each GPU that should have MIG on and whose instances, counted
//     by profile, differ from the config has all its instances destroyed
//     (GPU instances by profile ID, each after its compute instances) and
//     the config's instances created, largest first, each GPU instance
//     followed by its compute instance. A GPU already as wanted is skipped.
//
// mig-parted lets the driver place each GPU instance and retries other
// creation orders when one fails; Wipe places them where carve's placement
// search (partition.Place) puts the target, which always succeeds at the
// first try: the baseline's best case.
func Wipe(node partition.Node, targets map[int]partition.Target) ([]Step, error) {
	var steps []Step
	cleared := modeDiffers(node.GPUs, targets)
	if cleared {
		steps = modeSteps(node.GPUs, targets)
	}
	for _, g := range node.GPUs {
		s, err := configSteps(g, node.Models[g.Index], targets[g.Index], cleared)
		if err != nil {
			return nil, fmt.Errorf("wipe and recreate: GPU %d: %w", g.Index, err)
		}
		steps = append(steps, s...)
	}
	return steps, nil
}

// modeDiffers reports whether a MIG-capable GPU's current MIG mode differs
// from its target's (mig-parted's `assert --mode-only` failing).
func modeDiffers(gpus []partition.GPU, targets map[int]partition.Target) bool {
	for _, g := range gpus {
		if g.MIGCapable && targets[g.Index].MIGEnabled() != (g.MIGMode == partition.MIGEnabled) {
			return true
		}
	}
	return false
}

// modeSteps is mig-parted's mode change: clear the GPUs in MIG mode, set
// the mode of every MIG-capable GPU, reset every GPU of the node.
func modeSteps(gpus []partition.GPU, targets map[int]partition.Target) []Step {
	var steps []Step
	for _, g := range gpus {
		if !g.MIGCapable {
			continue
		}
		if g.MIGMode == partition.MIGEnabled {
			steps = append(steps, clearSteps(g)...)
		}
		kind := partition.OpDisableMIG
		if targets[g.Index].MIGEnabled() {
			kind = partition.OpEnableMIG
		}
		steps = append(steps, Step{GPU: g.Index, Op: gpuOp(kind)})
	}
	for _, g := range gpus {
		steps = append(steps, Step{GPU: g.Index, Op: gpuOp(partition.OpResetGPU)})
	}
	return steps
}

// configSteps is mig-parted's config change on one GPU: nothing when the
// GPU should have MIG off or already holds the target's profiles, else
// destroy everything and create the target. cleared says the mode change
// already emptied the GPU.
func configSteps(g partition.GPU, m partition.Model, t partition.Target, cleared bool) ([]Step, error) {
	if !g.MIGCapable || !t.MIGEnabled() {
		return nil, nil
	}
	if cleared {
		g.Instances = nil
	}
	current := migConfig(g.Instances)
	if sameCounts(current, t.MIG) {
		return nil, nil
	}
	var steps []Step
	if len(current) > 0 {
		steps = clearSteps(g)
	}
	create, err := createSteps(g.Index, m, t)
	if err != nil {
		return nil, err
	}
	return append(steps, create...), nil
}

// migConfig counts a GPU's compute instances by profile, as mig-parted
// names them: the GPU instance's profile for one that fills it,
// "<n>c.<profile>" for a smaller one. GPU instances without compute
// instances do not count, as in mig-parted.
func migConfig(instances []partition.Instance) map[string]int {
	out := map[string]int{}
	for _, in := range instances {
		for _, ci := range in.CIs {
			name := in.Profile
			if ci.ComputeSlices != in.ComputeSlices {
				name = fmt.Sprintf("%dc.%s", ci.ComputeSlices, in.Profile)
			}
			out[name]++
		}
	}
	return out
}

// sameCounts compares two profile counts, ignoring zero counts (mig-parted's
// MigConfig.Equals).
func sameCounts(a, b map[string]int) bool {
	for k, v := range a {
		if v != b[k] {
			return false
		}
	}
	for k, v := range b {
		if v != a[k] {
			return false
		}
	}
	return true
}

// clearSteps destroys every instance of a GPU as mig-parted's
// ClearMigConfig walks them: GPU instances by profile ID, then by ID, each
// one's compute instances first.
func clearSteps(g partition.GPU) []Step {
	ins := slices.Clone(g.Instances)
	slices.SortFunc(ins, func(a, b partition.Instance) int {
		return cmp.Or(cmp.Compare(a.ProfileID, b.ProfileID), cmp.Compare(a.GIID, b.GIID))
	})
	var steps []Step
	for _, in := range ins {
		for _, ci := range in.CIs {
			steps = append(steps, Step{GPU: g.Index, Op: partition.Op{
				Kind: partition.OpDestroyCI, Profile: in.Profile, ProfileID: in.ProfileID,
				Placement: in.Placement, GIID: in.GIID, CIID: ci.ID, UUID: ci.UUID,
			}})
		}
		steps = append(steps, Step{GPU: g.Index, Op: partition.Op{
			Kind: partition.OpDestroyGI, Profile: in.Profile, ProfileID: in.ProfileID,
			Placement: in.Placement, GIID: in.GIID, CIID: -1,
		}})
	}
	return steps
}

// createSteps creates a target's instances in mig-parted's order (its
// MigConfig.Flatten: more compute slices first, then the variant, "+me"
// before none; ties, which mig-parted leaves to map order, by more memory,
// then by placement), each GPU instance followed by its compute instance.
func createSteps(gpu int, m partition.Model, t partition.Target) ([]Step, error) {
	slots, err := partition.Place(m, t.MIG)
	if err != nil {
		return nil, fmt.Errorf("place %v: %w", t.MIG, err)
	}
	slices.SortStableFunc(slots, func(a, b partition.Slot) int {
		pa, _ := m.Profile(a.Profile)
		pb, _ := m.Profile(b.Profile)
		_, va := partition.SplitProfileName(a.Profile)
		_, vb := partition.SplitProfileName(b.Profile)
		return cmp.Or(cmp.Compare(pb.ComputeSlices, pa.ComputeSlices), cmp.Compare(vb, va),
			cmp.Compare(pb.MemoryMiB, pa.MemoryMiB))
	})
	steps := make([]Step, 0, 2*len(slots))
	for _, s := range slots {
		op := partition.Op{Kind: partition.OpCreateGI, Profile: s.Profile, ProfileID: s.ProfileID, Placement: s.Placement, GIID: -1, CIID: -1}
		steps = append(steps, Step{GPU: gpu, Op: op})
		op.Kind = partition.OpCreateCI
		steps = append(steps, Step{GPU: gpu, Op: op})
	}
	return steps, nil
}

// gpuOp is an op on the whole GPU.
func gpuOp(k partition.OpKind) partition.Op {
	return partition.Op{Kind: k, ProfileID: -1, GIID: -1, CIID: -1}
}
