package agent

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/dra"
	"github.com/carve-dev/carve/partition"
)

// TestDynamicRecords: a GPU dynamic in the state wanted is recorded with
// its profiles, offered or not; a GPU the driver still offers though the
// state wanted is unknown is recorded with the driver's profiles; the
// instances made for claims name their claims (by UID while the prepare
// is unfinished); static GPUs and their instances are left alone.
func TestDynamicRecords(t *testing.T) {
	h100, _ := partition.LookupModel("H100-80GB")
	at := func(start, size int) carvev1.Placement { return carvev1.Placement{Start: start, Size: size} }
	recs := func() []carvev1.GPURecord {
		return []carvev1.GPURecord{
			{Index: 0, UUID: "GPU-0", Instances: []carvev1.InstanceRecord{{Profile: "1g.10gb", Placement: at(0, 1)}}},
			{Index: 1, UUID: "GPU-1", Instances: []carvev1.InstanceRecord{{Profile: "1g.10gb", Placement: at(3, 1)}, {Profile: "3g.40gb", Placement: at(4, 4)}}},
			{Index: 2, UUID: "GPU-2"},
		}
	}
	made := []dra.MadeInstance{
		{Device: "gpu-1-dyn-3g40gb-4", Instance: carvev1.ClaimInstance{Claim: "u-big", GPU: "GPU-1", GPUIndex: 1, Profile: "3g.40gb", Placement: at(4, 4), State: carvev1.InstanceMade}, Namespace: "default", Name: "dyn-big"},
		{Device: "gpu-1-dyn-1g10gb-3", Instance: carvev1.ClaimInstance{Claim: "u-small", GPU: "GPU-1", GPUIndex: 1, Profile: "1g.10gb", Placement: at(3, 1), State: carvev1.InstanceMaking}},
	}
	offered := []dra.DynamicGPU{{Index: 1, UUID: "GPU-1", Model: h100, Profiles: []string{"1g.10gb", "3g.40gb"}}}

	got := dynamicRecords(recs(), map[int][]string{1: {"1g.10gb", "3g.40gb"}, 2: {"7g.80gb"}}, offered, made)
	want := recs()
	want[1].Dynamic = &carvev1.DynamicRecord{Profiles: []string{"1g.10gb", "3g.40gb"}, Offered: true}
	want[1].Instances[0].Claim = &carvev1.ClaimRecord{UID: "u-small", State: carvev1.InstanceMaking}
	want[1].Instances[1].Claim = &carvev1.ClaimRecord{UID: "u-big", Namespace: "default", Name: "dyn-big", State: carvev1.InstanceMade}
	want[2].Dynamic = &carvev1.DynamicRecord{Profiles: []string{"7g.80gb"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("with the state wanted (-want +got):\n%s", diff)
	}

	offered[0].Profiles = nil
	got = dynamicRecords(recs(), nil, offered, nil)
	want = recs()
	want[1].Dynamic = &carvev1.DynamicRecord{Profiles: h100.ProfileNames(), Offered: true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("without a state wanted (-want +got):\n%s", diff)
	}
}
