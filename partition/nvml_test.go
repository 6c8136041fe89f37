//go:build cgo

package partition

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// openNVMLFake returns an initialized NVML over fake GPUs, with V2 profile
// names, shut down when the test ends.
func openNVMLFake(t *testing.T, opts []NVMLOption, gpus ...*nvmlFakeGPU) NVML {
	t.Helper()
	lib := NewNVMLFrom(nvmlFakeLib(gpus...), append([]NVMLOption{WithProfileInfoV2(nvmlFakeProfileInfoV2(gpus...))}, opts...)...)
	if err := lib.Init(); err != nil {
		t.Fatalf("Init: %v", err)
	}
	t.Cleanup(func() { _ = lib.Shutdown() })
	return lib
}

func nvmlDeviceAt(t *testing.T, lib NVML, i int) Device {
	t.Helper()
	d, err := lib.Device(i)
	if err != nil {
		t.Fatalf("Device(%d): %v", i, err)
	}
	return d
}

// nvmlSentinels are the errors NVML implementations wrap.
func nvmlSentinels() []error {
	return []error{ErrLibraryNotFound, ErrNotSupported, ErrInUse, ErrInsufficientResources,
		ErrInvalidArgument, ErrNotFound, ErrTimeout, ErrUninitialized}
}

// checkNVMLSentinel fails unless err wraps want and no other sentinel (want nil:
// none).
func checkNVMLSentinel(t *testing.T, err, want error) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", want)
	}
	for _, s := range nvmlSentinels() {
		if got := errors.Is(err, s); got != (s == want) {
			t.Errorf("errors.Is(%q, %q) = %v, want %v", err, s, got, s == want)
		}
	}
}

func TestNVMLReturnCodeMapping(t *testing.T) {
	tests := []struct {
		ret  nvml.Return
		want error
	}{
		{nvml.ERROR_LIBRARY_NOT_FOUND, ErrLibraryNotFound},
		{nvml.ERROR_NOT_SUPPORTED, ErrNotSupported},
		{nvml.ERROR_IN_USE, ErrInUse},
		{nvml.ERROR_INSUFFICIENT_RESOURCES, ErrInsufficientResources},
		{nvml.ERROR_INVALID_ARGUMENT, ErrInvalidArgument},
		{nvml.ERROR_NOT_FOUND, ErrNotFound},
		{nvml.ERROR_TIMEOUT, ErrTimeout},
		{nvml.ERROR_UNINITIALIZED, ErrUninitialized},
		{nvml.ERROR_GPU_IS_LOST, nil},
		{nvml.ERROR_NO_PERMISSION, nil},
		{nvml.ERROR_UNKNOWN, nil},
	}
	for _, tt := range tests {
		t.Run(tt.ret.Error(), func(t *testing.T) {
			g := newNVMLFakeGPU(0)
			g.dev.GetUUIDFunc = func() (string, nvml.Return) { return "", tt.ret }
			_, err := nvmlDeviceAt(t, openNVMLFake(t, nil, g), 0).UUID()
			checkNVMLSentinel(t, err, tt.want)
			var ret nvml.Return
			if !errors.As(err, &ret) || ret != tt.ret {
				t.Errorf("errors.As(nvml.Return) = %v, want %v", ret, tt.ret)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "GPU 0: UUID: ") || !strings.HasSuffix(msg, tt.ret.Error()) {
				t.Errorf("error %q lacks its context or NVML's own words %q", msg, tt.ret.Error())
			}
		})
	}
}

func TestNVMLInitIsCountedAndGuardsEveryCall(t *testing.T) {
	g := newNVMLFakeGPU(0)
	ml := nvmlFakeLib(g)
	lib := NewNVMLFrom(ml)

	// Before Init nothing reaches go-nvml.
	calls := map[string]func() error{
		"DeviceCount": func() error { _, err := lib.DeviceCount(); return err },
		"Device":      func() error { _, err := lib.Device(0); return err },
		"Topology":    func() error { _, err := lib.Topology(0, 0); return err },
		"WatchXIDs":   func() error { _, err := lib.WatchXIDs([]int{0}); return err },
		"Shutdown":    lib.Shutdown,
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, ErrUninitialized) {
			t.Errorf("%s before Init = %v, want ErrUninitialized", name, err)
		}
	}
	if n := len(ml.DeviceGetCountCalls()) + len(ml.DeviceGetHandleByIndexCalls()) + len(ml.ShutdownCalls()); n != 0 {
		t.Fatalf("%d go-nvml calls before Init", n)
	}

	// Two Inits need two Shutdowns.
	for range 2 {
		if err := lib.Init(); err != nil {
			t.Fatalf("Init: %v", err)
		}
	}
	d := nvmlDeviceAt(t, lib, 0)
	if err := lib.Shutdown(); err != nil {
		t.Fatalf("first Shutdown: %v", err)
	}
	if _, err := d.UUID(); err != nil {
		t.Fatalf("UUID with one Init left: %v", err)
	}
	if err := lib.Shutdown(); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	if err := lib.Shutdown(); !errors.Is(err, ErrUninitialized) {
		t.Fatalf("third Shutdown = %v, want ErrUninitialized", err)
	}
	if got := len(ml.InitCalls()); got != 2 {
		t.Errorf("go-nvml Init called %d times, want 2", got)
	}
	if got := len(ml.ShutdownCalls()); got != 2 {
		t.Errorf("go-nvml Shutdown called %d times, want 2", got)
	}

	// A handle from a closed session fails, also after a new Init.
	uuidCalls := len(g.dev.GetUUIDCalls())
	if _, err := d.UUID(); !errors.Is(err, ErrUninitialized) {
		t.Errorf("UUID after Shutdown = %v, want ErrUninitialized", err)
	}
	if err := lib.Init(); err != nil {
		t.Fatalf("Init again: %v", err)
	}
	defer lib.Shutdown()
	if _, err := d.UUID(); !errors.Is(err, ErrUninitialized) {
		t.Errorf("UUID on a stale handle = %v, want ErrUninitialized", err)
	}
	if got := len(g.dev.GetUUIDCalls()); got != uuidCalls {
		t.Errorf("stale handle reached go-nvml (%d calls)", got-uuidCalls)
	}
	if _, err := nvmlDeviceAt(t, lib, 0).UUID(); err != nil {
		t.Errorf("UUID on a fresh handle: %v", err)
	}
}

func TestNVMLInitFailure(t *testing.T) {
	ml := nvmlFakeLib()
	ml.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }
	lib := NewNVMLFrom(ml)
	err := lib.Init()
	checkNVMLSentinel(t, err, ErrLibraryNotFound)
	if _, err := lib.DeviceCount(); !errors.Is(err, ErrUninitialized) {
		t.Errorf("DeviceCount after a failed Init = %v, want ErrUninitialized", err)
	}
	if err := lib.Shutdown(); !errors.Is(err, ErrUninitialized) {
		t.Errorf("Shutdown after a failed Init = %v, want ErrUninitialized", err)
	}
}

func TestNVMLDeviceProperties(t *testing.T) {
	g := newNVMLFakeGPU(3)
	d := nvmlDeviceAt(t, openNVMLFake(t, nil, newNVMLFakeGPU(0), newNVMLFakeGPU(1), newNVMLFakeGPU(2), g), 3)
	if d.Index() != 3 {
		t.Errorf("Index() = %d, want 3", d.Index())
	}
	for name, tc := range map[string]struct {
		get  func() (any, error)
		want any
	}{
		"UUID":      {func() (any, error) { return d.UUID() }, g.uuid},
		"Name":      {func() (any, error) { return d.Name() }, "NVIDIA H100 80GB HBM3"},
		"PCIBusID":  {func() (any, error) { return d.PCIBusID() }, "00000000:1B:00.0"},
		"MemoryMiB": {func() (any, error) { return d.MemoryMiB() }, uint64(81559)},
	} {
		got, err := tc.get()
		if err != nil || got != tc.want {
			t.Errorf("%s() = %v, %v; want %v", name, got, err, tc.want)
		}
	}
	if _, err := openNVMLFake(t, nil, g).Device(4); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Device(4) of 4 = %v, want ErrInvalidArgument", err)
	}
}

func TestNVMLPCIBusIDFallbacks(t *testing.T) {
	full, legacy := nvmlPciInfo("00000000:07:00.0"), nvml.PciInfo{}
	nvmlSetCString(legacy.BusIdLegacy[:], "0000:08:00.0")
	tests := []struct {
		name string
		pci  nvml.PciInfo
		want string
	}{
		{"bus ID", full, "00000000:07:00.0"},
		{"legacy bus ID", legacy, "0000:08:00.0"},
		{"numbers only", nvml.PciInfo{Domain: 1, Bus: 0xab, Device: 3}, "00000001:ab:03.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newNVMLFakeGPU(0)
			g.dev.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return tt.pci, nvml.SUCCESS }
			if got, err := nvmlDeviceAt(t, openNVMLFake(t, nil, g), 0).PCIBusID(); err != nil || got != tt.want {
				t.Errorf("PCIBusID() = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestNVMLMIGMode(t *testing.T) {
	tests := []struct {
		name              string
		cur, pend         int
		noMIG             bool
		wantCur, wantPend MIGMode
		wantErr           error
	}{
		{name: "enabled", cur: 1, pend: 1, wantCur: MIGEnabled, wantPend: MIGEnabled},
		{name: "disabled", cur: 0, pend: 0, wantCur: MIGDisabled, wantPend: MIGDisabled},
		{name: "enable pending", cur: 0, pend: 1, wantCur: MIGDisabled, wantPend: MIGEnabled},
		{name: "disable pending", cur: 1, pend: 0, wantCur: MIGEnabled, wantPend: MIGDisabled},
		{name: "no MIG", noMIG: true, wantErr: ErrNotSupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newNVMLFakeGPU(0)
			g.migCur, g.migPend, g.noMIG = tt.cur, tt.pend, tt.noMIG
			cur, pend, err := nvmlDeviceAt(t, openNVMLFake(t, nil, g), 0).MIGMode()
			if tt.wantErr != nil {
				checkNVMLSentinel(t, err, tt.wantErr)
				return
			}
			if err != nil || cur != tt.wantCur || pend != tt.wantPend {
				t.Errorf("MIGMode() = %v, %v, %v; want %v, %v", cur, pend, err, tt.wantCur, tt.wantPend)
			}
		})
	}
}

func TestNVMLSetMIGMode(t *testing.T) {
	tests := []struct {
		name     string
		mode     MIGMode
		ret      nvml.Return
		wantMode int // what go-nvml is asked for; -1: not called
		wantErr  error
	}{
		{"enable, reset needed", MIGEnabled, nvml.SUCCESS, nvml.DEVICE_MIG_ENABLE, nil},
		{"disable", MIGDisabled, nvml.SUCCESS, nvml.DEVICE_MIG_DISABLE, nil},
		{"in use", MIGEnabled, nvml.ERROR_IN_USE, nvml.DEVICE_MIG_ENABLE, ErrInUse},
		{"not supported", MIGEnabled, nvml.ERROR_NOT_SUPPORTED, nvml.DEVICE_MIG_ENABLE, ErrNotSupported},
		{"bad mode", MIGMode(7), nvml.SUCCESS, -1, ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newNVMLFakeGPU(0)
			g.dev.SetMigModeFunc = func(int) (nvml.Return, nvml.Return) {
				// The activation status says a reset is needed; that is no error.
				return nvml.ERROR_RESET_REQUIRED, tt.ret
			}
			err := nvmlDeviceAt(t, openNVMLFake(t, nil, g), 0).SetMIGMode(tt.mode)
			if tt.wantErr == nil && err != nil {
				t.Fatalf("SetMIGMode: %v", err)
			}
			if tt.wantErr != nil {
				checkNVMLSentinel(t, err, tt.wantErr)
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

// nvmlCatalogueWithMemory returns the catalogue's model with each profile's
// memory taken from got: the catalogue only approximates it.
func nvmlCatalogueWithMemory(t *testing.T, key string, got []GIProfile) Model {
	t.Helper()
	m, ok := LookupModel(key)
	if !ok {
		t.Fatalf("no %s in the catalogue", key)
	}
	for i, p := range m.Profiles {
		for _, g := range got {
			if g.ID == p.ID {
				m.Profiles[i].MemoryMiB = g.MemoryMiB
			}
		}
	}
	return m
}

func TestNVMLGPUInstanceProfiles(t *testing.T) {
	wantNames := []string{"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.10gb+me", "1g.20gb"} // GPU_INSTANCE_PROFILE_* order
	for _, v2 := range []bool{true, false} {
		t.Run(fmt.Sprintf("V2 %v", v2), func(t *testing.T) {
			g := newNVMLFakeGPU(0)
			v2Calls := 0
			read := nvmlFakeProfileInfoV2(g)
			opts := []NVMLOption{WithProfileInfoV2(nil)} // without V2, names are built from sizes
			if v2 {
				opts = []NVMLOption{WithProfileInfoV2(func(d nvml.Device, p int) (nvml.GpuInstanceProfileInfo_v2, nvml.Return) {
					v2Calls++
					return read(d, p)
				})}
			}
			ps, err := nvmlDeviceAt(t, openNVMLFake(t, opts, g), 0).GPUInstanceProfiles()
			if err != nil {
				t.Fatalf("GPUInstanceProfiles: %v", err)
			}
			if (v2Calls > 0) != v2 {
				t.Errorf("V2 profile info read %d times, want it used: %v", v2Calls, v2)
			}
			h100 := nvmlCatalogueWithMemory(t, "H100-80GB", ps)
			var names []string
			for _, p := range ps {
				names = append(names, p.Name)
				want, ok := h100.ProfileByID(p.ID)
				if !ok {
					t.Errorf("profile ID %d (%s) is no GPU_INSTANCE_PROFILE_* of the catalogue's H100", p.ID, p.Name)
				} else if !reflect.DeepEqual(p, want) {
					t.Errorf("profile %d:\n got %+v\nwant %+v", p.ID, p, want)
				}
			}
			if !slices.Equal(names, wantNames) {
				t.Errorf("names = %v, want %v", names, wantNames)
			}
			if len(ps) != len(h100.Profiles) {
				t.Errorf("%d profiles, want the catalogue's %d", len(ps), len(h100.Profiles))
			}
			if p, _ := h100.ProfileByID(nvml.GPU_INSTANCE_PROFILE_1_SLICE); p.MemoryMiB != 9984 {
				t.Errorf("1g.10gb memory = %d MiB, want NVML's 9984", p.MemoryMiB)
			}
		})
	}
}

func TestNVMLModelFromDeviceMatchesCatalogue(t *testing.T) {
	got, err := ModelFromDevice(nvmlDeviceAt(t, openNVMLFake(t, nil, newNVMLFakeGPU(0)), 0))
	if err != nil {
		t.Fatalf("ModelFromDevice: %v", err)
	}
	h100 := nvmlCatalogueWithMemory(t, "H100-80GB", got.Profiles)
	h100.Product = got.Product
	if !reflect.DeepEqual(got, h100) {
		t.Errorf("model from NVML:\n got %+v\nwant %+v", got, h100)
	}
}

func TestNVMLProfileNames(t *testing.T) {
	tests := []struct {
		name string
		p    nvmlGIProfile
		want string
	}{
		{"V2 name", nvmlGIProfile{id: nvml.GPU_INSTANCE_PROFILE_1_SLICE, name: "MIG 1g.10gb"}, "1g.10gb"},
		{"V2 name with +me", nvmlGIProfile{id: nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, name: "MIG 1g.10gb+me"}, "1g.10gb+me"},
		{"V2 name lacking +me", nvmlGIProfile{id: nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1, name: "MIG 2g.12gb"}, "2g.12gb+me"},
		{"built", nvmlGIProfile{id: nvml.GPU_INSTANCE_PROFILE_2_SLICE, info: nvml.GpuInstanceProfileInfo{SliceCount: 2, MemorySizeMB: 11904}}, "2g.12gb"},
		{"built +me", nvmlGIProfile{id: nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, info: nvml.GpuInstanceProfileInfo{SliceCount: 1, MemorySizeMB: 4864}}, "1g.5gb+me"},
		{"built -me", nvmlGIProfile{id: nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, info: nvml.GpuInstanceProfileInfo{SliceCount: 1, MemorySizeMB: 23552}}, "1g.23gb-me"},
		{"built +gfx", nvmlGIProfile{id: nvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX, info: nvml.GpuInstanceProfileInfo{SliceCount: 2, MemorySizeMB: 47104}}, "2g.46gb+gfx"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nvmlProfileName(tt.p); got != tt.want {
				t.Errorf("profileName = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestNVMLGPUInstanceProfilesErrors(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(g *nvmlFakeGPU)
		wantErr error
	}{
		{"MIG disabled", func(g *nvmlFakeGPU) { g.migCur = nvml.DEVICE_MIG_DISABLE }, ErrNotSupported},
		{"no MIG", func(g *nvmlFakeGPU) { g.noMIG = true }, ErrNotSupported},
		{"profile info fails", func(g *nvmlFakeGPU) {
			g.dev.GetGpuInstanceProfileInfoFunc = func(int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
				return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_GPU_IS_LOST
			}
		}, nil},
		{"placements fail", func(g *nvmlFakeGPU) {
			g.dev.GetGpuInstancePossiblePlacementsFunc = func(*nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
				return nil, nvml.ERROR_UNKNOWN
			}
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newNVMLFakeGPU(0)
			tt.setup(g)
			ps, err := nvmlDeviceAt(t, openNVMLFake(t, []NVMLOption{WithProfileInfoV2(nil)}, g), 0).GPUInstanceProfiles()
			if err == nil {
				t.Fatalf("GPUInstanceProfiles = %+v, want an error", ps)
			}
			checkNVMLSentinel(t, err, tt.wantErr)
		})
	}
}

func TestNVMLInstancesAndMIGDeviceUUIDs(t *testing.T) {
	g := newNVMLFakeGPU(0)
	gi3g := g.seed(nvml.GPU_INSTANCE_PROFILE_3_SLICE, 4, true)     // GI 1
	gi1g := g.seed(nvml.GPU_INSTANCE_PROFILE_1_SLICE, 0, true)     // GI 2
	me := g.seed(nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, 1, false) // GI 3, no CI yet
	d := nvmlDeviceAt(t, openNVMLFake(t, nil, g), 0)

	gis, err := d.GPUInstances()
	if err != nil {
		t.Fatalf("GPUInstances: %v", err)
	}
	want := []GPUInstance{
		{ID: int(gi1g.id), ProfileID: nvml.GPU_INSTANCE_PROFILE_1_SLICE, Placement: Placement{0, 1}},
		{ID: int(me.id), ProfileID: nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, Placement: Placement{1, 1}},
		{ID: int(gi3g.id), ProfileID: nvml.GPU_INSTANCE_PROFILE_3_SLICE, Placement: Placement{4, 4}},
	}
	if !reflect.DeepEqual(gis, want) {
		t.Errorf("GPUInstances:\n got %+v\nwant %+v", gis, want)
	}

	cis, err := d.ComputeInstances(int(gi3g.id))
	if err != nil {
		t.Fatalf("ComputeInstances: %v", err)
	}
	wantCIs := []ComputeInstance{{ID: 0, GIID: int(gi3g.id), ComputeSlices: 3, UUID: "MIG-0-1-0"}}
	if !reflect.DeepEqual(cis, wantCIs) {
		t.Errorf("ComputeInstances(%d) = %+v, want %+v", gi3g.id, cis, wantCIs)
	}
	if cis, err := d.ComputeInstances(int(me.id)); err != nil || len(cis) != 0 {
		t.Errorf("ComputeInstances of an empty GPU instance = %+v, %v; want none", cis, err)
	}
	if _, err := d.ComputeInstances(42); !errors.Is(err, ErrNotFound) {
		t.Errorf("ComputeInstances(42) = %v, want ErrNotFound", err)
	}

	// The inventory reads the same through the interface.
	gpu, err := ReadGPU(d)
	if err != nil {
		t.Fatalf("ReadGPU: %v", err)
	}
	var got []string
	for _, in := range gpu.Instances {
		got = append(got, fmt.Sprintf("%s@%d:%s", in.Profile, in.Placement.Start, in.UUID()))
	}
	wantInv := []string{"1g.10gb@0:MIG-0-2-0", "1g.10gb+me@1:", "3g.40gb@4:MIG-0-1-0"}
	if !slices.Equal(got, wantInv) || gpu.Model != "H100-80GB" || gpu.PCIBusID != g.busID {
		t.Errorf("ReadGPU = %+v; instances %v, want %v", gpu, got, wantInv)
	}
}

func TestNVMLComputeInstanceWithoutMIGDevice(t *testing.T) {
	g := newNVMLFakeGPU(0)
	gi := g.seed(nvml.GPU_INSTANCE_PROFILE_7_SLICE, 0, true)
	g.dev.GetMigDeviceHandleByIndexFunc = func(int) (nvml.Device, nvml.Return) { return nil, nvml.ERROR_NOT_FOUND }
	if _, err := nvmlDeviceAt(t, openNVMLFake(t, nil, g), 0).ComputeInstances(int(gi.id)); !errors.Is(err, ErrNotFound) {
		t.Errorf("ComputeInstances with no MIG device = %v, want ErrNotFound", err)
	}
}

func TestNVMLCreateGPUInstance(t *testing.T) {
	tests := []struct {
		name    string
		seed    func(g *nvmlFakeGPU)
		profile int
		at      Placement
		wantID  uint32 // NVML profile ID go-nvml must get
		wantErr error
	}{
		{"2g at 2", nil, nvml.GPU_INSTANCE_PROFILE_2_SLICE, Placement{2, 2}, 14, nil},
		{"+me at 6", nil, nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, Placement{6, 1}, 20, nil},
		{"overlap", func(g *nvmlFakeGPU) { g.seed(nvml.GPU_INSTANCE_PROFILE_4_SLICE, 0, false) },
			nvml.GPU_INSTANCE_PROFILE_2_SLICE, Placement{2, 2}, 14, ErrInsufficientResources},
		{"bad placement", nil, nvml.GPU_INSTANCE_PROFILE_3_SLICE, Placement{2, 4}, 9, ErrInvalidArgument},
		{"unsupported profile", nil, nvml.GPU_INSTANCE_PROFILE_6_SLICE, Placement{0, 6}, 0, ErrNotSupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newNVMLFakeGPU(0)
			if tt.seed != nil {
				tt.seed(g)
			}
			d := nvmlDeviceAt(t, openNVMLFake(t, nil, g), 0)
			gi, err := d.CreateGPUInstance(tt.profile, tt.at)
			if tt.wantErr != nil {
				checkNVMLSentinel(t, err, tt.wantErr)
				prefix := fmt.Sprintf("GPU 0: create GPU instance (profile %d at %d:%d)", tt.profile, tt.at.Start, tt.at.Size)
				if !strings.HasPrefix(err.Error(), prefix) {
					t.Errorf("error %q does not start with %q", err, prefix)
				}
				return
			}
			if err != nil {
				t.Fatalf("CreateGPUInstance: %v", err)
			}
			if gi.ProfileID != tt.profile || gi.Placement != tt.at || gi.ID == 0 {
				t.Errorf("CreateGPUInstance = %+v, want profile %d at %+v", gi, tt.profile, tt.at)
			}
			calls := g.dev.CreateGpuInstanceWithPlacementCalls()
			if len(calls) != 1 || calls[0].GpuInstanceProfileInfo.Id != tt.wantID ||
				*calls[0].GpuInstancePlacement != (nvml.GpuInstancePlacement{Start: uint32(tt.at.Start), Size: uint32(tt.at.Size)}) {
				t.Errorf("go-nvml got %d calls, first %+v; want profile ID %d at %+v", len(calls), calls, tt.wantID, tt.at)
			}
			gis, err := d.GPUInstances()
			if err != nil || !slices.Contains(gis, gi) {
				t.Errorf("GPUInstances after create = %+v, %v; want it to hold %+v", gis, err, gi)
			}
		})
	}
}

func TestNVMLCreateComputeInstanceFillsGPUInstance(t *testing.T) {
	tests := []struct {
		profile   int
		wantSlice uint32
	}{
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, 1},
		{nvml.GPU_INSTANCE_PROFILE_2_SLICE, 2},
		{nvml.GPU_INSTANCE_PROFILE_3_SLICE, 3},
		{nvml.GPU_INSTANCE_PROFILE_4_SLICE, 4},
		{nvml.GPU_INSTANCE_PROFILE_7_SLICE, 7},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("profile %d", tt.profile), func(t *testing.T) {
			g := newNVMLFakeGPU(0)
			gi := g.seed(tt.profile, 0, false)
			d := nvmlDeviceAt(t, openNVMLFake(t, nil, g), 0)
			ci, err := d.CreateComputeInstance(int(gi.id))
			if err != nil {
				t.Fatalf("CreateComputeInstance: %v", err)
			}
			want := ComputeInstance{ID: 0, GIID: int(gi.id), ComputeSlices: int(tt.wantSlice), UUID: fmt.Sprintf("MIG-0-%d-0", gi.id)}
			if ci != want {
				t.Errorf("CreateComputeInstance = %+v, want %+v", ci, want)
			}
			calls := gi.gi.CreateComputeInstanceCalls()
			if len(calls) != 1 || calls[0].ComputeInstanceProfileInfo.SliceCount != tt.wantSlice {
				t.Fatalf("go-nvml CreateComputeInstance calls = %+v, want one for %d slices", calls, tt.wantSlice)
			}
			for _, c := range gi.gi.GetComputeInstanceProfileInfoCalls() {
				if c.N2 != nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED {
					t.Errorf("compute instance profile read with engine profile %d, want shared", c.N2)
				}
			}
			// The GPU instance is full now.
			if _, err := d.CreateComputeInstance(int(gi.id)); !errors.Is(err, ErrInsufficientResources) {
				t.Errorf("second CreateComputeInstance = %v, want ErrInsufficientResources", err)
			}
		})
	}
}

func TestNVMLDestroy(t *testing.T) {
	g := newNVMLFakeGPU(0)
	gi := g.seed(nvml.GPU_INSTANCE_PROFILE_2_SLICE, 2, true)
	d := nvmlDeviceAt(t, openNVMLFake(t, nil, g), 0)
	id := int(gi.id)

	if err := d.DestroyGPUInstance(id); !errors.Is(err, ErrInUse) {
		t.Fatalf("DestroyGPUInstance with a compute instance = %v, want ErrInUse", err)
	}
	gi.cis[0].procs = []uint32{4242}
	if err := d.DestroyComputeInstance(id, 0); !errors.Is(err, ErrInUse) {
		t.Fatalf("DestroyComputeInstance in use = %v, want ErrInUse", err)
	}
	gi.cis[0].procs = nil
	if err := d.DestroyComputeInstance(id, 0); err != nil {
		t.Fatalf("DestroyComputeInstance: %v", err)
	}
	if err := d.DestroyComputeInstance(id, 0); !errors.Is(err, ErrNotFound) {
		t.Errorf("DestroyComputeInstance again = %v, want ErrNotFound", err)
	}
	if err := d.DestroyGPUInstance(id); err != nil {
		t.Fatalf("DestroyGPUInstance: %v", err)
	}
	if gis, err := d.GPUInstances(); err != nil || len(gis) != 0 {
		t.Errorf("GPUInstances after destroy = %+v, %v; want none", gis, err)
	}
	if err := d.DestroyGPUInstance(id); !errors.Is(err, ErrNotFound) {
		t.Errorf("DestroyGPUInstance again = %v, want ErrNotFound", err)
	}
	if err := d.DestroyGPUInstance(-1); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("DestroyGPUInstance(-1) = %v, want ErrInvalidArgument", err)
	}
}

func TestNVMLProcesses(t *testing.T) {
	tests := []struct {
		name    string
		mig     bool
		setup   func(g *nvmlFakeGPU)
		want    int
		wantErr bool
	}{
		{name: "whole GPU", want: 2},
		{name: "MIG devices too, each process once", mig: true, want: 3},
		{name: "no MIG support", setup: func(g *nvmlFakeGPU) { g.noMIG = true }, want: 2},
		{name: "graphics not supported", setup: func(g *nvmlFakeGPU) {
			g.dev.GetGraphicsRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
		}, want: 2},
		{name: "compute fails", setup: func(g *nvmlFakeGPU) {
			g.dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_GPU_IS_LOST }
		}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newNVMLFakeGPU(0)
			g.procs = []uint32{10, 11}
			gi := g.seed(nvml.GPU_INSTANCE_PROFILE_1_SLICE, 0, true)
			gi.cis[0].procs = []uint32{11, 12}
			if !tt.mig {
				g.migCur = nvml.DEVICE_MIG_DISABLE
			}
			if tt.setup != nil {
				tt.setup(g)
			}
			n, err := nvmlDeviceAt(t, openNVMLFake(t, nil, g), 0).Processes()
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

func TestNVMLTopology(t *testing.T) {
	g0, g1, g2 := newNVMLFakeGPU(0), newNVMLFakeGPU(1), newNVMLFakeGPU(2)
	for l := range 4 {
		g0.nvlinks[l] = strings.Replace(g1.busID, "00000000:", "0000:", 1) // short domain, same GPU
		g1.nvlinks[l] = strings.ToLower(g0.busID)
	}
	g0.offLinks[4] = g1.busID // down: does not count
	g0.nvlinks[5] = g2.busID
	g1.nvlinks[6] = "00000000:99:00.0" // an NVSwitch, say
	g2.links = 0                       // no NVLink at all
	g2.dev.GetTopologyCommonAncestorFunc = func(nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
		return nvml.TOPOLOGY_SYSTEM, nvml.SUCCESS
	}
	lib := openNVMLFake(t, nil, g0, g1, g2)
	tests := []struct {
		a, b int
		want Link
	}{
		{0, 1, Link{NVLinks: 4, PCIe: int(nvml.TOPOLOGY_HOSTBRIDGE)}},
		{1, 0, Link{NVLinks: 4, PCIe: int(nvml.TOPOLOGY_HOSTBRIDGE)}},
		{0, 2, Link{NVLinks: 1, PCIe: int(nvml.TOPOLOGY_HOSTBRIDGE)}},
		{2, 0, Link{NVLinks: 0, PCIe: int(nvml.TOPOLOGY_SYSTEM)}},
		{1, 1, Link{NVLinks: 0, PCIe: int(nvml.TOPOLOGY_INTERNAL)}},
	}
	for _, tt := range tests {
		got, err := lib.Topology(tt.a, tt.b)
		if err != nil || got != tt.want {
			t.Errorf("Topology(%d, %d) = %+v, %v; want %+v", tt.a, tt.b, got, err, tt.want)
		}
	}
	if _, err := lib.Topology(0, 9); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Topology(0, 9) = %v, want ErrInvalidArgument", err)
	}
	g1.dev.GetNvLinkStateFunc = func(int) (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_GPU_IS_LOST }
	if _, err := lib.Topology(1, 0); err == nil || !strings.Contains(err.Error(), "NVLink 0 state") {
		t.Errorf("Topology with a lost GPU = %v, want an NVLink state error", err)
	}
}

// nvmlFakeEvents is a go-nvml event set that hands out queued events.
type nvmlFakeEvents struct {
	mu     sync.Mutex
	events []nvml.EventData
	waits  []uint32
	freed  int
}

func (f *nvmlFakeEvents) set() *mock.EventSet {
	return &mock.EventSet{
		WaitFunc: func(ms uint32) (nvml.EventData, nvml.Return) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.waits = append(f.waits, ms)
			if len(f.events) == 0 {
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			}
			ev := f.events[0]
			f.events = f.events[1:]
			return ev, nvml.SUCCESS
		},
		FreeFunc: func() nvml.Return {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.freed++
			return nvml.SUCCESS
		},
	}
}

func TestNVMLWatchXIDs(t *testing.T) {
	g0, g1 := newNVMLFakeGPU(0), newNVMLFakeGPU(1)
	other := &mock.Device{GetUUIDFunc: func() (string, nvml.Return) { return "GPU-other", nvml.SUCCESS }}
	fe := &nvmlFakeEvents{events: []nvml.EventData{
		{Device: g1.dev, EventType: nvml.EventTypeXidCriticalError, EventData: 79, GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF},
		{Device: g0.dev, EventType: nvml.EventTypeXidCriticalError, EventData: 31, GpuInstanceId: 2, ComputeInstanceId: 0},
		{Device: other, EventType: nvml.EventTypeXidCriticalError, EventData: 48, GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF},
	}}
	set := fe.set()
	ml := nvmlFakeLib(g0, g1)
	ml.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return set, nvml.SUCCESS }
	lib := NewNVMLFrom(ml)
	if err := lib.Init(); err != nil {
		t.Fatal(err)
	}
	defer lib.Shutdown()

	es, err := lib.WatchXIDs([]int{0, 1})
	if err != nil {
		t.Fatalf("WatchXIDs: %v", err)
	}
	for _, g := range []*nvmlFakeGPU{g0, g1} {
		calls := g.dev.RegisterEventsCalls()
		if len(calls) != 1 || calls[0].V != nvml.EventTypeXidCriticalError || calls[0].EventSet != set {
			t.Errorf("GPU %d RegisterEvents calls = %+v, want one for XID critical errors on the set", g.index, calls)
		}
	}
	before := time.Now()
	want := []XIDEvent{
		{UUID: g1.uuid, XID: 79, GIID: -1, CIID: -1},
		{UUID: g0.uuid, XID: 31, GIID: 2, CIID: 0},
		{UUID: "GPU-other", XID: 48, GIID: -1, CIID: -1},
	}
	for i, w := range want {
		ev, err := es.Wait(1500 * time.Millisecond)
		if err != nil {
			t.Fatalf("Wait %d: %v", i, err)
		}
		if ev.Time.Before(before) {
			t.Errorf("event %d time %v is before the wait", i, ev.Time)
		}
		ev.Time = time.Time{}
		if ev != w {
			t.Errorf("event %d = %+v, want %+v", i, ev, w)
		}
	}
	if _, err := es.Wait(20 * time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Errorf("Wait with no event = %v, want ErrTimeout", err)
	}
	if _, err := es.Wait(-time.Second); !errors.Is(err, ErrTimeout) {
		t.Errorf("Wait(-1s) = %v, want ErrTimeout", err)
	}
	if want := []uint32{1500, 1500, 1500, 20, 0}; !slices.Equal(fe.waits, want) {
		t.Errorf("go-nvml Wait timeouts = %v ms, want %v", fe.waits, want)
	}
	if err := es.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := es.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if fe.freed != 1 {
		t.Errorf("event set freed %d times, want 1", fe.freed)
	}
	if _, err := es.Wait(time.Millisecond); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Wait after Close = %v, want os.ErrClosed", err)
	}
}

func TestNVMLWatchXIDsRegistrationFails(t *testing.T) {
	g0, g1 := newNVMLFakeGPU(0), newNVMLFakeGPU(1)
	g1.dev.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.ERROR_NOT_SUPPORTED }
	fe := &nvmlFakeEvents{}
	ml := nvmlFakeLib(g0, g1)
	ml.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return fe.set(), nvml.SUCCESS }
	lib := NewNVMLFrom(ml)
	if err := lib.Init(); err != nil {
		t.Fatal(err)
	}
	defer lib.Shutdown()
	_, err := lib.WatchXIDs([]int{0, 1})
	checkNVMLSentinel(t, err, ErrNotSupported)
	if !strings.Contains(err.Error(), "GPU 1") || fe.freed != 1 {
		t.Errorf("WatchXIDs = %v, event set freed %d times; want GPU 1 named and the set freed once", err, fe.freed)
	}
}

// nvmlExitError is a CommandRunner error with an exit code, like *exec.ExitError.
type nvmlExitError int

func (e nvmlExitError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }
func (e nvmlExitError) ExitCode() int { return int(e) }

func TestNVMLReset(t *testing.T) {
	tests := []struct {
		name    string
		out     string
		err     error
		block   bool // run until the context ends
		wantErr error
		generic bool // an error that wraps no sentinel
	}{
		{name: "success", out: "GPU 00000000:18:00.0 was successfully reset.\nAll done.\n"},
		{name: "in use", out: "The following GPUs could not be reset:\n  GPU 00000000:18:00.0: In use by another client\n\n1 device is currently being used by one or more other processes", err: nvmlExitError(255), wantErr: ErrInUse},
		{name: "not supported", out: "GPU Reset couldn't run because GPU 00000000:18:00.0 is not supported.", err: nvmlExitError(3), wantErr: ErrNotSupported},
		{name: "not supported by code", err: nvmlExitError(3), wantErr: ErrNotSupported},
		{name: "nvidia-smi missing", err: &exec.Error{Name: "nvidia-smi", Err: exec.ErrNotFound}, wantErr: ErrNotSupported},
		{name: "hangs", block: true, wantErr: ErrTimeout},
		{name: "other failure", out: "Unable to reset GPU: Unknown Error", err: nvmlExitError(255), generic: true},
		{name: "no permission", out: "Insufficient Permissions", err: nvmlExitError(4), generic: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newNVMLFakeGPU(0)
			var got [][]string
			run := func(ctx context.Context, name string, args ...string) ([]byte, error) {
				got = append(got, append([]string{name}, args...))
				if tt.block {
					<-ctx.Done()
					return nil, nvmlExitError(-1)
				}
				return []byte(tt.out), tt.err
			}
			lib := openNVMLFake(t, []NVMLOption{WithCommandRunner(run), WithResetTimeout(20 * time.Millisecond)}, g)
			err := nvmlDeviceAt(t, lib, 0).Reset()
			if want := [][]string{{"nvidia-smi", "--gpu-reset", "-i", g.busID}}; !reflect.DeepEqual(got, want) {
				t.Errorf("ran %q, want %q", got, want)
			}
			switch {
			case tt.wantErr != nil:
				checkNVMLSentinel(t, err, tt.wantErr)
			case tt.generic:
				checkNVMLSentinel(t, err, nil)
				if !strings.Contains(err.Error(), strings.Fields(tt.out)[0]) {
					t.Errorf("error %q does not quote nvidia-smi", err)
				}
			case err != nil:
				t.Errorf("Reset: %v", err)
			}
		})
	}
}

func TestNVMLResetWithoutNvidiaSMIOnPath(t *testing.T) {
	// The default runner, with a PATH that cannot hold nvidia-smi: this
	// never resets a real GPU, wherever it runs.
	t.Setenv("PATH", t.TempDir())
	err := nvmlResetGPU(buildNVMLOptions(nil), 0, "00000000:18:00.0")
	checkNVMLSentinel(t, err, ErrNotSupported)
	if !errors.Is(err, exec.ErrNotFound) {
		t.Errorf("Reset = %v, want it to wrap exec.ErrNotFound", err)
	}
}

func TestNVMLConcurrentUseAndShutdown(t *testing.T) {
	g := newNVMLFakeGPU(0)
	g.seed(nvml.GPU_INSTANCE_PROFILE_7_SLICE, 0, true)
	lib := NewNVMLFrom(nvmlFakeLib(g), WithProfileInfoV2(nvmlFakeProfileInfoV2(g)))
	if err := lib.Init(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 4 {
		wg.Go(func() {
			for range 50 {
				d, err := lib.Device(0)
				if err == nil {
					_, err = ReadGPU(d)
				}
				if err != nil && !errors.Is(err, ErrUninitialized) {
					errs <- err
					return
				}
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			if err := lib.Shutdown(); err != nil {
				errs <- err
				return
			}
			if err := lib.Init(); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := lib.Shutdown(); err != nil {
		t.Fatal(err)
	}
}
