package sim_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
)

// modes returns a GPU's current and pending MIG modes.
func modes(t *testing.T, d partition.Device) (partition.MIGMode, partition.MIGMode) {
	t.Helper()
	cur, pending, err := d.MIGMode()
	if err != nil {
		t.Fatalf("GPU %d: MIGMode: %v", d.Index(), err)
	}
	return cur, pending
}

func TestMIGModeStaysPendingUntilReset(t *testing.T) {
	for _, spec := range []string{"dgx-a100", "dgx-a100-80", "dgx-h100", "hgx-h200", "a30x4"} {
		t.Run(spec, func(t *testing.T) {
			m := open(t, spec)
			d := device(t, m, 1)
			if cur, pending := modes(t, d); cur != partition.MIGDisabled || pending != partition.MIGDisabled {
				t.Fatalf("factory modes %v/%v, want disabled/disabled", cur, pending)
			}
			if err := d.SetMIGMode(partition.MIGEnabled); err != nil {
				t.Fatal(err)
			}
			if cur, pending := modes(t, d); cur != partition.MIGDisabled || pending != partition.MIGEnabled {
				t.Fatalf("after SetMIGMode %v/%v, want disabled/enabled", cur, pending)
			}
			if _, err := d.CreateGPUInstance(0, partition.Placement{Start: 0, Size: 1}); !errors.Is(err, partition.ErrNotSupported) {
				t.Fatalf("create with MIG pending: %v, want ErrNotSupported", err)
			}
			if err := d.Reset(); err != nil {
				t.Fatal(err)
			}
			if cur, pending := modes(t, d); cur != partition.MIGEnabled || pending != partition.MIGEnabled {
				t.Fatalf("after Reset %v/%v, want enabled/enabled", cur, pending)
			}
			if cur, _ := modes(t, device(t, m, 0)); cur != partition.MIGDisabled {
				t.Errorf("GPU 0 changed with GPU 1: %v", cur)
			}
			gi, ci := mustCreate(t, d, profileNames(t, d)[0], 0)
			// Disabling with GPU instances fails; once they are gone it pends.
			wantErr(t, "disable with GIs", d.SetMIGMode(partition.MIGDisabled), partition.ErrInUse)
			if err := d.DestroyComputeInstance(gi.ID, ci.ID); err != nil {
				t.Fatal(err)
			}
			if err := d.DestroyGPUInstance(gi.ID); err != nil {
				t.Fatal(err)
			}
			if err := d.SetMIGMode(partition.MIGDisabled); err != nil {
				t.Fatal(err)
			}
			if cur, pending := modes(t, d); cur != partition.MIGEnabled || pending != partition.MIGDisabled {
				t.Fatalf("after disabling %v/%v, want enabled/disabled", cur, pending)
			}
			if err := d.Reset(); err != nil {
				t.Fatal(err)
			}
			if cur, pending := modes(t, d); cur != partition.MIGDisabled || pending != partition.MIGDisabled {
				t.Fatalf("after second Reset %v/%v, want disabled/disabled", cur, pending)
			}
		})
	}
}

// profileNames lists a MIG-enabled device's profile names, smallest first.
func profileNames(t *testing.T, d partition.Device) []string {
	t.Helper()
	ps, err := d.GPUInstanceProfiles()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range ps {
		names = append(names, p.Name)
	}
	return names
}

func TestMIGCallsNeedMIGMode(t *testing.T) {
	m := open(t, "h100-80gb,l4-24gb")
	calls := []struct {
		name string
		call func(d partition.Device) error
	}{
		{"GPUInstanceProfiles", func(d partition.Device) error { _, err := d.GPUInstanceProfiles(); return err }},
		{"GPUInstances", func(d partition.Device) error { _, err := d.GPUInstances(); return err }},
		{"CreateGPUInstance", func(d partition.Device) error {
			_, err := d.CreateGPUInstance(0, partition.Placement{Size: 1})
			return err
		}},
		{"DestroyGPUInstance", func(d partition.Device) error { return d.DestroyGPUInstance(1) }},
		{"ComputeInstances", func(d partition.Device) error { _, err := d.ComputeInstances(1); return err }},
		{"CreateComputeInstance", func(d partition.Device) error { _, err := d.CreateComputeInstance(1); return err }},
		{"DestroyComputeInstance", func(d partition.Device) error { return d.DestroyComputeInstance(1, 0) }},
	}
	for _, gpu := range []int{0, 1} { // MIG disabled; no MIG at all
		for _, c := range calls {
			t.Run(fmt.Sprintf("GPU %d/%s", gpu, c.name), func(t *testing.T) {
				wantErr(t, c.name, c.call(device(t, m, gpu)), partition.ErrNotSupported)
			})
		}
	}
}

func TestNonMIGGPU(t *testing.T) {
	m := open(t, "h100-80gb,l4-24gb")
	d := device(t, m, 1)
	if name, _ := d.Name(); name != "NVIDIA L4" {
		t.Errorf("name %q", name)
	}
	if mem, _ := d.MemoryMiB(); mem != 23034 {
		t.Errorf("memory %d", mem)
	}
	_, _, err := d.MIGMode()
	wantErr(t, "MIGMode", err, partition.ErrNotSupported)
	wantErr(t, "SetMIGMode", d.SetMIGMode(partition.MIGEnabled), partition.ErrNotSupported)
	_, err = d.GPUInstanceProfiles()
	wantErr(t, "GPUInstanceProfiles", err, partition.ErrNotSupported)
	wantErr(t, "Reset", d.Reset(), nil)
	if err := m.SetBusy(uuidOf(t, d), true); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "Reset busy", d.Reset(), partition.ErrInUse)
}

// uuidOf returns a device's UUID.
func uuidOf(t *testing.T, d partition.Device) string {
	t.Helper()
	u, err := d.UUID()
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestSetMIGModeInvalid(t *testing.T) {
	d := device(t, open(t, "a30x4"), 0)
	wantErr(t, "mode 7", d.SetMIGMode(partition.MIGMode(7)), partition.ErrInvalidArgument)
	if _, pending := modes(t, d); pending != partition.MIGDisabled {
		t.Errorf("invalid mode changed pending to %v", pending)
	}
}

func TestResetRefusedWhileBusy(t *testing.T) {
	cases := []struct {
		name string
		busy func(t *testing.T, m *sim.Machine, d partition.Device) string // returns the UUID made busy
	}{
		{"busy GPU", func(t *testing.T, _ *sim.Machine, d partition.Device) string {
			t.Helper()
			return uuidOf(t, d)
		}},
		{"busy MIG device", func(t *testing.T, _ *sim.Machine, d partition.Device) string {
			t.Helper()
			_, ci := mustCreate(t, d, "1g.10gb", 2)
			return ci.UUID
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := open(t, "dgx-h100")
			d := device(t, m, 3)
			enableMIG(t, d)
			uuid := tc.busy(t, m, d)
			if err := m.SetBusy(uuid, true); err != nil {
				t.Fatal(err)
			}
			if n, _ := d.Processes(); n != 1 {
				t.Errorf("Processes = %d, want 1", n)
			}
			if n, _ := device(t, m, 2).Processes(); n != 0 {
				t.Errorf("GPU 2 Processes = %d, want 0", n)
			}
			if err := d.SetMIGMode(partition.MIGEnabled); err != nil {
				t.Fatal(err)
			}
			wantErr(t, "Reset busy", d.Reset(), partition.ErrInUse)
			if err := m.SetBusy(uuid, false); err != nil {
				t.Fatal(err)
			}
			if n, _ := d.Processes(); n != 0 {
				t.Errorf("Processes = %d after freeing, want 0", n)
			}
			wantErr(t, "Reset free", d.Reset(), nil)
		})
	}
}

func TestResetDestroysInstances(t *testing.T) {
	m := open(t, "dgx-a100")
	d := device(t, m, 0)
	enableMIG(t, d)
	mustCreate(t, d, "3g.20gb", 0)
	if err := d.Reset(); err != nil {
		t.Fatal(err)
	}
	if gis, err := d.GPUInstances(); err != nil || len(gis) != 0 {
		t.Errorf("after Reset: %v %v, want no GPU instances", gis, err)
	}
}

func TestRebootOnlyAndReboot(t *testing.T) {
	m := open(t, "dgx-h100")
	if err := m.SetRebootOnly(2, true); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "bad GPU", m.SetRebootOnly(8, true), partition.ErrInvalidArgument)
	d2, d5 := device(t, m, 2), device(t, m, 5)
	if err := d2.SetMIGMode(partition.MIGEnabled); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "Reset reboot-only", d2.Reset(), partition.ErrNotSupported)
	if cur, _ := modes(t, d2); cur != partition.MIGDisabled {
		t.Fatalf("failed Reset changed the mode")
	}
	// GPU 5: MIG on, an instance in use, MIG pending off is refused while
	// the instance lives, so pend a change on GPU 5 by other means: keep it
	// enabled and busy.
	enableMIG(t, d5)
	_, ci := mustCreate(t, d5, "7g.80gb", 0)
	if err := m.SetBusy(ci.UUID, true); err != nil {
		t.Fatal(err)
	}
	if err := m.SetBusy(uuidOf(t, d2), true); err != nil {
		t.Fatal(err)
	}
	m.ResetOpLog()
	if err := m.Reboot(); err != nil {
		t.Fatal(err)
	}
	if cur, pending := modes(t, d2); cur != partition.MIGEnabled || pending != partition.MIGEnabled {
		t.Errorf("GPU 2 after reboot %v/%v, want enabled/enabled", cur, pending)
	}
	for _, d := range []partition.Device{d2, d5} {
		if n, _ := d.Processes(); n != 0 {
			t.Errorf("GPU %d: %d processes after reboot", d.Index(), n)
		}
	}
	if cur, _ := modes(t, d5); cur != partition.MIGEnabled {
		t.Errorf("GPU 5 lost MIG mode across reboot")
	}
	if gis, _ := d5.GPUInstances(); len(gis) != 0 {
		t.Errorf("GPU 5 kept %v across reboot", gis)
	}
	if cur, _ := modes(t, device(t, m, 0)); cur != partition.MIGDisabled {
		t.Errorf("GPU 0 changed by reboot")
	}
	if ops := m.OpLog(); len(ops) != 0 {
		t.Errorf("reboot logged ops %v", ops)
	}
	// Still reboot-only after the reboot.
	wantErr(t, "Reset reboot-only after reboot", d2.Reset(), partition.ErrNotSupported)
	if err := m.SetRebootOnly(2, false); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "Reset after clearing reboot-only", d2.Reset(), nil)
}

func TestInitShutdown(t *testing.T) {
	m, err := sim.New("a30x4")
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.DeviceCount()
	wantErr(t, "DeviceCount before Init", err, partition.ErrUninitialized)
	_, err = m.Device(0)
	wantErr(t, "Device before Init", err, partition.ErrUninitialized)
	wantErr(t, "Shutdown before Init", m.Shutdown(), partition.ErrUninitialized)
	for range 2 {
		if err := m.Init(); err != nil {
			t.Fatal(err)
		}
	}
	d, err := m.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := m.DeviceCount(); err != nil || n != 4 {
		t.Fatalf("DeviceCount = %d, %v", n, err)
	}
	if err := m.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.UUID(); err != nil {
		t.Errorf("UUID after one of two Shutdowns: %v", err)
	}
	if err := m.Shutdown(); err != nil {
		t.Fatal(err)
	}
	_, err = d.UUID()
	wantErr(t, "UUID after Shutdown", err, partition.ErrUninitialized)
	wantErr(t, "SetMIGMode after Shutdown", d.SetMIGMode(partition.MIGEnabled), partition.ErrUninitialized)
	_, err = m.Device(7)
	wantErr(t, "Device out of range", err, partition.ErrInvalidArgument)
}
