package agent

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/carve-dev/carve/dra"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/timeslice"
)

// dynamicClaim is a claim allocated the devices of node-1's pool.
func dynamicClaim(uid, name string, devices ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(uid)}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for _, d := range devices {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: dra.DriverName, Pool: "node-1", Device: d})
	}
	return c
}

// TestDRAMetricsOfDynamicClaims: an agent built with --advertise dra
// exports, for a simulated H100 offered as dynamic, the MIG devices made
// for claims per profile, the prepares and unprepares by kind and their
// failures by reason, and the largest profile still placeable.
func TestDRAMetricsOfDynamicClaims(t *testing.T) {
	cfg, _ := newAgentConfig(t, "full")
	m := cfg.GPUs.(*sim.Machine)
	reg := NewRegistry()
	cfg.Registerer, cfg.Advertise = reg, AdvertiseDRA
	cfg.KubeletRootDir, cfg.CDIDir = t.TempDir(), t.TempDir()
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := scrape(t, reg, "carve_dra_dynamic_devices"); len(got) != 0 {
		t.Errorf("dynamic devices before any GPU is dynamic: %v, want none", got)
	}
	dev, err := m.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.SetMIGMode(partition.MIGEnabled); err != nil {
		t.Fatal(err)
	}
	if err := dev.Reset(); err != nil {
		t.Fatal(err)
	}
	gpus, err := partition.ReadInventory(m)
	if err != nil {
		t.Fatal(err)
	}
	h100, _ := partition.LookupModel("H100-80GB")
	a.driver.SetDynamic([]dra.DynamicGPU{{Index: 0, UUID: gpus[0].UUID, Model: h100, Profiles: []string{"1g.10gb", "3g.40gb"}}})
	ctx := context.Background()
	if err := a.driver.Advertise(ctx, gpus, timeslice.Resources{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*resourceapi.ResourceClaim{dynamicClaim("u-big", "big", "gpu-0-dyn-3g40gb-4"), dynamicClaim("u-small", "small", "gpu-0-dyn-1g10gb-3"), dynamicClaim("u-gone", "gone", "gpu-7")} {
		if _, err := a.driver.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c}); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]float64{
		`carve_dra_dynamic_devices{profile="1g.10gb"}`:                          1,
		`carve_dra_dynamic_devices{profile="3g.40gb"}`:                          1,
		`carve_dra_largest_placeable_profile_slices{gpu="0",profile="1g.10gb"}`: 1,
		`carve_dra_prepare_duration_seconds{kind="dynamic"}_count`:              2,
		`carve_dra_prepare_duration_seconds{kind="static"}_count`:               1,
		`carve_dra_unprepare_duration_seconds{kind="dynamic"}_count`:            0,
		`carve_dra_unprepare_duration_seconds{kind="static"}_count`:             0,
	}
	for _, r := range dra.PrepareFailures() {
		want[`carve_dra_prepare_failures_total{reason="`+r+`"}`] = 0
	}
	want[`carve_dra_prepare_failures_total{reason="unknown-device"}`] = 1
	for _, r := range dra.UnprepareFailures() {
		want[`carve_dra_unprepare_failures_total{reason="`+r+`"}`] = 0
	}
	if diff := cmp.Diff(want, scrape(t, reg, "carve_dra_")); diff != "" {
		t.Errorf("after two dynamic claims and a failed one (-want +got):\n%s", diff)
	}

	if _, err := a.driver.UnprepareResourceClaims(ctx, []dra.ClaimRef{{Namespace: "default", Name: "small", UID: "u-small"}}); err != nil {
		t.Fatal(err)
	}
	got := pick(scrape(t, reg, "carve_dra_"), "carve_dra_dynamic_devices", "carve_dra_largest", "carve_dra_unprepare_duration")
	want = map[string]float64{
		`carve_dra_dynamic_devices{profile="1g.10gb"}`:                          0,
		`carve_dra_dynamic_devices{profile="3g.40gb"}`:                          1,
		`carve_dra_largest_placeable_profile_slices{gpu="0",profile="3g.40gb"}`: 4,
		`carve_dra_unprepare_duration_seconds{kind="dynamic"}_count`:            1,
		`carve_dra_unprepare_duration_seconds{kind="static"}_count`:             0,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("after the 1g.10gb's claim was unprepared (-want +got):\n%s", diff)
	}
}
