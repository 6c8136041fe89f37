package partition

import "fmt"

// Plans for one MIG device made or removed alone, as carve's DRA driver
// does for a claim on a dynamic GPU: the applier runs them like any other
// plan, and each is computed from a fresh read of the GPU, so a plan
// resumed after a crash makes only what is still missing (never a second
// GPU instance at the placement) and removes only what is still there.

// InstancePlan returns the plan that leaves GPU g holding one complete
// instance of profile p at placement at: no ops when it holds it already;
// create-ci when the GPU instance is there without a compute instance;
// create-gi and create-ci when the placement is free. Another instance in
// the way (overlapping the placement, or at it with another profile or
// with compute instances not filling it) is an error wrapping
// ErrStateChanged: the GPU is not as the caller believed, and nothing is
// destroyed to make room.
func InstancePlan(g GPU, p GIProfile, at Placement) (GPUPlan, error) {
	plan := GPUPlan{Index: g.Index, UUID: g.UUID, Model: g.Model, Ops: []Op{}}
	if g.MIGMode != MIGEnabled {
		return plan, fmt.Errorf("GPU %d: %w: MIG mode is %s, not enabled", g.Index, ErrStateChanged, g.MIGMode)
	}
	in, found, err := instanceAt(g, p, at)
	if err != nil {
		return plan, err
	}
	if !found {
		plan.Ops = append(plan.Ops, Op{Kind: OpCreateGI, Profile: p.Name, ProfileID: p.ID, Placement: at, GIID: -1, CIID: -1})
		in.GIID = -1
	}
	switch {
	case found && in.Complete():
	case found && len(in.CIs) > 0:
		return plan, fmt.Errorf("GPU %d: %w: the %s GPU instance at %s has compute instances that do not fill it", g.Index, ErrStateChanged, p.Name, at)
	default:
		plan.Ops = append(plan.Ops, Op{Kind: OpCreateCI, Profile: p.Name, ProfileID: p.ID, Placement: at, GIID: in.GIID, CIID: -1})
	}
	return plan, nil
}

// RemovalPlan returns the plan that removes the instance of profile p at
// placement at from GPU g: its compute instances, then it; no ops when it
// is gone already. An instance of another profile at the placement is an
// error wrapping ErrStateChanged.
func RemovalPlan(g GPU, p GIProfile, at Placement) (GPUPlan, error) {
	plan := GPUPlan{Index: g.Index, UUID: g.UUID, Model: g.Model, Ops: []Op{}}
	in, found, err := instanceAt(g, p, at)
	if err != nil || !found {
		return plan, err
	}
	for _, ci := range in.CIs {
		plan.Ops = append(plan.Ops, Op{Kind: OpDestroyCI, Profile: p.Name, ProfileID: p.ID, Placement: at, GIID: in.GIID, CIID: ci.ID, UUID: ci.UUID})
	}
	plan.Ops = append(plan.Ops, Op{Kind: OpDestroyGI, Profile: p.Name, ProfileID: p.ID, Placement: at, GIID: in.GIID, CIID: -1})
	return plan, nil
}

// instanceAt finds the GPU instance of profile p at placement at on g. An
// instance at that exact placement with another profile, or one
// overlapping it elsewhere, is an error wrapping ErrStateChanged.
func instanceAt(g GPU, p GIProfile, at Placement) (Instance, bool, error) {
	for _, in := range g.Instances {
		switch {
		case in.Placement == at && in.ProfileID == p.ID:
			return in, true, nil
		case in.Placement.Overlaps(at):
			return Instance{}, false, fmt.Errorf("GPU %d: %w: a %s GPU instance at %s is in the way of %s at %s",
				g.Index, ErrStateChanged, in.Profile, in.Placement, p.Name, at)
		}
	}
	return Instance{}, false, nil
}
