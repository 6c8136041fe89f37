//go:build cgo

package nvml

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/carve-dev/carve/partition"
)

// TestInUseNamesTheHolders: a destroy, a MIG mode change or a reset that
// NVML refuses as in use fails with an InUseError naming the devices the
// call concerns and the processes NVML lists on them, with their names;
// processes on other devices are not named.
func TestInUseNamesTheHolders(t *testing.T) {
	const gpuUUID = "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd"
	// GPU instance 1 (MIG-0-1-0) is held by 4300 and 4242, GPU instance 2
	// (MIG-0-2-0) by 77; the whole GPU by 4242 (compute) and 9 (graphics).
	setup := func(g *fakeGPU) {
		gi1 := g.seed(gonvml.GPU_INSTANCE_PROFILE_3_SLICE, 0, true)
		gi2 := g.seed(gonvml.GPU_INSTANCE_PROFILE_3_SLICE, 4, true)
		gi1.cis[0].procs = []uint32{4300, 4242}
		gi2.cis[0].procs = []uint32{77}
		g.procs, g.gfx = []uint32{4242}, []uint32{9}
		g.names = map[uint32]string{4242: "python3", 4300: "/opt/tritonserver/bin/tritonserver", 77: "trainer", 9: "Xorg"}
	}
	inUse := func(g *fakeGPU) {
		g.dev.SetMigModeFunc = func(int) (gonvml.Return, gonvml.Return) { return gonvml.SUCCESS, gonvml.ERROR_IN_USE }
	}
	resetInUse := func(context.Context, string, ...string) ([]byte, error) {
		return []byte("GPU 00000000:18:00.0: In use by another client"), exitError(nvidiaSMIExitInUse)
	}
	tests := []struct {
		name  string
		call  func(d partition.Device) error
		setup func(g *fakeGPU)
		want  partition.InUseError
		text  string
	}{
		{
			name: "destroy compute instance",
			call: func(d partition.Device) error { return d.DestroyComputeInstance(1, 0) },
			want: partition.InUseError{Devices: []string{"MIG-0-1-0"}, Processes: []partition.Process{
				{PID: 4242, Name: "python3", Device: "MIG-0-1-0"},
				{PID: 4300, Name: "/opt/tritonserver/bin/tritonserver", Device: "MIG-0-1-0"},
			}},
			text: "GPU 0: destroy compute instance 0 of GPU instance 1: in use: ERROR_IN_USE; held by pid 4242 (python3), pid 4300 (/opt/tritonserver/bin/tritonserver)",
		},
		{
			name: "destroy GPU instance",
			call: func(d partition.Device) error { return d.DestroyGPUInstance(2) },
			want: partition.InUseError{Devices: []string{"MIG-0-2-0"}, Processes: []partition.Process{{PID: 77, Name: "trainer", Device: "MIG-0-2-0"}}},
			text: "GPU 0: destroy GPU instance 2: in use: ERROR_IN_USE; held by pid 77 (trainer)",
		},
		{
			name:  "MIG mode change",
			call:  func(d partition.Device) error { return d.SetMIGMode(partition.MIGDisabled) },
			setup: inUse,
			want: partition.InUseError{Devices: []string{gpuUUID, "MIG-0-1-0", "MIG-0-2-0"}, Processes: []partition.Process{
				{PID: 9, Name: "Xorg", Device: gpuUUID},
				{PID: 77, Name: "trainer", Device: "MIG-0-2-0"},
				{PID: 4242, Name: "python3", Device: gpuUUID},
				{PID: 4300, Name: "/opt/tritonserver/bin/tritonserver", Device: "MIG-0-1-0"},
			}},
			text: "GPU 0: set MIG mode disabled: in use: ERROR_IN_USE; held by pid 9 (Xorg), pid 77 (trainer), pid 4242 (python3), pid 4300 (/opt/tritonserver/bin/tritonserver)",
		},
		{
			name: "reset",
			call: func(d partition.Device) error { return d.Reset() },
			want: partition.InUseError{Devices: []string{gpuUUID, "MIG-0-1-0", "MIG-0-2-0"}, Processes: []partition.Process{
				{PID: 9, Name: "Xorg", Device: gpuUUID},
				{PID: 77, Name: "trainer", Device: "MIG-0-2-0"},
				{PID: 4242, Name: "python3", Device: gpuUUID},
				{PID: 4300, Name: "/opt/tritonserver/bin/tritonserver", Device: "MIG-0-1-0"},
			}},
			text: "GPU 0: reset (nvidia-smi --gpu-reset -i 00000000:18:00.0): in use: GPU 00000000:18:00.0: In use by another client; held by pid 9 (Xorg), pid 77 (trainer), pid 4242 (python3), pid 4300 (/opt/tritonserver/bin/tritonserver)",
		},
		{
			name: "a name NVML cannot tell",
			call: func(d partition.Device) error { return d.DestroyGPUInstance(2) },
			setup: func(g *fakeGPU) {
				delete(g.names, 77)
			},
			want: partition.InUseError{Devices: []string{"MIG-0-2-0"}, Processes: []partition.Process{{PID: 77, Device: "MIG-0-2-0"}}},
			text: "GPU 0: destroy GPU instance 2: in use: ERROR_IN_USE; held by pid 77",
		},
		{
			name: "processes that cannot be listed",
			call: func(d partition.Device) error { return d.Reset() },
			setup: func(g *fakeGPU) {
				g.dev.GetComputeRunningProcessesFunc = func() ([]gonvml.ProcessInfo, gonvml.Return) { return nil, gonvml.ERROR_NO_PERMISSION }
			},
			want: partition.InUseError{Devices: []string{gpuUUID}, Unlisted: "GPU 0: processes: compute: NVML error: ERROR_NO_PERMISSION"},
			text: "GPU 0: reset (nvidia-smi --gpu-reset -i 00000000:18:00.0): in use: GPU 00000000:18:00.0: In use by another client; the processes holding it are unknown: GPU 0: processes: compute: NVML error: ERROR_NO_PERMISSION",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newFakeGPU(0)
			setup(g)
			if tt.setup != nil {
				tt.setup(g)
			}
			d := deviceAt(t, openFake(t, []Option{WithCommandRunner(resetInUse)}, g), 0)
			err := tt.call(d)
			checkSentinel(t, err, partition.ErrInUse)
			got := partition.InUseOf(err)
			if got == nil {
				t.Fatalf("error %q (%T) is no InUseError", err, err)
			}
			if diff := cmp.Diff(tt.want, *got, cmpopts.IgnoreFields(partition.InUseError{}, "Err")); diff != "" {
				t.Errorf("InUseError (-want +got):\n%s", diff)
			}
			if got := err.Error(); got != tt.text {
				t.Errorf("error text\n got %q\nwant %q", got, tt.text)
			}
		})
	}
}

// TestInUseKeepsNVMLReturn: the InUseError still unwraps to go-nvml's
// Return, as every other NVML error does.
func TestInUseKeepsNVMLReturn(t *testing.T) {
	g := newFakeGPU(0)
	g.seed(gonvml.GPU_INSTANCE_PROFILE_1_SLICE, 0, true).cis[0].procs = []uint32{5}
	err := deviceAt(t, openFake(t, nil, g), 0).DestroyComputeInstance(1, 0)
	var ret gonvml.Return
	if !errors.As(err, &ret) || ret != gonvml.ERROR_IN_USE {
		t.Fatalf("errors.As(%q, Return) = %v, want ERROR_IN_USE", err, ret)
	}
}

// TestInUseIsBounded: a device held by many processes names the first few
// by PID and counts the rest, asking NVML for the names of those it names
// only.
func TestInUseIsBounded(t *testing.T) {
	g := newFakeGPU(0)
	gi := g.seed(gonvml.GPU_INSTANCE_PROFILE_7_SLICE, 0, true)
	g.names = map[uint32]string{}
	for pid := uint32(100); pid > 80; pid-- {
		gi.cis[0].procs = append(gi.cis[0].procs, pid)
		g.names[pid] = fmt.Sprintf("worker-%d", pid)
	}
	lib := fakeLib(g)
	nv := NewFrom(lib, WithProfileInfoV2(fakeProfileInfoV2(g)))
	if err := nv.Init(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nv.Shutdown() })
	err := deviceAt(t, nv, 0).DestroyComputeInstance(1, 0)
	want := "held by pid 81 (worker-81), pid 82 (worker-82), pid 83 (worker-83), pid 84 (worker-84), pid 85 (worker-85) and 15 more"
	if !strings.HasSuffix(err.Error(), "; "+want) {
		t.Errorf("error %q, want it to end with %q", err, want)
	}
	if n := len(lib.SystemGetProcessNameCalls()); n != partition.MaxInUseProcesses {
		t.Errorf("asked NVML for %d process names, want %d", n, partition.MaxInUseProcesses)
	}
}

// TestNotInUseStaysAsItIs: other refusals are not InUseErrors and list
// no processes.
func TestNotInUseStaysAsItIs(t *testing.T) {
	g := newFakeGPU(0)
	g.procs = []uint32{1}
	g.dev.SetMigModeFunc = func(int) (gonvml.Return, gonvml.Return) { return gonvml.SUCCESS, gonvml.ERROR_NOT_SUPPORTED }
	lib := fakeLib(g)
	nv := NewFrom(lib)
	if err := nv.Init(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nv.Shutdown() })
	err := deviceAt(t, nv, 0).SetMIGMode(partition.MIGDisabled)
	checkSentinel(t, err, partition.ErrNotSupported)
	if e := partition.InUseOf(err); e != nil {
		t.Errorf("InUseOf(%q) = %+v, want nil", err, e)
	}
	if n := len(g.dev.GetComputeRunningProcessesCalls()); n != 0 {
		t.Errorf("listed processes %d times for a refusal that is no in-use", n)
	}
}
