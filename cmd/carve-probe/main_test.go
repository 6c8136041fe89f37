//go:build cgo

package main

import (
	"bytes"
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/google/go-cmp/cmp"

	"github.com/carve-dev/carve/internal/buildinfo"
	"github.com/carve-dev/carve/partition/nvml"
)

// probeDevice is a read-only mock GPU: the mock panics on any call whose
// function is not set, so a probe that changed something (SetMigMode,
// CreateGpuInstance..., Destroy) would fail the test.
func probeDevice(index int, name string, migCur, migPend int, noMIG bool) *mock.Device {
	var pci gonvml.PciInfo
	for i, c := range []byte("00000000:0" + string(rune('7'+index)) + ":00.0") {
		pci.BusId[i] = int8(c)
	}
	return &mock.Device{
		GetUUIDFunc:       func() (string, gonvml.Return) { return "GPU-probe-" + string(rune('0'+index)), gonvml.SUCCESS },
		GetNameFunc:       func() (string, gonvml.Return) { return name, gonvml.SUCCESS },
		GetPciInfoFunc:    func() (gonvml.PciInfo, gonvml.Return) { return pci, gonvml.SUCCESS },
		GetMemoryInfoFunc: func() (gonvml.Memory, gonvml.Return) { return gonvml.Memory{Total: 81559 << 20}, gonvml.SUCCESS },
		GetMigModeFunc: func() (int, int, gonvml.Return) {
			if noMIG {
				return 0, 0, gonvml.ERROR_NOT_SUPPORTED
			}
			return migCur, migPend, gonvml.SUCCESS
		},
		GetComputeRunningProcessesFunc:  func() ([]gonvml.ProcessInfo, gonvml.Return) { return []gonvml.ProcessInfo{{Pid: 7}}, gonvml.SUCCESS },
		GetGraphicsRunningProcessesFunc: func() ([]gonvml.ProcessInfo, gonvml.Return) { return nil, gonvml.SUCCESS },
		GetMaxMigDeviceCountFunc:        func() (int, gonvml.Return) { return 0, gonvml.SUCCESS },
		GetGpuInstanceProfileInfoFunc: func(p int) (gonvml.GpuInstanceProfileInfo, gonvml.Return) {
			// Only a whole-GPU profile, and only in MIG mode.
			if migCur != gonvml.DEVICE_MIG_ENABLE || p != gonvml.GPU_INSTANCE_PROFILE_7_SLICE {
				return gonvml.GpuInstanceProfileInfo{}, gonvml.ERROR_NOT_SUPPORTED
			}
			return gonvml.GpuInstanceProfileInfo{Id: 0, SliceCount: 7, InstanceCount: 1, MemorySizeMB: 8 * 9856}, gonvml.SUCCESS
		},
		GetGpuInstancePossiblePlacementsFunc: func(*gonvml.GpuInstanceProfileInfo) ([]gonvml.GpuInstancePlacement, gonvml.Return) {
			return []gonvml.GpuInstancePlacement{{Start: 0, Size: 8}}, gonvml.SUCCESS
		},
		GetGpuInstancesFunc: func(*gonvml.GpuInstanceProfileInfo) ([]gonvml.GpuInstance, gonvml.Return) { return nil, gonvml.SUCCESS },
		GetTopologyCommonAncestorFunc: func(gonvml.Device) (gonvml.GpuTopologyLevel, gonvml.Return) {
			return gonvml.TOPOLOGY_NODE, gonvml.SUCCESS
		},
		GetNvLinkStateFunc: func(int) (gonvml.EnableState, gonvml.Return) { return 0, gonvml.ERROR_NOT_SUPPORTED },
		RegisterEventsFunc: func(uint64, gonvml.EventSet) gonvml.Return { return gonvml.SUCCESS },
	}
}

func probeLib(devs ...*mock.Device) *mock.Interface {
	return &mock.Interface{
		InitFunc:           func() gonvml.Return { return gonvml.SUCCESS },
		ShutdownFunc:       func() gonvml.Return { return gonvml.SUCCESS },
		DeviceGetCountFunc: func() (int, gonvml.Return) { return len(devs), gonvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (gonvml.Device, gonvml.Return) {
			if i < 0 || i >= len(devs) {
				return nil, gonvml.ERROR_INVALID_ARGUMENT
			}
			return devs[i], gonvml.SUCCESS
		},
		EventSetCreateFunc: func() (gonvml.EventSet, gonvml.Return) {
			return &mock.EventSet{
				WaitFunc: func(uint32) (gonvml.EventData, gonvml.Return) { return gonvml.EventData{}, gonvml.ERROR_TIMEOUT },
				FreeFunc: func() gonvml.Return { return gonvml.SUCCESS },
			}, gonvml.SUCCESS
		},
	}
}

func TestProbeWithoutNVML(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() gonvml.Return { return gonvml.ERROR_LIBRARY_NOT_FOUND }}
	var out, errOut bytes.Buffer
	if code := run(nil, nvml.NewFrom(lib), &out, &errOut); code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	if !strings.Contains(errOut.String(), "NVML library not found") || out.Len() != 0 {
		t.Errorf("stdout %q, stderr %q; want only a clear message on stderr", out.String(), errOut.String())
	}
}

// --version prints the build on one line and exits 0 without opening
// NVML.
func TestProbeVersion(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() gonvml.Return { t.Error("NVML opened"); return gonvml.ERROR_LIBRARY_NOT_FOUND }}
	var out, errOut bytes.Buffer
	if code := run([]string{"--version"}, nvml.NewFrom(lib), &out, &errOut); code != 0 {
		t.Errorf("exit code %d, want 0; stderr %q", code, errOut.String())
	}
	want := "carve-probe " + buildinfo.Get().String() + "\n"
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("stdout (-want +got):\n%s", diff)
	}
	if !strings.Contains(out.String(), runtime.Version()) || errOut.Len() != 0 {
		t.Errorf("stdout %q, stderr %q; want the Go version on stdout and nothing on stderr", out.String(), errOut.String())
	}
}

func TestProbeReport(t *testing.T) {
	const h100 = "NVIDIA H100 80GB HBM3"
	ml := probeLib(
		probeDevice(0, h100, gonvml.DEVICE_MIG_ENABLE, gonvml.DEVICE_MIG_ENABLE, false),
		probeDevice(1, h100, gonvml.DEVICE_MIG_DISABLE, gonvml.DEVICE_MIG_ENABLE, false),
		probeDevice(2, "NVIDIA L4", 0, 0, true),
	)
	var out, errOut bytes.Buffer
	if code := run([]string{"-xid-wait", "5ms"}, nvml.NewFrom(ml), &out, &errOut); code != 0 {
		t.Fatalf("exit code %d, stderr %q", code, errOut.String())
	}
	var rep report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("report is not JSON: %v\n%s", err, out.String())
	}
	if len(rep.GPUs) != 3 {
		t.Fatalf("%d GPUs in the report, want 3", len(rep.GPUs))
	}
	tests := []struct {
		gpu      int
		mode     string
		profiles []string // name/catalogue
		note     string
	}{
		{0, "enabled", []string{"7g.77gb/differs"}, ""},
		{1, "disabled (pending enabled)", nil, "need MIG mode enabled"},
		{2, "no MIG", nil, ""},
	}
	for _, tt := range tests {
		g := rep.GPUs[tt.gpu]
		var profiles []string
		for _, p := range g.Profiles {
			profiles = append(profiles, p.Name+"/"+strings.SplitN(p.Catalogue, ":", 2)[0])
		}
		if g.Mode != tt.mode || strings.Join(profiles, ",") != strings.Join(tt.profiles, ",") ||
			!strings.Contains(g.ProfilesNote, tt.note) || g.Processes == nil || *g.Processes != 1 || len(g.Errors) != 0 {
			t.Errorf("GPU %d: mode %q, profiles %v, note %q, processes %v, errors %v; want %q, %v, note with %q, 1 process",
				tt.gpu, g.Mode, profiles, g.ProfilesNote, g.Processes, g.Errors, tt.mode, tt.profiles, tt.note)
		}
	}
	if g := rep.GPUs[0]; g.Model != "H100-80GB" || g.PCIBusID != "00000000:07:00.0" || !g.MIGCapable {
		t.Errorf("GPU 0 identity = %+v", g.GPU)
	}
	if len(rep.Topology) != 3 || rep.Topology[0][1] != (linkReport{PCIe: int(gonvml.TOPOLOGY_NODE)}) ||
		rep.Topology[1][1] != (linkReport{PCIe: int(gonvml.TOPOLOGY_INTERNAL)}) {
		t.Errorf("topology = %+v", rep.Topology)
	}
	if !strings.HasPrefix(rep.XIDWatch, "registered; no XID") {
		t.Errorf("xidWatch = %q", rep.XIDWatch)
	}
	if n := len(ml.ShutdownCalls()); n != 1 {
		t.Errorf("NVML shut down %d times, want 1", n)
	}
}
