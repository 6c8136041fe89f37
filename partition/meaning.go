package partition

import "slices"

// pending returns the ops the plan stands for: Ops, or for a blocked plan
// the ops it would do once unblocked (WouldDo).
func (p GPUPlan) pending() []Op {
	if p.IsBlocked() {
		return p.WouldDo
	}
	return p.Ops
}

// Disruptive reports whether the GPU's change destroys or resets anything
// (for a blocked plan: would, once unblocked). Only adding instances into
// free space is not disruptive.
func (p GPUPlan) Disruptive() bool {
	return slices.ContainsFunc(p.pending(), Op.Disruptive)
}

// Disruptive reports whether the op destroys or resets anything: any op
// but the creation of an instance.
func (o Op) Disruptive() bool {
	return o.Kind != OpCreateGI && o.Kind != OpCreateCI
}

// GoingAway lists the devices the plan removes from g, the GPU as it is
// now (for a blocked plan: would remove): the MIG device UUIDs of
// destroyed instances, and the GPU's UUID when its MIG mode changes or it
// is reset, since then every device on it goes. Sorted, each once.
func (p GPUPlan) GoingAway(g GPU) []string {
	var ids []string
	for _, op := range p.pending() {
		switch op.Kind {
		case OpEnableMIG, OpDisableMIG, OpResetGPU:
			ids = append(ids, g.UUID)
		case OpDestroyCI, OpDestroyGI:
			if op.UUID != "" {
				ids = append(ids, op.UUID)
			}
			for _, in := range g.Instances {
				if in.GIID == op.GIID && in.Placement == op.Placement && in.UUID() != "" {
					ids = append(ids, in.UUID())
				}
			}
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// GoingAway lists the devices the plans remove from the node's GPUs (see
// GPUPlan.GoingAway), sorted, each once.
func (n Node) GoingAway(plans []GPUPlan) []string {
	var ids []string
	for _, gp := range plans {
		if g, ok := n.GPU(gp.Index); ok {
			ids = append(ids, gp.GoingAway(g)...)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// GPU returns the node's GPU with that NVML index.
func (n Node) GPU(index int) (GPU, bool) {
	for _, g := range n.GPUs {
		if g.Index == index {
			return g, true
		}
	}
	return GPU{}, false
}

// Indices returns the GPU indices of the plans, in their order.
func Indices(plans []GPUPlan) []int {
	out := make([]int, len(plans))
	for i, p := range plans {
		out[i] = p.Index
	}
	return out
}
