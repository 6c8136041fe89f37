package sim_test

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/carve-dev/carve/partition"
)

func TestReadInventory(t *testing.T) {
	cases := []struct {
		spec    string
		count   int
		model   string
		product string
		memMiB  uint64
	}{
		{"dgx-a100", 8, "A100-40GB", "NVIDIA A100-SXM4-40GB", 40960},
		{"dgx-a100-80", 8, "A100-80GB", "NVIDIA A100-SXM4-80GB", 81920},
		{"dgx-h100", 8, "H100-80GB", "NVIDIA H100 80GB HBM3", 81559},
		{"hgx-h200", 8, "H200-141GB", "NVIDIA H200", 143771},
		{"a30x4", 4, "A30-24GB", "NVIDIA A30", 24576},
	}
	for _, tc := range cases {
		t.Run(tc.spec, func(t *testing.T) {
			m := open(t, tc.spec)
			gpus, err := partition.ReadInventory(m)
			if err != nil {
				t.Fatal(err)
			}
			if len(gpus) != tc.count {
				t.Fatalf("%d GPUs, want %d", len(gpus), tc.count)
			}
			for i, g := range gpus {
				if g.Index != i || g.Model != tc.model || g.Product != tc.product || g.MemoryMiB != tc.memMiB ||
					!g.MIGCapable || g.MIGMode != partition.MIGDisabled || len(g.Instances) != 0 ||
					!uuidRE("GPU").MatchString(g.UUID) || g.PCIBusID == "" {
					t.Errorf("GPU %d = %+v", i, g)
				}
			}
		})
	}
}

func TestReadInventoryMIGLayout(t *testing.T) {
	m := open(t, "dgx-h100")
	before, err := partition.ReadInventory(m)
	if err != nil {
		t.Fatal(err)
	}
	d := device(t, m, 2)
	enableMIG(t, d)
	giB, ciB := mustCreate(t, d, "3g.40gb", 4)
	giA, ciA := mustCreate(t, d, "4g.40gb", 0)
	gpus, err := partition.ReadInventory(m)
	if err != nil {
		t.Fatal(err)
	}
	g := gpus[2]
	if g.MIGMode != partition.MIGEnabled || g.PendingMIGMode != partition.MIGEnabled {
		t.Errorf("modes %v/%v", g.MIGMode, g.PendingMIGMode)
	}
	// The simulator reports each profile's SMs, engines and nvidia-smi
	// profile ID as an H100 does.
	eng4g := partition.Engines{Multiprocessors: 64, CopyEngines: 4, Decoders: 4, JPEGs: 4}
	eng3g := partition.Engines{Multiprocessors: 60, CopyEngines: 3, Decoders: 3, JPEGs: 3}
	want := []partition.Instance{
		{GIID: giA.ID, ProfileID: giA.ProfileID, InfoID: 5, Profile: "4g.40gb", Placement: partition.Placement{Start: 0, Size: 4}, ComputeSlices: 4, MemoryMiB: 40448, Engines: eng4g, CIs: []partition.ComputeInstance{ciA}},
		{GIID: giB.ID, ProfileID: giB.ProfileID, InfoID: 9, Profile: "3g.40gb", Placement: partition.Placement{Start: 4, Size: 4}, ComputeSlices: 3, MemoryMiB: 40448, Engines: eng3g, CIs: []partition.ComputeInstance{ciB}},
	}
	if !reflect.DeepEqual(g.Instances, want) {
		t.Errorf("instances\n got %+v\nwant %+v", g.Instances, want)
	}
	for _, in := range g.Instances {
		if !in.Complete() || in.UUID() != in.CIs[0].UUID {
			t.Errorf("instance %+v not complete", in)
		}
	}
	// Changing GPU 2 left every other GPU as it was.
	for i := range gpus {
		if i != 2 && !reflect.DeepEqual(gpus[i], before[i]) {
			t.Errorf("GPU %d changed: %+v -> %+v", i, before[i], gpus[i])
		}
	}
}

func TestReadInventoryNonMIG(t *testing.T) {
	m := open(t, "a30-24gb,l4-24gb")
	gpus, err := partition.ReadInventory(m)
	if err != nil {
		t.Fatal(err)
	}
	if l4 := gpus[1]; l4.MIGCapable || l4.Product != "NVIDIA L4" || l4.MemoryMiB != 23034 {
		t.Errorf("L4 = %+v", l4)
	}
	if !gpus[0].MIGCapable {
		t.Errorf("A30 not MIG capable")
	}
}

func TestConcurrentUse(t *testing.T) {
	m := open(t, "dgx-a100")
	for i := range 8 {
		enableMIG(t, device(t, m, i))
	}
	es, err := m.WatchXIDs([]int{0, 1, 2, 3, 4, 5, 6, 7})
	if err != nil {
		t.Fatal(err)
	}
	defer es.Close()
	const rounds = 30
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	// Two workers per GPU race for the same placements.
	for gpu := range 8 {
		for w := range 2 {
			wg.Go(func() {
				d, err := m.Device(gpu)
				if err != nil {
					errs <- err
					return
				}
				for r := range rounds {
					gi, err := d.CreateGPUInstance(2, partition.Placement{Start: 4 * ((r + w) % 2), Size: 4})
					if errors.Is(err, partition.ErrInsufficientResources) {
						continue
					}
					if err != nil {
						errs <- err
						return
					}
					ci, err := d.CreateComputeInstance(gi.ID)
					if err == nil {
						err = d.DestroyComputeInstance(gi.ID, ci.ID)
					}
					if err == nil {
						err = d.DestroyGPUInstance(gi.ID)
					}
					if err != nil {
						errs <- fmt.Errorf("GPU %d worker %d: %w", gpu, w, err)
						return
					}
				}
			})
		}
	}
	// Readers, test API and XIDs alongside.
	wg.Add(3)
	go func() {
		defer wg.Done()
		for range rounds {
			// ReadInventory is several NVML calls, not one atomic view: a
			// GPU instance may vanish between listing and reading its CIs,
			// as on real GPUs.
			if _, err := partition.ReadInventory(m); err != nil && !errors.Is(err, partition.ErrNotFound) {
				errs <- err
				return
			}
			_ = m.Snapshot()
			_ = m.OpLog()
		}
	}()
	go func() {
		defer wg.Done()
		for r := range rounds {
			if err := m.RaiseXID(r%8, 43, -1, -1); err != nil {
				errs <- err
				return
			}
			_ = m.SetBusy("GPU-unknown", true)
		}
	}()
	go func() {
		defer wg.Done()
		for range rounds {
			if _, err := es.Wait(long); err != nil {
				errs <- err
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	gpus, err := partition.ReadInventory(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gpus {
		if len(g.Instances) != 0 {
			t.Errorf("GPU %d left with %+v", g.Index, g.Instances)
		}
	}
}

// The simulated GPUs report each profile's SMs and engines as the
// catalogue has them, so that the labels built from them match GFD's.
func TestProfilesReportEngines(t *testing.T) {
	for _, machine := range []string{"dgx-a100", "dgx-h100", "dgx-b200", "a30x4", "rtx-pro-6000-x4"} {
		t.Run(machine, func(t *testing.T) {
			d := device(t, open(t, machine), 0)
			enableMIG(t, d)
			name, err := d.Name()
			if err != nil {
				t.Fatal(err)
			}
			mem, err := d.MemoryMiB()
			if err != nil {
				t.Fatal(err)
			}
			model, ok := partition.ModelForProduct(name, mem)
			if !ok {
				t.Fatalf("no catalogue model for %q", name)
			}
			ps, err := d.GPUInstanceProfiles()
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range ps {
				want, _ := model.ProfileByID(p.ID)
				if p.Engines != want.Engines || p.Multiprocessors == 0 {
					t.Errorf("%s: engines %+v, want the catalogue's %+v", p.Name, p.Engines, want.Engines)
				}
			}
		})
	}
}
