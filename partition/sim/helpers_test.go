package sim_test

import (
	"errors"
	"testing"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
)

// open returns an initialised in-memory machine.
func open(t *testing.T, spec string) *sim.Machine {
	t.Helper()
	m, err := sim.New(spec)
	if err != nil {
		t.Fatalf("New(%q): %v", spec, err)
	}
	initMachine(t, m)
	return m
}

// initMachine calls Init and registers the Shutdown.
func initMachine(t *testing.T, m *sim.Machine) {
	t.Helper()
	if err := m.Init(); err != nil {
		t.Fatalf("Init: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Shutdown(); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
}

// device returns GPU i of m.
func device(t *testing.T, m *sim.Machine, i int) partition.Device {
	t.Helper()
	d, err := m.Device(i)
	if err != nil {
		t.Fatalf("Device(%d): %v", i, err)
	}
	return d
}

// enableMIG turns MIG on for a GPU through SetMIGMode and Reset.
func enableMIG(t *testing.T, d partition.Device) {
	t.Helper()
	if err := d.SetMIGMode(partition.MIGEnabled); err != nil {
		t.Fatalf("GPU %d: SetMIGMode: %v", d.Index(), err)
	}
	if err := d.Reset(); err != nil {
		t.Fatalf("GPU %d: Reset: %v", d.Index(), err)
	}
}

// profileIDs maps the device's profile names to IDs.
func profileIDs(t *testing.T, d partition.Device) map[string]partition.GIProfile {
	t.Helper()
	ps, err := d.GPUInstanceProfiles()
	if err != nil {
		t.Fatalf("GPU %d: GPUInstanceProfiles: %v", d.Index(), err)
	}
	out := map[string]partition.GIProfile{}
	for _, p := range ps {
		out[p.Name] = p
	}
	return out
}

// mustCreate creates a GI with a filling CI and returns both.
func mustCreate(t *testing.T, d partition.Device, profile string, start int) (partition.GPUInstance, partition.ComputeInstance) {
	t.Helper()
	p, ok := profileIDs(t, d)[profile]
	if !ok {
		t.Fatalf("GPU %d: no profile %s", d.Index(), profile)
	}
	gi, err := d.CreateGPUInstance(p.ID, partition.Placement{Start: start, Size: p.MemorySlices})
	if err != nil {
		t.Fatalf("GPU %d: create %s at %d: %v", d.Index(), profile, start, err)
	}
	ci, err := d.CreateComputeInstance(gi.ID)
	if err != nil {
		t.Fatalf("GPU %d: create CI in GI %d: %v", d.Index(), gi.ID, err)
	}
	return gi, ci
}

// wantErr checks that err wraps want (nil: no error).
func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	switch {
	case want == nil && err != nil:
		t.Errorf("%s: unexpected error %v", what, err)
	case want != nil && !errors.Is(err, want):
		t.Errorf("%s: error %v, want one wrapping %q", what, err, want)
	}
}
