//go:build cgo

package nvml

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/carve-dev/carve/partition"
)

// TestRealNVML runs the real go-nvml path. Without an NVIDIA driver (CI,
// developer machines) Init must fail with ErrLibraryNotFound, which proves
// the cgo binding links and its errors translate. With a driver it reads
// the GPUs, read-only: it never changes a MIG mode, an instance or a GPU.
func TestRealNVML(t *testing.T) {
	lib := New()
	if _, err := lib.DeviceCount(); !errors.Is(err, partition.ErrUninitialized) {
		t.Fatalf("DeviceCount before Init = %v, want ErrUninitialized", err)
	}
	err := lib.Init()
	switch {
	case errors.Is(err, partition.ErrLibraryNotFound):
		if !strings.Contains(err.Error(), "initialize NVML") {
			t.Errorf("Init error %q lacks context", err)
		}
		if _, err := lib.DeviceCount(); !errors.Is(err, partition.ErrUninitialized) {
			t.Errorf("DeviceCount after a failed Init = %v, want ErrUninitialized", err)
		}
		if err := lib.Shutdown(); !errors.Is(err, partition.ErrUninitialized) {
			t.Errorf("Shutdown after a failed Init = %v, want ErrUninitialized", err)
		}
		t.Logf("no NVML library here, as expected without a driver: %v", err)
		return
	case err != nil:
		t.Skipf("NVML is installed but does not open (no GPU or driver?): %v", err)
	}
	defer func() {
		if err := lib.Shutdown(); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	}()
	checkRealGPUs(t, lib)
}

// checkRealGPUs reads every GPU through lib, changing nothing.
func checkRealGPUs(t *testing.T, lib partition.NVML) {
	t.Helper()
	// A second Init is counted, not a second session.
	if err := lib.Init(); err != nil {
		t.Fatalf("second Init: %v", err)
	}
	if err := lib.Shutdown(); err != nil {
		t.Fatalf("Shutdown of the second Init: %v", err)
	}
	gpus, err := partition.ReadInventory(lib)
	if err != nil {
		t.Fatalf("ReadInventory: %v", err)
	}
	if len(gpus) == 0 {
		t.Fatal("NVML opened but reports no GPUs")
	}
	for _, g := range gpus {
		t.Logf("GPU %d: %s %s (%s, %d MiB, %s) MIG capable %v, mode %s, pending %s, %d instances",
			g.Index, g.UUID, g.Product, g.Model, g.MemoryMiB, g.PCIBusID, g.MIGCapable, g.MIGMode, g.PendingMIGMode, len(g.Instances))
		if !strings.HasPrefix(g.UUID, "GPU-") || g.MemoryMiB == 0 || strings.Count(g.PCIBusID, ":") != 2 {
			t.Errorf("GPU %d: implausible identity %+v", g.Index, g)
		}
		d, err := lib.Device(g.Index)
		if err != nil {
			t.Fatalf("Device(%d): %v", g.Index, err)
		}
		if n, err := d.Processes(); err != nil {
			t.Errorf("GPU %d: Processes: %v", g.Index, err)
		} else {
			t.Logf("GPU %d: %d processes", g.Index, n)
		}
		if g.MIGCapable {
			checkRealProfiles(t, d, g)
		}
		if g.MIGCapable && g.MIGMode == partition.MIGEnabled {
			for _, in := range g.Instances {
				if in.Complete() && !strings.HasPrefix(in.UUID(), "MIG-") {
					t.Errorf("GPU %d: instance %+v has MIG UUID %q", g.Index, in, in.UUID())
				}
			}
		}
		for _, o := range gpus {
			l, err := lib.Topology(g.Index, o.Index)
			if err != nil {
				t.Errorf("Topology(%d, %d): %v", g.Index, o.Index, err)
				continue
			}
			t.Logf("topology %d-%d: %+v", g.Index, o.Index, l)
		}
	}
	idx := make([]int, len(gpus))
	for i := range idx {
		idx[i] = i
	}
	es, err := lib.WatchXIDs(idx)
	if err != nil {
		t.Fatalf("WatchXIDs: %v", err)
	}
	if ev, err := es.Wait(50 * time.Millisecond); err == nil {
		t.Logf("an XID event was waiting: %+v", ev)
	} else if !errors.Is(err, partition.ErrTimeout) {
		t.Errorf("Wait = %v, want ErrTimeout or an event", err)
	}
	if err := es.Close(); err != nil {
		t.Errorf("Close event set: %v", err)
	}
}

// checkRealProfiles reads a MIG-capable GPU's profiles: they must read in
// MIG mode and may read without it. Where the catalogue knows the model,
// the geometry (all but the memory size, which the catalogue only
// approximates) must match it.
func checkRealProfiles(t *testing.T, d partition.Device, g partition.GPU) {
	t.Helper()
	ps, err := d.GPUInstanceProfiles()
	switch {
	case err != nil && g.MIGMode != partition.MIGEnabled && errors.Is(err, partition.ErrNotSupported):
		t.Logf("GPU %d: no profiles with MIG mode disabled: %v", g.Index, err)
		return
	case err != nil:
		t.Errorf("GPU %d: GPUInstanceProfiles: %v", g.Index, err)
		return
	}
	model, known := partition.LookupModel(g.Model)
	for _, p := range ps {
		t.Logf("GPU %d: profile %d %s: %d compute, %d memory slices, %d MiB, max %d, placements %v",
			g.Index, p.ID, p.Name, p.ComputeSlices, p.MemorySlices, p.MemoryMiB, p.MaxCount, p.Placements)
		if p.Name == "" || p.ComputeSlices == 0 || p.MemorySlices == 0 || p.MaxCount == 0 || len(p.Placements) == 0 ||
			p.MediaExtensions != strings.HasSuffix(p.Name, "+me") {
			t.Errorf("GPU %d: implausible profile %+v", g.Index, p)
		}
		if !known {
			continue
		}
		want, ok := model.ProfileByID(p.ID)
		want.MemoryMiB = p.MemoryMiB
		if !ok || !reflect.DeepEqual(p, want) {
			t.Errorf("GPU %d: profile %+v differs from the catalogue's %s: %+v", g.Index, p, model.Key, want)
		}
	}
}
