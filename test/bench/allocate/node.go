package allocate

import (
	"context"
	"fmt"
	"slices"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/timeslice"
)

// machineSpec is the simulated node of every case: 8x H100-80GB on NVSwitch.
const machineSpec = "dgx-h100"

// node is a simulated machine and the resources carve advertises for it.
type node struct {
	lib *sim.Machine
	res timeslice.Resources
	// resource is the one resource name of res.
	resource string
}

// newNode opens a simulated DGX H100 whose GPUs each hold mig (profile ->
// count; nil for whole GPUs) and expands them with replicas per device.
func newNode(ctx context.Context, mig map[string]int, replicas int) (*node, error) {
	m, err := sim.New(machineSpec)
	if err != nil {
		return nil, fmt.Errorf("simulated %s: %w", machineSpec, err)
	}
	if err := m.Init(); err != nil {
		return nil, fmt.Errorf("simulated %s: init: %w", machineSpec, err)
	}
	if mig != nil {
		if err := partitionAll(ctx, m, mig); err != nil {
			_ = m.Shutdown()
			return nil, err
		}
	}
	gpus, err := partition.ReadInventory(m)
	if err != nil {
		_ = m.Shutdown()
		return nil, fmt.Errorf("read the simulated GPUs: %w", err)
	}
	sharing := map[int]timeslice.Sharing{}
	for _, g := range gpus {
		sharing[g.Index] = timeslice.Sharing{Replicas: replicas}
	}
	res, err := timeslice.Expand(gpus, sharing)
	if err != nil {
		_ = m.Shutdown()
		return nil, fmt.Errorf("expand the simulated GPUs: %w", err)
	}
	if names := res.Names(); len(names) != 1 {
		_ = m.Shutdown()
		return nil, fmt.Errorf("the simulated node has resources %v, want exactly one", names)
	}
	return &node{lib: m, res: res, resource: res.Names()[0]}, nil
}

// partitionAll turns every GPU of m into the MIG instances of target, as
// the agent would: plan, then apply.
func partitionAll(ctx context.Context, m *sim.Machine, target map[string]int) error {
	n, err := partition.ReadNode(m)
	if err != nil {
		return fmt.Errorf("read the simulated node: %w", err)
	}
	ap := partition.Applier{Lib: m}
	for _, g := range n.GPUs {
		plan, err := partition.PlanGPU(g, n.Models[g.Index], partition.Target{MIG: target}, nil)
		if err != nil {
			return fmt.Errorf("plan GPU %d: %w", g.Index, err)
		}
		if err := ap.Apply(ctx, plan); err != nil {
			return fmt.Errorf("partition GPU %d: %w", g.Index, err)
		}
	}
	return nil
}

// devices returns the advertised devices of the node's resource.
func (n *node) devices() []timeslice.Device { return n.res[n.resource] }

// ids returns the device IDs of the node's resource, in advertised order.
func (n *node) ids() []string {
	devs := n.devices()
	out := make([]string, len(devs))
	for i, d := range devs {
		out[i] = d.ID
	}
	return out
}

// strided returns k IDs of the node's resource evenly spread over its
// list (so, for replicas listed device by device, on k different
// physical devices when k is at most the number of devices).
func (n *node) strided(k int) []string {
	ids := n.ids()
	step := max(len(ids)/k, 1)
	out := make([]string, 0, k)
	for i := 0; i < len(ids) && len(out) < k; i += step {
		out = append(out, ids[i+step/2])
	}
	return out
}

// physical returns the physical device UUIDs behind ids, each once, in the
// order of their first ID: what a container must be given.
func (n *node) physical(ids []string) []string {
	uuid := map[string]string{}
	for _, d := range n.devices() {
		uuid[d.ID] = d.UUID
	}
	var out []string
	for _, id := range ids {
		if u := uuid[id]; !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	return out
}
