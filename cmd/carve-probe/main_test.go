//go:build cgo

package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/carve-dev/carve/partition"
)

// probeDevice is a read-only mock GPU: the mock panics on any call whose
// function is not set, so a probe that changed something (SetMigMode,
// CreateGpuInstance..., Destroy) would fail the test.
func probeDevice(index int, name string, migCur, migPend int, noMIG bool) *mock.Device {
	var pci nvml.PciInfo
	for i, c := range []byte("00000000:0" + string(rune('7'+index)) + ":00.0") {
		pci.BusId[i] = int8(c)
	}
	return &mock.Device{
		GetUUIDFunc:       func() (string, nvml.Return) { return "GPU-probe-" + string(rune('0'+index)), nvml.SUCCESS },
		GetNameFunc:       func() (string, nvml.Return) { return name, nvml.SUCCESS },
		GetPciInfoFunc:    func() (nvml.PciInfo, nvml.Return) { return pci, nvml.SUCCESS },
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: 81559 << 20}, nvml.SUCCESS },
		GetMigModeFunc: func() (int, int, nvml.Return) {
			if noMIG {
				return 0, 0, nvml.ERROR_NOT_SUPPORTED
			}
			return migCur, migPend, nvml.SUCCESS
		},
		GetComputeRunningProcessesFunc:  func() ([]nvml.ProcessInfo, nvml.Return) { return []nvml.ProcessInfo{{Pid: 7}}, nvml.SUCCESS },
		GetGraphicsRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS },
		GetMaxMigDeviceCountFunc:        func() (int, nvml.Return) { return 0, nvml.SUCCESS },
		GetGpuInstanceProfileInfoFunc: func(p int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
			// Only a whole-GPU profile, and only in MIG mode.
			if migCur != nvml.DEVICE_MIG_ENABLE || p != nvml.GPU_INSTANCE_PROFILE_7_SLICE {
				return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
			}
			return nvml.GpuInstanceProfileInfo{Id: 0, SliceCount: 7, InstanceCount: 1, MemorySizeMB: 8 * 9856}, nvml.SUCCESS
		},
		GetGpuInstancePossiblePlacementsFunc: func(*nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
			return []nvml.GpuInstancePlacement{{Start: 0, Size: 8}}, nvml.SUCCESS
		},
		GetGpuInstancesFunc: func(*nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstance, nvml.Return) { return nil, nvml.SUCCESS },
		GetTopologyCommonAncestorFunc: func(nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
			return nvml.TOPOLOGY_NODE, nvml.SUCCESS
		},
		GetNvLinkStateFunc: func(int) (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED },
		RegisterEventsFunc: func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS },
	}
}

func probeLib(devs ...*mock.Device) *mock.Interface {
	return &mock.Interface{
		InitFunc:           func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:       func() nvml.Return { return nvml.SUCCESS },
		DeviceGetCountFunc: func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(devs) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return devs[i], nvml.SUCCESS
		},
		EventSetCreateFunc: func() (nvml.EventSet, nvml.Return) {
			return &mock.EventSet{
				WaitFunc: func(uint32) (nvml.EventData, nvml.Return) { return nvml.EventData{}, nvml.ERROR_TIMEOUT },
				FreeFunc: func() nvml.Return { return nvml.SUCCESS },
			}, nvml.SUCCESS
		},
	}
}

func TestProbeWithoutNVML(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	var out, errOut bytes.Buffer
	if code := run(nil, partition.NewNVMLFrom(lib), &out, &errOut); code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	if !strings.Contains(errOut.String(), "NVML library not found") || out.Len() != 0 {
		t.Errorf("stdout %q, stderr %q; want only a clear message on stderr", out.String(), errOut.String())
	}
}

func TestProbeReport(t *testing.T) {
	const h100 = "NVIDIA H100 80GB HBM3"
	ml := probeLib(
		probeDevice(0, h100, nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE, false),
		probeDevice(1, h100, nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_ENABLE, false),
		probeDevice(2, "NVIDIA L4", 0, 0, true),
	)
	var out, errOut bytes.Buffer
	if code := run([]string{"-xid-wait", "5ms"}, partition.NewNVMLFrom(ml), &out, &errOut); code != 0 {
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
	if len(rep.Topology) != 3 || rep.Topology[0][1] != (linkReport{PCIe: int(nvml.TOPOLOGY_NODE)}) ||
		rep.Topology[1][1] != (linkReport{PCIe: int(nvml.TOPOLOGY_INTERNAL)}) {
		t.Errorf("topology = %+v", rep.Topology)
	}
	if !strings.HasPrefix(rep.XIDWatch, "registered; no XID") {
		t.Errorf("xidWatch = %q", rep.XIDWatch)
	}
	if n := len(ml.ShutdownCalls()); n != 1 {
		t.Errorf("NVML shut down %d times, want 1", n)
	}
}
