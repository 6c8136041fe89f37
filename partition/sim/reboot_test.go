package sim_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
)

// errFault is the error of the faults the reboot tests inject.
var errFault = errors.New("injected")

// rebootSpec is the machine of the reboot tests: two GPUs with MIG, one
// without.
const rebootSpec = "h100-80gb*2,l4-24gb"

// gpuSummary describes each GPU of m in one line: modes, instances,
// processes and marks.
func gpuSummary(t *testing.T, m *sim.Machine) []string {
	t.Helper()
	var out []string
	for _, g := range m.Snapshot().GPUs {
		procs, err := device(t, m, g.Index).Processes()
		if err != nil {
			t.Fatalf("GPU %d: Processes: %v", g.Index, err)
		}
		line := fmt.Sprintf("%d: %s/%s, %d instances, %d processes", g.Index, g.MIGMode, g.PendingMIGMode, len(g.Instances), procs)
		if g.RebootOnly {
			line += ", reboot-only"
		}
		if g.MIGModeVolatile {
			line += ", volatile"
		}
		out = append(out, line)
	}
	return out
}

func TestReboot(t *testing.T) {
	tests := []struct {
		name string
		// setup runs on an initialised machine.
		setup func(t *testing.T, m *sim.Machine)
		// shutdown reboots the machine without Init.
		shutdown bool
		want     []string
	}{
		{
			name:  "factory state stays",
			setup: func(*testing.T, *sim.Machine) {},
			want:  []string{"0: disabled/disabled, 0 instances, 0 processes", "1: disabled/disabled, 0 instances, 0 processes", "2: /, 0 instances, 0 processes"},
		},
		{
			name: "instances are gone, the MIG mode stays",
			setup: func(t *testing.T, m *sim.Machine) {
				t.Helper()
				d := device(t, m, 0)
				enableMIG(t, d)
				mustCreate(t, d, "3g.40gb", 4)
				mustCreate(t, d, "1g.10gb", 0)
			},
			want: []string{"0: enabled/enabled, 0 instances, 0 processes", "1: disabled/disabled, 0 instances, 0 processes", "2: /, 0 instances, 0 processes"},
		},
		{
			name: "pending modes become current",
			setup: func(t *testing.T, m *sim.Machine) {
				t.Helper()
				d0 := device(t, m, 0)
				enableMIG(t, d0)
				if err := d0.SetMIGMode(partition.MIGDisabled); err != nil {
					t.Fatal(err)
				}
				if err := device(t, m, 1).SetMIGMode(partition.MIGEnabled); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{"0: disabled/disabled, 0 instances, 0 processes", "1: enabled/enabled, 0 instances, 0 processes", "2: /, 0 instances, 0 processes"},
		},
		{
			name: "processes holding GPUs and MIG devices are gone",
			setup: func(t *testing.T, m *sim.Machine) {
				t.Helper()
				d0 := device(t, m, 0)
				enableMIG(t, d0)
				_, ci := mustCreate(t, d0, "7g.80gb", 0)
				for _, uuid := range []string{ci.UUID, uuidOf(t, device(t, m, 1)), uuidOf(t, device(t, m, 2))} {
					if err := m.SetBusy(uuid, true); err != nil {
						t.Fatal(err)
					}
				}
			},
			want: []string{"0: enabled/enabled, 0 instances, 0 processes", "1: disabled/disabled, 0 instances, 0 processes", "2: /, 0 instances, 0 processes"},
		},
		{
			name: "a reboot-only GPU gets its pending mode and stays reboot-only",
			setup: func(t *testing.T, m *sim.Machine) {
				t.Helper()
				if err := m.SetRebootOnly(1, true); err != nil {
					t.Fatal(err)
				}
				if err := device(t, m, 1).SetMIGMode(partition.MIGEnabled); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{"0: disabled/disabled, 0 instances, 0 processes", "1: enabled/enabled, 0 instances, 0 processes, reboot-only", "2: /, 0 instances, 0 processes"},
		},
		{
			name: "a volatile MIG mode is lost",
			setup: func(t *testing.T, m *sim.Machine) {
				t.Helper()
				for i := range 2 {
					d := device(t, m, i)
					enableMIG(t, d)
					mustCreate(t, d, "3g.40gb", 0)
				}
				if err := m.SetMIGModeVolatile(1, true); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{"0: enabled/enabled, 0 instances, 0 processes", "1: disabled/disabled, 0 instances, 0 processes, volatile", "2: /, 0 instances, 0 processes"},
		},
		{
			name: "without Init and with every call faulty",
			setup: func(t *testing.T, m *sim.Machine) {
				t.Helper()
				d := device(t, m, 0)
				enableMIG(t, d)
				mustCreate(t, d, "3g.40gb", 0)
				for _, call := range []string{"Reset", "SetMIGMode", "DestroyGPUInstance", "DestroyComputeInstance", "Init"} {
					if err := m.InjectFault(sim.Fault{Call: call, GPU: -1, Err: errFault}); err != nil {
						t.Fatal(err)
					}
				}
			},
			shutdown: true,
			want:     []string{"0: enabled/enabled, 0 instances, 0 processes", "1: disabled/disabled, 0 instances, 0 processes", "2: /, 0 instances, 0 processes"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := sim.New(rebootSpec)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Init(); err != nil {
				t.Fatal(err)
			}
			tt.setup(t, m)
			m.ResetOpLog()
			if tt.shutdown {
				if err := m.Shutdown(); err != nil {
					t.Fatal(err)
				}
			}
			if err := m.Reboot(); err != nil {
				t.Fatalf("Reboot: %v", err)
			}
			if tt.shutdown {
				// The faults outlive the reboot.
				wantErr(t, "Init after Reboot", m.Init(), errFault)
				m.ClearFaults()
			} else if err := m.Shutdown(); err != nil {
				t.Fatal(err)
			}
			initMachine(t, m) // after a reboot the agent opens NVML again
			if diff := cmp.Diff(tt.want, gpuSummary(t, m)); diff != "" {
				t.Errorf("after Reboot (-want +got):\n%s", diff)
			}
			if ops := m.OpLog(); len(ops) != 0 {
				t.Errorf("Reboot logged ops %v, want none (it is no NVML call)", ops)
			}
		})
	}
}

// After a reboot the GPUs work as before: instances can be made again, and
// the same instance at the same place gets the same MIG device UUID.
func TestRebootThenRepartition(t *testing.T) {
	m := open(t, rebootSpec)
	d := device(t, m, 0)
	enableMIG(t, d)
	_, before := mustCreate(t, d, "3g.40gb", 4)
	if err := m.Reboot(); err != nil {
		t.Fatal(err)
	}
	if gis, err := d.GPUInstances(); err != nil || len(gis) != 0 {
		t.Fatalf("after Reboot: GPU instances %v, %v; want none", gis, err)
	}
	_, after := mustCreate(t, d, "3g.40gb", 4)
	if after.UUID != before.UUID {
		t.Errorf("re-created instance has UUID %s, want %s", after.UUID, before.UUID)
	}
}

func TestRebootStateFile(t *testing.T) {
	// build makes the same layout on m: MIG instances on GPUs 0 and 1, a
	// pending mode, a busy device, GPU 1 volatile.
	build := func(t *testing.T, m *sim.Machine) {
		t.Helper()
		d0, d1 := device(t, m, 0), device(t, m, 1)
		enableMIG(t, d0)
		_, ci := mustCreate(t, d0, "3g.40gb", 4)
		if err := m.SetBusy(ci.UUID, true); err != nil {
			t.Fatal(err)
		}
		enableMIG(t, d1)
		mustCreate(t, d1, "7g.80gb", 0)
		if err := m.SetMIGModeVolatile(1, true); err != nil {
			t.Fatal(err)
		}
		if err := m.SetRebootOnly(0, true); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "sim.json")
	agent := openState(t, rebootSpec, path)
	build(t, agent)
	// The same machine rebooted in memory is what the file must say.
	ref := open(t, rebootSpec)
	build(t, ref)
	if err := ref.Reboot(); err != nil {
		t.Fatal(err)
	}

	if err := sim.RebootStateFile(path); err != nil {
		t.Fatalf("RebootStateFile: %v", err)
	}
	if diff := cmp.Diff(ref.Snapshot(), readState(t, path)); diff != "" {
		t.Errorf("state file after RebootStateFile (-Machine.Reboot +file):\n%s", diff)
	}
	// The next agent starts from the rebooted GPUs.
	next := openState(t, rebootSpec, filepath.Clean(path))
	want := []string{"0: enabled/enabled, 0 instances, 0 processes, reboot-only", "1: disabled/disabled, 0 instances, 0 processes, volatile", "2: /, 0 instances, 0 processes"}
	if diff := cmp.Diff(want, gpuSummary(t, next)); diff != "" {
		t.Errorf("machine opened after RebootStateFile (-want +got):\n%s", diff)
	}
}

func TestRebootStateFileErrors(t *testing.T) {
	tests := []struct {
		name    string
		content string // "" for no file
		want    error
	}{
		{name: "no file", want: os.ErrNotExist},
		{name: "not JSON", content: "{", want: nil},
		{name: "another format version", content: `{"version": 2, "machine": "dgx-h100", "gpus": []}`, want: partition.ErrNotSupported},
		{name: "an impossible layout", content: `{"version": 1, "machine": "h100-80gb*1", "gpus": [{"index": 0, "migMode": "enabled", "instances": [
			{"giID": 1, "profile": "7g.80gb", "placement": {"start": 0}}, {"giID": 2, "profile": "1g.10gb", "placement": {"start": 0}}]}]}`, want: partition.ErrInsufficientResources},
		{name: "a volatile GPU without MIG", content: `{"version": 1, "machine": "l4-24gb", "gpus": [{"index": 0, "migModeVolatile": true}]}`, want: partition.ErrNotSupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sim.json")
			if tt.content != "" {
				if err := os.WriteFile(path, []byte(tt.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			err := sim.RebootStateFile(path)
			if err == nil {
				t.Fatal("RebootStateFile succeeded")
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("error %v, want one wrapping %q", err, tt.want)
			}
			if tt.content == "" {
				if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("RebootStateFile of a missing file made one: %v", err)
				}
				return
			}
			if got, err := os.ReadFile(path); err != nil || string(got) != tt.content {
				t.Errorf("file changed by a failed RebootStateFile: %q, %v", got, err)
			}
		})
	}
}

func TestSetMIGModeVolatile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sim.json")
	m := openState(t, rebootSpec, path)
	wantErr(t, "GPU out of range", m.SetMIGModeVolatile(3, true), partition.ErrInvalidArgument)
	wantErr(t, "GPU without MIG", m.SetMIGModeVolatile(2, true), partition.ErrNotSupported)
	steps := []struct {
		gpu      int
		volatile bool
		want     []bool
	}{
		{gpu: 1, volatile: true, want: []bool{false, true, false}},
		{gpu: 0, volatile: true, want: []bool{true, true, false}},
		{gpu: 1, volatile: false, want: []bool{true, false, false}},
	}
	for _, s := range steps {
		if err := m.SetMIGModeVolatile(s.gpu, s.volatile); err != nil {
			t.Fatal(err)
		}
		var got []bool
		for _, g := range readState(t, path).GPUs {
			got = append(got, g.MIGModeVolatile)
		}
		if diff := cmp.Diff(s.want, got); diff != "" {
			t.Errorf("GPU %d volatile %v: state file's marks (-want +got):\n%s", s.gpu, s.volatile, diff)
		}
	}
	// A GPU reset keeps the mode of a volatile GPU: only reboots lose it.
	d := device(t, m, 0)
	enableMIG(t, d)
	if cur, _ := modes(t, d); cur != partition.MIGEnabled {
		t.Errorf("volatile GPU 0 after SetMIGMode and Reset: MIG %v, want enabled", cur)
	}
}
