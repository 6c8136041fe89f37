package planning

import (
	"slices"
	"sort"

	"github.com/carve-dev/carve/partition"
)

// plan writes the best plan found as operations, in the order carve's
// plans run them: destroy compute instances, destroy GPU instances, MIG
// mode, create GPU instances, create compute instances.
func (s *gpuSearch) plan() []partition.Op {
	var cis, gis, creates []partition.Op
	for i, in := range s.g.Instances {
		kept := s.bestSet&(1<<i) != 0
		if kept && s.have[i].complete {
			continue
		}
		cis = append(cis, destroyCIs(in)...)
		if kept {
			creates = append(creates, createCI(in.Profile, in.ProfileID, in.Placement, in.GIID))
			continue
		}
		gis = append(gis, destroyGI(in))
	}
	ops := slices.Concat(cis, gis, s.modeChange())
	news := make([]partition.Op, 0, len(s.bestNew))
	for _, c := range s.bestNew {
		p := s.m.Profiles[c.profile]
		ops = append(ops, partition.Op{Kind: partition.OpCreateGI, Profile: p.Name, ProfileID: p.ID, Placement: p.Placements[c.placement], GIID: -1, CIID: -1})
		news = append(news, createCI(p.Name, p.ID, p.Placements[c.placement], -1))
	}
	creates = append(creates, news...)
	sort.SliceStable(creates, func(a, b int) bool { return creates[a].Placement.Start < creates[b].Placement.Start })
	return append(ops, creates...)
}

// modeChange returns the MIG mode operations of the plan.
func (s *gpuSearch) modeChange() []partition.Op {
	var ops []partition.Op
	if s.g.PendingMIGMode != partition.MIGEnabled {
		ops = append(ops, gpuOp(partition.OpEnableMIG))
	}
	if s.g.MIGMode != partition.MIGEnabled {
		ops = append(ops, gpuOp(partition.OpResetGPU))
	}
	return ops
}

// gpuOp returns a GPU-wide operation.
func gpuOp(k partition.OpKind) partition.Op {
	return partition.Op{Kind: k, ProfileID: -1, GIID: -1, CIID: -1}
}

// destroyCIs returns the operations that destroy an instance's compute
// instances.
func destroyCIs(in partition.Instance) []partition.Op {
	ops := make([]partition.Op, 0, len(in.CIs))
	for _, ci := range in.CIs {
		ops = append(ops, partition.Op{Kind: partition.OpDestroyCI, Profile: in.Profile, ProfileID: in.ProfileID,
			Placement: in.Placement, GIID: in.GIID, CIID: ci.ID, UUID: ci.UUID})
	}
	return ops
}

// destroyGI returns the operation that destroys a GPU instance.
func destroyGI(in partition.Instance) partition.Op {
	return partition.Op{Kind: partition.OpDestroyGI, Profile: in.Profile, ProfileID: in.ProfileID, Placement: in.Placement, GIID: in.GIID, CIID: -1}
}

// createCI returns the operation that fills a GPU instance with one
// compute instance; giID is -1 for a GPU instance the plan creates.
func createCI(profile string, profileID int, at partition.Placement, giID int) partition.Op {
	return partition.Op{Kind: partition.OpCreateCI, Profile: profile, ProfileID: profileID, Placement: at, GIID: giID, CIID: -1}
}
