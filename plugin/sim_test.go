package plugin

import (
	"context"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/timeslice"
)

// TestWithSimulator runs the plugin against the simulated a30x4 machine:
// GPU 1 carries one MIG device, the others are whole GPUs; the resources
// come from the real inventory and expansion code.
func TestWithSimulator(t *testing.T) {
	m, err := sim.New("a30x4")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Init(); err != nil {
		t.Fatal(err)
	}
	// Two failed event-set creations first: the health loop must retry.
	if err := m.InjectFault(sim.Fault{Call: "WatchXIDs", GPU: -1, Err: partition.ErrNotSupported, Times: 2}); err != nil {
		t.Fatal(err)
	}
	d, err := m.Device(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetMIGMode(partition.MIGEnabled); err != nil {
		t.Fatal(err)
	}
	if err := d.Reset(); err != nil {
		t.Fatal(err)
	}
	profiles, err := d.GPUInstanceProfiles()
	if err != nil || len(profiles) == 0 {
		t.Fatalf("profiles: %v %v", profiles, err)
	}
	gi, err := d.CreateGPUInstance(profiles[0].ID, profiles[0].Placements[0])
	if err != nil {
		t.Fatal(err)
	}
	ci, err := d.CreateComputeInstance(gi.ID)
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := partition.ReadInventory(m)
	if err != nil {
		t.Fatal(err)
	}
	res, err := timeslice.Expand(gpus, nil)
	if err != nil {
		t.Fatal(err)
	}
	migName := carvev1.ResourceName(profiles[0].Name, false)
	if len(res[carvev1.GPUResource]) != 3 || len(res[migName]) != 1 {
		t.Fatalf("resources %v", res.Counts())
	}

	e := newEnv(t, Options{
		NVML:   m,
		Health: HealthOptions{Poll: 10 * time.Millisecond, MinBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond},
	}, true)
	e.update(t, res)
	gpuP := e.kubelet.plugin(t, carvev1.GPUResource, msgWait)
	gpuP.next(t, msgWait)
	migP := e.kubelet.plugin(t, migName, msgWait)
	migP.next(t, msgWait)

	// Topology: GPUs 2 and 3 share a 4-NVLink bridge; 0 has no NVLink
	// to either.
	uuid := func(i int) string { return gpus[i].UUID }
	resp, err := dialPlugin(t, e.socket(carvev1.GPUResource)).GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs: []string{uuid(0), uuid(2), uuid(3)}, AllocationSize: 2,
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := resp.ContainerResponses[0].DeviceIDs
	sort.Strings(got)
	want := []string{uuid(2), uuid(3)}
	sort.Strings(want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("preferred %v, want the NVLink pair %v", got, want)
	}

	// An XID on the MIG device hits it alone; one on GPU 3 hits GPU 3.
	eventually(t, msgWait, "health watch set up", func() bool {
		if err := m.RaiseXID(1, 94, gi.ID, ci.ID); err != nil {
			t.Fatal(err)
		}
		select {
		case msg := <-migP.msgs:
			if msg.Devices[0].Health != pluginapi.Unhealthy {
				t.Fatalf("MIG device after XID: %v", summary(msg))
			}
			return true
		case <-time.After(50 * time.Millisecond):
			return false
		}
	})
	// The MIG XID sent the whole-GPU resource nothing: once its streams
	// have sent what the XID caused, the list of the XID on GPU 3 (the
	// sentinel) must be its next.
	e.flush(t, carvev1.GPUResource)
	if err := m.RaiseXID(3, 79, -1, -1); err != nil {
		t.Fatal(err)
	}
	wantHealth := map[string]string{uuid(0): "Healthy", uuid(2): "Healthy", uuid(3): "Unhealthy"}
	if diff := cmp.Diff(wantHealth, summary(gpuP.next(t, msgWait))); diff != "" {
		t.Errorf("first list after the MIG XID and the XID on GPU 3 (-want +got):\n%s", diff)
	}
}
