//go:build cgo

package nvml

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/carve-dev/carve/partition"
)

func TestDeviceProperties(t *testing.T) {
	g := newFakeGPU(3)
	d := deviceAt(t, openFake(t, nil, newFakeGPU(0), newFakeGPU(1), newFakeGPU(2), g), 3)
	if d.Index() != 3 {
		t.Errorf("Index() = %d, want 3", d.Index())
	}
	for name, tc := range map[string]struct {
		get  func() (any, error)
		want any
	}{
		"UUID":        {func() (any, error) { return d.UUID() }, g.uuid},
		"Name":        {func() (any, error) { return d.Name() }, "NVIDIA H100 80GB HBM3"},
		"PCIBusID":    {func() (any, error) { return d.PCIBusID() }, "00000000:1B:00.0"},
		"MemoryMiB":   {func() (any, error) { return d.MemoryMiB() }, uint64(81559)},
		"PCIDeviceID": {func() (any, error) { return d.PCIDeviceID() }, uint32(0x233010DE)},
	} {
		got, err := tc.get()
		if err != nil || got != tc.want {
			t.Errorf("%s() = %v, %v; want %v", name, got, err, tc.want)
		}
	}
	if _, err := openFake(t, nil, g).Device(4); !errors.Is(err, partition.ErrInvalidArgument) {
		t.Errorf("Device(4) of 4 = %v, want ErrInvalidArgument", err)
	}
}

func TestPCIBusIDFallbacks(t *testing.T) {
	full, legacy := pciInfo("00000000:07:00.0"), gonvml.PciInfo{}
	setCString(legacy.BusIdLegacy[:], "0000:08:00.0")
	tests := []struct {
		name string
		pci  gonvml.PciInfo
		want string
	}{
		{"bus ID", full, "00000000:07:00.0"},
		{"legacy bus ID", legacy, "0000:08:00.0"},
		{"numbers only", gonvml.PciInfo{Domain: 1, Bus: 0xab, Device: 3}, "00000001:ab:03.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newFakeGPU(0)
			g.dev.GetPciInfoFunc = func() (gonvml.PciInfo, gonvml.Return) { return tt.pci, gonvml.SUCCESS }
			if got, err := deviceAt(t, openFake(t, nil, g), 0).PCIBusID(); err != nil || got != tt.want {
				t.Errorf("PCIBusID() = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// TestModelIdentification identifies GPUs through the interface, as the
// agent does (ReadGPU, ResolveModel): by PCI device ID where product names
// differ, by product name where the driver reports no device ID, and a GPU
// the catalogue lacks by its name and memory, with its geometry from NVML.
func TestModelIdentification(t *testing.T) {
	tests := []struct {
		name    string
		product string
		memMiB  uint64
		pciID   uint32
		migOn   bool
		want    string // the GPU's model key
		known   bool   // whether the catalogue has it
	}{
		{"H100 by its ID", "NVIDIA H100 80GB HBM3", 81559, 0x233010DE, false, "H100-80GB", true},
		{"H800 is the H100 80GB", "NVIDIA H800", 81559, 0x232410DE, false, "H100-80GB", true},
		{"GH200 is the H100 96GB", "NVIDIA GH200 480GB", 97871, 0x234210DE, false, "H100-96GB", true},
		{"H20 is the H100 96GB", "NVIDIA H20", 97871, 0x232910DE, true, "H100-96GB", true},
		{"ID wins over an odd name", "Graphics Device", 97887, 0x2BB510DE, false, "RTX-PRO-6000-96GB", true},
		{"workstation RTX PRO 6000 by name", "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 97887, 0, false, "RTX-PRO-6000-96GB", true},
		{"GH200 by name", "NVIDIA GH200 480GB", 97871, 0, false, "H100-96GB", true},
		{"B200", "NVIDIA B200", 183359, 0x290110DE, false, "B200-180GB", true},
		{"GB200", "NVIDIA GB200", 189471, 0x294110DE, false, "GB200-186GB", true},
		{"unlisted ID, known name", "NVIDIA H200 NVL", 143771, 0x233F10DE, false, "H200-141GB", true},
		{"unlisted model keeps working", "NVIDIA Z900", 200000, 0x999910DE, true, "Z900-196GB", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newFakeGPU(0)
			g.name, g.memBytes, g.pciID = tt.product, tt.memMiB<<20, tt.pciID
			if !tt.migOn {
				g.migCur, g.migPend = gonvml.DEVICE_MIG_DISABLE, gonvml.DEVICE_MIG_DISABLE
			}
			d := deviceAt(t, openFake(t, nil, g), 0)
			gpu, err := partition.ReadGPU(d)
			if err != nil {
				t.Fatalf("ReadGPU: %v", err)
			}
			if gpu.Model != tt.want {
				t.Errorf("model %q, want %q", gpu.Model, tt.want)
			}
			m, err := partition.ResolveModel(d, gpu)
			if tt.migOn {
				// The geometry comes from NVML (the fake's H100 profiles),
				// the key from the identification.
				if err != nil || m.Key != tt.want || len(m.Profiles) != 7 || m.MemorySlices != 8 {
					t.Errorf("ResolveModel = %s with %d profiles on %d slices, %v; want %s from NVML", m.Key, len(m.Profiles), m.MemorySlices, err, tt.want)
				}
				return
			}
			if tt.known {
				cat, _ := partition.LookupModel(tt.want)
				if err != nil || !reflect.DeepEqual(m, cat) {
					t.Errorf("ResolveModel = %s, %v; want the catalogue's %s", m.Key, err, tt.want)
				}
			} else if !errors.Is(err, partition.ErrUnknownModel) {
				t.Errorf("ResolveModel error %v, want ErrUnknownModel", err)
			}
		})
	}
}

func TestPCIDeviceIDMissing(t *testing.T) {
	g := newFakeGPU(0)
	g.pciID = 0
	d := deviceAt(t, openFake(t, nil, g), 0)
	if _, err := d.PCIDeviceID(); !errors.Is(err, partition.ErrNotSupported) {
		t.Errorf("PCIDeviceID() error %v, want ErrNotSupported", err)
	}
	// The model is still known by its name.
	if gpu, err := partition.ReadGPU(d); err != nil || gpu.Model != "H100-80GB" {
		t.Errorf("ReadGPU = %q, %v; want H100-80GB", gpu.Model, err)
	}
	g.dev.GetPciInfoFunc = func() (gonvml.PciInfo, gonvml.Return) { return gonvml.PciInfo{}, gonvml.ERROR_GPU_IS_LOST }
	if _, err := d.PCIDeviceID(); err == nil || errors.Is(err, partition.ErrNotSupported) {
		t.Errorf("PCIDeviceID() with the GPU lost = %v, want a failure", err)
	}
}

func TestMIGMode(t *testing.T) {
	tests := []struct {
		name              string
		cur, pend         int
		noMIG             bool
		wantCur, wantPend partition.MIGMode
		wantErr           error
	}{
		{name: "enabled", cur: 1, pend: 1, wantCur: partition.MIGEnabled, wantPend: partition.MIGEnabled},
		{name: "disabled", cur: 0, pend: 0, wantCur: partition.MIGDisabled, wantPend: partition.MIGDisabled},
		{name: "enable pending", cur: 0, pend: 1, wantCur: partition.MIGDisabled, wantPend: partition.MIGEnabled},
		{name: "disable pending", cur: 1, pend: 0, wantCur: partition.MIGEnabled, wantPend: partition.MIGDisabled},
		{name: "no MIG", noMIG: true, wantErr: partition.ErrNotSupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newFakeGPU(0)
			g.migCur, g.migPend, g.noMIG = tt.cur, tt.pend, tt.noMIG
			cur, pend, err := deviceAt(t, openFake(t, nil, g), 0).MIGMode()
			if tt.wantErr != nil {
				checkSentinel(t, err, tt.wantErr)
				return
			}
			if err != nil || cur != tt.wantCur || pend != tt.wantPend {
				t.Errorf("MIGMode() = %v, %v, %v; want %v, %v", cur, pend, err, tt.wantCur, tt.wantPend)
			}
		})
	}
}

func TestSetMIGMode(t *testing.T) {
	tests := []struct {
		name     string
		mode     partition.MIGMode
		ret      gonvml.Return
		wantMode int // what go-nvml is asked for; -1: not called
		wantErr  error
	}{
		{"enable, reset needed", partition.MIGEnabled, gonvml.SUCCESS, gonvml.DEVICE_MIG_ENABLE, nil},
		{"disable", partition.MIGDisabled, gonvml.SUCCESS, gonvml.DEVICE_MIG_DISABLE, nil},
		{"in use", partition.MIGEnabled, gonvml.ERROR_IN_USE, gonvml.DEVICE_MIG_ENABLE, partition.ErrInUse},
		{"not supported", partition.MIGEnabled, gonvml.ERROR_NOT_SUPPORTED, gonvml.DEVICE_MIG_ENABLE, partition.ErrNotSupported},
		{"bad mode", partition.MIGMode(7), gonvml.SUCCESS, -1, partition.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newFakeGPU(0)
			g.dev.SetMigModeFunc = func(int) (gonvml.Return, gonvml.Return) {
				// The activation status says a reset is needed; that is no error.
				return gonvml.ERROR_RESET_REQUIRED, tt.ret
			}
			err := deviceAt(t, openFake(t, nil, g), 0).SetMIGMode(tt.mode)
			if tt.wantErr == nil && err != nil {
				t.Fatalf("SetMIGMode: %v", err)
			}
			if tt.wantErr != nil {
				checkSentinel(t, err, tt.wantErr)
			}
			calls := g.dev.SetMigModeCalls()
			switch {
			case tt.wantMode < 0 && len(calls) != 0:
				t.Errorf("go-nvml SetMigMode called for a bad mode")
			case tt.wantMode >= 0 && (len(calls) != 1 || calls[0].N != tt.wantMode):
				t.Errorf("go-nvml SetMigMode calls = %+v, want one with mode %d", calls, tt.wantMode)
			}
		})
	}
}

func TestProcesses(t *testing.T) {
	tests := []struct {
		name    string
		mig     bool
		setup   func(g *fakeGPU)
		want    int
		wantErr bool
	}{
		{name: "whole GPU", want: 2},
		{name: "MIG devices too, each process once", mig: true, want: 3},
		{name: "no MIG support", setup: func(g *fakeGPU) { g.noMIG = true }, want: 2},
		{name: "graphics not supported", setup: func(g *fakeGPU) {
			g.dev.GetGraphicsRunningProcessesFunc = func() ([]gonvml.ProcessInfo, gonvml.Return) { return nil, gonvml.ERROR_NOT_SUPPORTED }
		}, want: 2},
		{name: "compute fails", setup: func(g *fakeGPU) {
			g.dev.GetComputeRunningProcessesFunc = func() ([]gonvml.ProcessInfo, gonvml.Return) { return nil, gonvml.ERROR_GPU_IS_LOST }
		}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newFakeGPU(0)
			g.procs = []uint32{10, 11}
			gi := g.seed(gonvml.GPU_INSTANCE_PROFILE_1_SLICE, 0, true)
			gi.cis[0].procs = []uint32{11, 12}
			if !tt.mig {
				g.migCur = gonvml.DEVICE_MIG_DISABLE
			}
			if tt.setup != nil {
				tt.setup(g)
			}
			n, err := deviceAt(t, openFake(t, nil, g), 0).Processes()
			if tt.wantErr {
				if err == nil {
					t.Fatalf("Processes() = %d, want an error", n)
				}
				return
			}
			if err != nil || n != tt.want {
				t.Errorf("Processes() = %d, %v; want %d", n, err, tt.want)
			}
		})
	}
}

// exitError is a CommandRunner error with an exit code, like *exec.ExitError.
type exitError int

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }
func (e exitError) ExitCode() int { return int(e) }

func TestReset(t *testing.T) {
	tests := []struct {
		name    string
		out     string
		err     error
		block   bool // run until the context ends
		wantErr error
		generic bool // an error that wraps no sentinel
	}{
		{name: "success", out: "GPU 00000000:18:00.0 was successfully reset.\nAll done.\n"},
		{name: "in use", out: "The following GPUs could not be reset:\n  GPU 00000000:18:00.0: In use by another client\n\n1 device is currently being used by one or more other processes", err: exitError(255), wantErr: partition.ErrInUse},
		{name: "not supported", out: "GPU Reset couldn't run because GPU 00000000:18:00.0 is not supported.", err: exitError(3), wantErr: partition.ErrNotSupported},
		{name: "not supported by code", err: exitError(3), wantErr: partition.ErrNotSupported},
		// No sentinel: a reboot does not help (TestResetWithoutNvidiaSMIOnPath).
		{name: "nvidia-smi missing", err: &exec.Error{Name: "nvidia-smi", Err: exec.ErrNotFound}, generic: true},
		{name: "hangs", block: true, wantErr: partition.ErrTimeout},
		{name: "other failure", out: "Unable to reset GPU: Unknown Error", err: exitError(255), generic: true},
		{name: "no permission", out: "Insufficient Permissions", err: exitError(4), generic: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newFakeGPU(0)
			var got [][]string
			run := func(ctx context.Context, name string, args ...string) ([]byte, error) {
				got = append(got, append([]string{name}, args...))
				if tt.block {
					<-ctx.Done()
					return nil, exitError(-1)
				}
				return []byte(tt.out), tt.err
			}
			lib := openFake(t, []Option{WithCommandRunner(run), WithResetTimeout(20 * time.Millisecond)}, g)
			err := deviceAt(t, lib, 0).Reset()
			if want := [][]string{{"nvidia-smi", "--gpu-reset", "-i", g.busID}}; !reflect.DeepEqual(got, want) {
				t.Errorf("ran %q, want %q", got, want)
			}
			switch {
			case tt.wantErr != nil:
				checkSentinel(t, err, tt.wantErr)
			case tt.generic:
				checkSentinel(t, err, nil)
				if f := strings.Fields(tt.out); len(f) > 0 && !strings.Contains(err.Error(), f[0]) {
					t.Errorf("error %q does not quote nvidia-smi", err)
				}
			case err != nil:
				t.Errorf("Reset: %v", err)
			}
		})
	}
}
