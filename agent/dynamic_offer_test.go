package agent

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/dra"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/timeslice"
)

// fakeDynamic is a DynamicAdvertiser that records what it is told and
// answers the claims' instances it is given.
type fakeDynamic struct {
	*fakeAdvertiser
	mu       sync.Mutex
	dynamic  []dra.DynamicGPU
	changing []string
	claims   map[string][]partition.Placement
}

func (f *fakeDynamic) Advertise(ctx context.Context, _ []partition.GPU, res timeslice.Resources) error {
	return f.Update(ctx, res)
}

func (f *fakeDynamic) SetDynamic(gpus []dra.DynamicGPU) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dynamic = slices.Clone(gpus)
}

func (f *fakeDynamic) SetChanging(uuids []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.changing = slices.Clone(uuids)
}

func (f *fakeDynamic) ClaimInstances() map[string][]partition.Placement {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.claims
}

func (f *fakeDynamic) Dynamic() []dra.DynamicGPU {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.dynamic)
}

// MadeInstances answers the claims' instances it is given, each made for
// a claim default/claim-N.
func (f *fakeDynamic) MadeInstances() []dra.MadeInstance {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []dra.MadeInstance
	for _, uuid := range slices.Sorted(maps.Keys(f.claims)) {
		for _, at := range f.claims[uuid] {
			name := fmt.Sprintf("claim-%d", len(out))
			out = append(out, dra.MadeInstance{Instance: carvev1.ClaimInstance{Claim: "uid-" + name, GPU: uuid,
				Placement: partition.PlacementToV1(at), State: carvev1.InstanceMade}, Namespace: "default", Name: name})
		}
	}
	return out
}

// offered returns the dynamic GPUs (index: profiles) and the changing
// GPUs' indexes last set.
func (f *fakeDynamic) offered(h *harness) (map[int][]string, []int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	dyn := map[int][]string{}
	for _, g := range f.dynamic {
		dyn[g.Index] = g.Profiles
	}
	var changing []int
	for _, g := range h.gpus() {
		if slices.Contains(f.changing, g.UUID) {
			changing = append(changing, g.Index)
		}
	}
	return dyn, changing
}

var _ DynamicAdvertiser = (*fakeDynamic)(nil)

// TestDynamicOffer: a GPU turning dynamic is marked changing while its
// change waits for a pod, and offered once MIG is on with no instance;
// the instances made for claims on it are neither planned away nor stop
// it being offered, while an instance nobody recorded is destroyed; turned
// static while a claim holds a device made on it, a layout that keeps the
// device keeps it, offered to no one else, and one that has no room for it
// marks the GPU changing and waits for the drain.
func TestDynamicOffer(t *testing.T) {
	h := newHarness(t, "h100-80gb*2")
	fd := &fakeDynamic{fakeAdvertiser: h.adv}
	h.r.Devices, h.r.Advertise = fd, AdvertiseDRA
	f := h.parse(dynamicProfiles)
	h.reconcile(f, nil, "balanced")
	gpu1 := h.gpus()[1].UUID
	busy := h.migUUID(1, "3g.40gb")
	h.inUse.hold(busy, "trainer")

	h.reconcile(f, nil, "hybrid")
	dyn, changing := fd.offered(h)
	if len(dyn) != 0 || !slices.Equal(changing, []int{1}) {
		t.Fatalf("while GPU 1 waits to turn dynamic: dynamic %v changing %v, want none and GPU 1", dyn, changing)
	}

	h.inUse.release(busy)
	h.now = h.now.Add(time.Minute)
	if res := h.reconcile(f, nil, "hybrid"); res.State != carvev1.StateSuccess {
		t.Fatalf("state %s (events %v)", res.State, reasons(res.Events))
	}
	dyn, changing = fd.offered(h)
	if diff := cmp.Diff(map[int][]string{1: {"1g.10gb", "3g.40gb", "7g.80gb"}}, dyn); diff != "" || len(changing) != 0 {
		t.Fatalf("GPU 1 dynamic: offered (-want +got):\n%s changing %v", diff, changing)
	}

	// A device made for a claim (recorded), and one nobody recorded.
	dev, err := h.m.Device(1)
	if err != nil {
		t.Fatal(err)
	}
	h100, _ := partition.LookupModel("H100-80GB")
	p3, _ := h100.Profile("3g.40gb")
	p1, _ := h100.Profile("1g.10gb")
	for _, mk := range []struct {
		p  partition.GIProfile
		at partition.Placement
	}{{p3, partition.Placement{Start: 4, Size: 4}}, {p1, partition.Placement{Start: 0, Size: 1}}} {
		gi, err := dev.CreateGPUInstance(mk.p.ID, mk.at)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dev.CreateComputeInstance(gi.ID); err != nil {
			t.Fatal(err)
		}
	}
	fd.claims = map[string][]partition.Placement{gpu1: {{Start: 4, Size: 4}}}
	claimed := h.migUUID(1, "3g.40gb")
	h.m.ResetOpLog()
	h.now = h.now.Add(time.Minute)
	if res := h.reconcile(f, nil, "hybrid"); res.State != carvev1.StateSuccess {
		t.Fatalf("state %s (events %v)", res.State, reasons(res.Events))
	}
	if got := layout(h.gpus()); got != "0:[1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6] 1:[3g.40gb@4]" {
		t.Fatalf("layout %s: want the claim's 3g.40gb kept and the unrecorded 1g.10gb destroyed", got)
	}
	if dyn, _ = fd.offered(h); len(dyn) != 1 {
		t.Errorf("GPU 1 with a claim's device is not offered: %v", dyn)
	}
	// The record marks GPU 1 dynamic and offered, and the claim's device.
	var marked []string
	for _, g := range h.reconcile(f, nil, "hybrid").Annotation.GPUs {
		if g.Dynamic != nil {
			marked = append(marked, fmt.Sprintf("GPU %d %v offered=%t", g.Index, g.Dynamic.Profiles, g.Dynamic.Offered))
		}
		for _, in := range g.Instances {
			if in.Claim != nil {
				marked = append(marked, fmt.Sprintf("GPU %d %s@%d:%d %s", g.Index, in.Profile, in.Placement.Start, in.Placement.Size, in.Claim))
			}
		}
	}
	if diff := cmp.Diff([]string{"GPU 1 [1g.10gb 3g.40gb 7g.80gb] offered=true", "GPU 1 3g.40gb@4:4 default/claim-0"}, marked); diff != "" {
		t.Errorf("the record's dynamic GPUs and claims' devices (-want +got):\n%s", diff)
	}

	// Static again with a layout that keeps the claim's device: kept, and
	// not offered while the claim holds it.
	h.inUse.hold(claimed, "claim-pod")
	if res := h.reconcile(f, nil, "half"); res.State != carvev1.StateSuccess {
		t.Fatalf("state %s (events %v)", res.State, reasons(res.Events))
	}
	if h.migUUID(1, "3g.40gb") != claimed || h.adv.counts()["nvidia.com/mig-3g.40gb"] != 1 {
		t.Errorf("profile half: GPU 1's 3g.40gb %s (the claim's: %s), advertised %v; want it kept and only GPU 0's offered",
			h.migUUID(1, "3g.40gb"), claimed, h.adv.counts())
	}

	// Static with a layout that has no room for it: the drain first.
	if res := h.reconcile(f, nil, "small"); res.State != carvev1.StateDraining {
		t.Fatalf("state %s, want draining", res.State)
	}
	if dyn, changing = fd.offered(h); len(dyn) != 0 || !slices.Equal(changing, []int{1}) {
		t.Errorf("GPU 1 turning static with a claim's device: dynamic %v changing %v, want none and GPU 1", dyn, changing)
	}
	if h.migUUID(1, "3g.40gb") != claimed {
		t.Error("the claim's device was destroyed under its pod")
	}
}
