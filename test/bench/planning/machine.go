package planning

import (
	"fmt"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
)

// instance is one MIG instance of a layout: a complete GPU instance (one
// compute instance filling it) of a profile at a memory slice.
type instance struct {
	profile string
	start   int
	// busy marks the instance's MIG device as held by a pod.
	busy bool
	// slices, when not zero, makes the instance incomplete: one compute
	// instance of that many compute slices instead of one filling it, or
	// none at all when negative.
	slices int
}

// layout is the MIG instances of one GPU; nil means MIG disabled.
type layout []instance

// input is what one plan of a node is made of, read from a simulated
// machine as the agent reads its GPUs.
type input struct {
	lib     *sim.Machine
	node    partition.Node
	targets map[int]partition.Target
	inUse   map[string]bool
}

// buildInput creates a simulated machine of len(layouts) GPUs of the
// model, carves each GPU as its layout says, marks the busy devices and
// reads the node back; every GPU gets the target.
func buildInput(model string, layouts []layout, target map[string]int) (input, error) {
	m, err := sim.New(fmt.Sprintf("%s*%d", model, len(layouts)))
	if err != nil {
		return input{}, fmt.Errorf("simulated machine: %w", err)
	}
	if err := m.Init(); err != nil {
		return input{}, fmt.Errorf("simulated machine: %w", err)
	}
	in := input{lib: m, targets: map[int]partition.Target{}, inUse: map[string]bool{}}
	for i, l := range layouts {
		if err := carve(m, i, l, in.inUse); err != nil {
			return input{}, fmt.Errorf("GPU %d: %w", i, err)
		}
		in.targets[i] = partition.Target{MIG: target}
	}
	if in.node, err = partition.ReadNode(m); err != nil {
		return input{}, fmt.Errorf("read the simulated GPUs: %w", err)
	}
	return in, nil
}

// carve realises one layout on GPU i of m and records the busy MIG device
// UUIDs in inUse.
func carve(m *sim.Machine, i int, l layout, inUse map[string]bool) error {
	if l == nil {
		return nil
	}
	d, err := m.Device(i)
	if err != nil {
		return err
	}
	if err := d.SetMIGMode(partition.MIGEnabled); err != nil {
		return fmt.Errorf("enable MIG: %w", err)
	}
	if err := d.Reset(); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	profiles, err := d.GPUInstanceProfiles()
	if err != nil {
		return fmt.Errorf("profiles: %w", err)
	}
	for _, it := range l {
		if err := create(m, d, profiles, it, inUse); err != nil {
			return fmt.Errorf("%s at %d: %w", it.profile, it.start, err)
		}
	}
	return nil
}

// create makes one instance of a layout on device d of m.
func create(m *sim.Machine, d partition.Device, profiles []partition.GIProfile, it instance, inUse map[string]bool) error {
	p, ok := findProfile(profiles, it.profile)
	if !ok {
		return fmt.Errorf("unknown profile")
	}
	gi, err := d.CreateGPUInstance(p.ID, partition.Placement{Start: it.start, Size: p.MemorySlices})
	if err != nil {
		return err
	}
	var ci partition.ComputeInstance
	switch {
	case it.slices < 0:
		return nil
	case it.slices > 0:
		ci, err = m.CreateComputeInstanceSlices(d.Index(), gi.ID, it.slices)
	default:
		ci, err = d.CreateComputeInstance(gi.ID)
	}
	if err != nil {
		return err
	}
	if it.busy {
		inUse[ci.UUID] = true
		return m.SetBusy(ci.UUID, true)
	}
	return nil
}

// findProfile returns the profile of that name.
func findProfile(profiles []partition.GIProfile, name string) (partition.GIProfile, bool) {
	for _, p := range profiles {
		if p.Name == name {
			return p, true
		}
	}
	return partition.GIProfile{}, false
}

// plan runs carve's planner on the input.
func (in input) plan() (partition.NodePlan, error) {
	return partition.PlanNode(in.node.GPUs, in.node.Models, in.targets, in.inUse)
}
