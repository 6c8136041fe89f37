package sim_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
)

// TestInUseNamesTheProcesses: the simulator refuses a destroy or a reset
// of a device processes hold with an InUseError naming the devices and the
// processes, as the real binding does; a freed device goes.
func TestInUseNamesTheProcesses(t *testing.T) {
	m := open(t, "h100-80gb*1")
	d := device(t, m, 0)
	enableMIG(t, d)
	gi, ci := mustCreate(t, d, "3g.40gb", 0)
	_, other := mustCreate(t, d, "3g.40gb", 4)
	gpu, err := d.UUID()
	if err != nil {
		t.Fatal(err)
	}
	set := func(uuid string, procs ...partition.Process) {
		t.Helper()
		if err := m.SetProcesses(uuid, procs); err != nil {
			t.Fatal(err)
		}
	}
	set(ci.UUID, partition.Process{PID: 4300, Name: "tritonserver"}, partition.Process{PID: 4242, Name: "python3"})
	set(other.UUID, partition.Process{PID: 77, Name: "trainer"})
	set(gpu, partition.Process{PID: 9, Name: "dcgm"}, partition.Process{PID: 4242, Name: "python3"})

	onCI := []partition.Process{{PID: 4242, Name: "python3", Device: ci.UUID}, {PID: 4300, Name: "tritonserver", Device: ci.UUID}}
	all := []partition.Process{
		{PID: 9, Name: "dcgm", Device: gpu}, {PID: 77, Name: "trainer", Device: other.UUID},
		{PID: 4242, Name: "python3", Device: gpu}, {PID: 4300, Name: "tritonserver", Device: ci.UUID},
	}
	tests := []struct {
		name string
		call func() error
		want partition.InUseError
		text string
	}{
		{"destroy compute instance", func() error { return d.DestroyComputeInstance(gi.ID, ci.ID) },
			partition.InUseError{Devices: []string{ci.UUID}, Processes: onCI},
			"GPU 0: destroy compute instance 0 of GPU instance 1: a process holds MIG device " + ci.UUID + ": in use; held by pid 4242 (python3), pid 4300 (tritonserver)"},
		{"destroy GPU instance", func() error { return d.DestroyGPUInstance(gi.ID) },
			partition.InUseError{Devices: []string{ci.UUID}, Processes: onCI},
			"GPU 0: destroy GPU instance 1 (3g.40gb at 0:4): a process holds its MIG device: in use; held by pid 4242 (python3), pid 4300 (tritonserver)"},
		{"reset", d.Reset,
			partition.InUseError{Devices: sortedUUIDs(gpu, ci.UUID, other.UUID), Processes: all},
			"GPU 0: reset: 4 processes hold the GPU: in use; held by pid 9 (dcgm), pid 77 (trainer), pid 4242 (python3), pid 4300 (tritonserver)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if !errors.Is(err, partition.ErrInUse) {
				t.Fatalf("err %v, want ErrInUse", err)
			}
			got := partition.InUseOf(err)
			if got == nil {
				t.Fatalf("error %q is no InUseError", err)
			}
			if diff := cmp.Diff(tt.want, *got, cmpopts.IgnoreFields(partition.InUseError{}, "Err")); diff != "" {
				t.Errorf("InUseError (-want +got):\n%s", diff)
			}
			if err.Error() != tt.text {
				t.Errorf("error text\n got %q\nwant %q", err, tt.text)
			}
		})
	}
	if n, err := d.Processes(); err != nil || n != 4 {
		t.Errorf("Processes() = %d, %v; want 4 (each PID once)", n, err)
	}

	// Freed, the instance goes; the reset waits for the GPU's processes.
	set(ci.UUID)
	wantErr(t, "destroy freed CI", d.DestroyComputeInstance(gi.ID, ci.ID), nil)
	wantErr(t, "destroy freed GI", d.DestroyGPUInstance(gi.ID), nil)
	wantErr(t, "SetProcesses PID 0", m.SetProcesses(gpu, []partition.Process{{PID: 0}}), partition.ErrInvalidArgument)
	wantErr(t, "SetProcesses unknown", m.SetProcesses("GPU-nope", nil), partition.ErrNotFound)
}

// TestSetBusyMakesUpAProcess: SetBusy holds a device with one process of
// its own, which the refusal names.
func TestSetBusyMakesUpAProcess(t *testing.T) {
	m := open(t, "h100-80gb*2")
	a, b := device(t, m, 0), device(t, m, 1)
	for _, d := range []partition.Device{a, b} {
		uuid, err := d.UUID()
		if err != nil {
			t.Fatal(err)
		}
		if err := m.SetBusy(uuid, true); err != nil {
			t.Fatal(err)
		}
		if err := m.SetBusy(uuid, true); err != nil { // already busy: the same process
			t.Fatal(err)
		}
	}
	for i, d := range []partition.Device{a, b} {
		err := d.Reset()
		e := partition.InUseOf(err)
		if e == nil {
			t.Fatalf("GPU %d: Reset = %v, want an InUseError", i, err)
		}
		want := []partition.Process{{PID: uint32(4000 + i), Name: sim.SetBusyProcessName, Device: e.Devices[0]}}
		if diff := cmp.Diff(want, e.Processes); diff != "" {
			t.Errorf("GPU %d: processes (-want +got):\n%s", i, diff)
		}
	}
}

// sortedUUIDs returns the UUIDs sorted, as InUseError.Devices holds them.
func sortedUUIDs(uuids ...string) []string { return slices.Sorted(slices.Values(uuids)) }
