package sim_test

import (
	"errors"
	"testing"

	"github.com/carve-dev/carve/partition"
)

// An unload is refused while the library is initialised or an event set
// is open; once unloaded, Init fails; a load brings the GPUs back as after
// a reboot, without their MIG instances.
func TestDriverUnloadAndLoad(t *testing.T) {
	m := open(t, "a100-40gb")
	d, err := m.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetMIGMode(partition.MIGEnabled); err != nil {
		t.Fatal(err)
	}
	if err := d.Reset(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.CreateGPUInstance(0, partition.Placement{Start: 0, Size: 1}); err != nil {
		t.Fatal(err)
	}
	es, err := m.WatchXIDs([]int{0})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.UnloadDriver(); !errors.Is(err, partition.ErrInUse) {
		t.Fatalf("unload with the library initialised: %v, want %v", err, partition.ErrInUse)
	}
	if err := m.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := m.UnloadDriver(); !errors.Is(err, partition.ErrInUse) {
		t.Fatalf("unload with an event set open: %v, want %v", err, partition.ErrInUse)
	}
	if got := m.RefusedUnloads(); got != 2 {
		t.Errorf("refused unloads %d, want 2", got)
	}
	if err := es.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.UnloadDriver(); err != nil {
		t.Fatalf("unload with nothing open: %v", err)
	}
	if m.DriverLoaded() {
		t.Error("driver loaded after the unload")
	}
	if err := m.Init(); !errors.Is(err, partition.ErrDriverNotLoaded) {
		t.Fatalf("Init with the driver unloaded: %v, want %v", err, partition.ErrDriverNotLoaded)
	}
	if err := m.LoadDriver(); err != nil {
		t.Fatal(err)
	}
	if err := m.Init(); err != nil {
		t.Fatalf("Init after the load: %v", err)
	}
	gis, err := d.GPUInstances()
	if err != nil {
		t.Fatal(err)
	}
	if len(gis) != 0 {
		t.Errorf("GPU instances after a driver reload: %v, want none", gis)
	}
	cur, _, err := d.MIGMode()
	if err != nil || cur != partition.MIGEnabled {
		t.Errorf("MIG mode after a driver reload: %v, %v; want enabled", cur, err)
	}
}
