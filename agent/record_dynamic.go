package agent

import (
	"slices"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/dra"
)

// markDynamic adds to the GPU records what the DRA driver knows of
// on-demand MIG: each GPU dynamic in the state wanted, or offered as
// dynamic, gets its profiles and whether it is offered; each instance made
// for a claim gets the claim. Without a driver that makes MIG devices for
// claims the records stay as they are.
func (p *pass) markDynamic(recs []carvev1.GPURecord) []carvev1.GPURecord {
	da, ok := p.r.Devices.(DynamicAdvertiser)
	if !ok {
		return recs
	}
	return dynamicRecords(recs, p.want.Dynamic, da.Dynamic(), da.MadeInstances())
}

// dynamicRecords marks in recs the GPUs dynamic in want (profiles by GPU
// index) or offered as dynamic (offered), and the instances made for
// claims (made), and returns recs.
func dynamicRecords(recs []carvev1.GPURecord, want map[int][]string, offered []dra.DynamicGPU, made []dra.MadeInstance) []carvev1.GPURecord {
	type key struct {
		gpu string
		at  carvev1.Placement
	}
	claims := map[key]dra.MadeInstance{}
	for _, mi := range made {
		claims[key{mi.Instance.GPU, mi.Instance.Placement}] = mi
	}
	for i := range recs {
		r := &recs[i]
		profiles, dynamic := want[r.Index]
		j := slices.IndexFunc(offered, func(g dra.DynamicGPU) bool { return g.UUID == r.UUID })
		if !dynamic && j >= 0 {
			profiles, dynamic = offeredProfiles(offered[j]), true
		}
		if dynamic {
			r.Dynamic = &carvev1.DynamicRecord{Profiles: append([]string{}, profiles...), Offered: j >= 0}
		}
		for k := range r.Instances {
			in := &r.Instances[k]
			if mi, ok := claims[key{r.UUID, in.Placement}]; ok {
				in.Claim = &carvev1.ClaimRecord{UID: mi.Instance.Claim, Namespace: mi.Namespace, Name: mi.Name, State: mi.Instance.State}
			}
		}
	}
	return recs
}
