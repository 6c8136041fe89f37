package partition

import (
	"maps"
	"slices"

	carvev1 "github.com/carve-dev/carve/api/v1"
)

// The planner's types and their public form in api/v1 (the checkpoint, the
// `carvectl plan -o json` document, the node record's placements) are kept
// apart, so that a change here cannot change a persisted format by
// accident; the functions below convert between them, field for field. A
// nil list or map stays nil and an empty one stays empty, so that both
// forms encode to the same JSON (a nil Target.MIG means MIG off, an empty
// one MIG on with no instances).

// NodePlanToV1 returns the public form of p.
func NodePlanToV1(p NodePlan) carvev1.NodePlan {
	return carvev1.NodePlan{GPUs: convertSlice(p.GPUs, gpuPlanToV1)}
}

// NodePlanFromV1 returns the planner's form of p.
func NodePlanFromV1(p carvev1.NodePlan) NodePlan {
	return NodePlan{GPUs: convertSlice(p.GPUs, gpuPlanFromV1)}
}

// PlacementToV1 returns the public form of p.
func PlacementToV1(p Placement) carvev1.Placement {
	return carvev1.Placement{Start: p.Start, Size: p.Size}
}

// PlacementFromV1 returns the planner's form of p.
func PlacementFromV1(p carvev1.Placement) Placement {
	return Placement{Start: p.Start, Size: p.Size}
}

// ComputeInstancesToV1 returns the node record's form of a GPU instance's
// compute instances, by ID; nil when there are none.
func ComputeInstancesToV1(cis []ComputeInstance) []carvev1.ComputeInstanceRecord {
	if len(cis) == 0 {
		return nil
	}
	out := make([]carvev1.ComputeInstanceRecord, len(cis))
	for i, ci := range cis {
		out[i] = carvev1.ComputeInstanceRecord{ID: ci.ID, ComputeSlices: ci.ComputeSlices, UUID: ci.UUID}
	}
	slices.SortFunc(out, func(a, b carvev1.ComputeInstanceRecord) int { return a.ID - b.ID })
	return out
}

func gpuPlanToV1(g GPUPlan) carvev1.GPUPlan {
	return carvev1.GPUPlan{
		Index: g.Index, UUID: g.UUID, Model: g.Model,
		Mode: g.Mode, PendingMode: g.PendingMode,
		Target:     carvev1.Target{MIG: maps.Clone(g.Target.MIG)},
		Instances:  convertSlice(g.Instances, plannedInstanceToV1),
		Ops:        convertSlice(g.Ops, opToV1),
		Blocked:    convertSlice(g.Blocked, blockerToV1),
		WouldDo:    convertSlice(g.WouldDo, opToV1),
		NeedsReset: g.NeedsReset,
	}
}

func gpuPlanFromV1(g carvev1.GPUPlan) GPUPlan {
	return GPUPlan{
		Index: g.Index, UUID: g.UUID, Model: g.Model,
		Mode: g.Mode, PendingMode: g.PendingMode,
		Target:     Target{MIG: maps.Clone(g.Target.MIG)},
		Instances:  convertSlice(g.Instances, plannedInstanceFromV1),
		Ops:        convertSlice(g.Ops, opFromV1),
		Blocked:    convertSlice(g.Blocked, blockerFromV1),
		WouldDo:    convertSlice(g.WouldDo, opFromV1),
		NeedsReset: g.NeedsReset,
	}
}

func opToV1(o Op) carvev1.Op {
	return carvev1.Op{
		Kind: carvev1.OpKind(o.Kind), Profile: o.Profile, ProfileID: o.ProfileID,
		Placement: PlacementToV1(o.Placement), GIID: o.GIID, CIID: o.CIID, UUID: o.UUID,
	}
}

func opFromV1(o carvev1.Op) Op {
	return Op{
		Kind: OpKind(o.Kind), Profile: o.Profile, ProfileID: o.ProfileID,
		Placement: PlacementFromV1(o.Placement), GIID: o.GIID, CIID: o.CIID, UUID: o.UUID,
	}
}

func plannedInstanceToV1(in PlannedInstance) carvev1.PlannedInstance {
	return carvev1.PlannedInstance{
		Profile: in.Profile, ProfileID: in.ProfileID, Placement: PlacementToV1(in.Placement),
		Status: carvev1.InstanceStatus(in.Status), GIID: in.GIID, UUID: in.UUID,
	}
}

func plannedInstanceFromV1(in carvev1.PlannedInstance) PlannedInstance {
	return PlannedInstance{
		Profile: in.Profile, ProfileID: in.ProfileID, Placement: PlacementFromV1(in.Placement),
		Status: InstanceStatus(in.Status), GIID: in.GIID, UUID: in.UUID,
	}
}

func blockerToV1(b Blocker) carvev1.Blocker {
	return carvev1.Blocker{UUID: b.UUID, Profile: b.Profile, Placement: PlacementToV1(b.Placement), GIID: b.GIID, Reason: b.Reason}
}

func blockerFromV1(b carvev1.Blocker) Blocker {
	return Blocker{UUID: b.UUID, Profile: b.Profile, Placement: PlacementFromV1(b.Placement), GIID: b.GIID, Reason: b.Reason}
}

// convertSlice applies f to each element of in; nil stays nil.
func convertSlice[S, T any](in []S, f func(S) T) []T {
	if in == nil {
		return nil
	}
	out := make([]T, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}
