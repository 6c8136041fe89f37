//go:build cgo

package nvml

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"

	"github.com/carve-dev/carve/partition"
)

// catalogueWithMemory returns the catalogue's model with each profile's
// memory taken from got: the catalogue only approximates it.
func catalogueWithMemory(t *testing.T, key string, got []partition.GIProfile) partition.Model {
	t.Helper()
	m, ok := partition.LookupModel(key)
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

func TestGPUInstanceProfiles(t *testing.T) {
	wantNames := []string{"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.10gb+me", "1g.20gb"} // GPU_INSTANCE_PROFILE_* order
	for _, v2 := range []bool{true, false} {
		t.Run(fmt.Sprintf("V2 %v", v2), func(t *testing.T) {
			g := newFakeGPU(0)
			v2Calls := 0
			read := fakeProfileInfoV2(g)
			opts := []Option{WithProfileInfoV2(nil)} // without V2, names are built from sizes
			if v2 {
				opts = []Option{WithProfileInfoV2(func(d gonvml.Device, p int) (gonvml.GpuInstanceProfileInfo_v2, gonvml.Return) {
					v2Calls++
					return read(d, p)
				})}
			}
			ps, err := deviceAt(t, openFake(t, opts, g), 0).GPUInstanceProfiles()
			if err != nil {
				t.Fatalf("GPUInstanceProfiles: %v", err)
			}
			if (v2Calls > 0) != v2 {
				t.Errorf("V2 profile info read %d times, want it used: %v", v2Calls, v2)
			}
			h100 := catalogueWithMemory(t, "H100-80GB", ps)
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
			if p, _ := h100.ProfileByID(gonvml.GPU_INSTANCE_PROFILE_1_SLICE); p.MemoryMiB != 9984 {
				t.Errorf("1g.10gb memory = %d MiB, want NVML's 9984", p.MemoryMiB)
			}
		})
	}
}

// The SMs and engines come from NVML's profile info, with or without the
// V2 info, as GPU feature discovery labels them.
func TestGPUInstanceProfileEngines(t *testing.T) {
	want := map[string]partition.Engines{
		"1g.10gb":    {Multiprocessors: 16, CopyEngines: 1, Decoders: 1, JPEGs: 1},
		"1g.10gb+me": {Multiprocessors: 16, CopyEngines: 1, Decoders: 1, JPEGs: 1, OFAs: 1},
		"1g.20gb":    {Multiprocessors: 26, CopyEngines: 1, Decoders: 1, JPEGs: 1},
		"2g.20gb":    {Multiprocessors: 32, CopyEngines: 2, Decoders: 2, JPEGs: 2},
		"3g.40gb":    {Multiprocessors: 60, CopyEngines: 3, Decoders: 3, JPEGs: 3},
		"4g.40gb":    {Multiprocessors: 64, CopyEngines: 4, Decoders: 4, JPEGs: 4},
		"7g.80gb":    {Multiprocessors: 132, CopyEngines: 8, Decoders: 7, JPEGs: 7, OFAs: 1},
	}
	for _, v2 := range []bool{true, false} {
		t.Run(fmt.Sprintf("V2 %v", v2), func(t *testing.T) {
			g := newFakeGPU(0)
			g.profiles[0].eng = fakeEngines{16, 1, 1, 2, 1, 0} // an encoder too, to see every field read
			var opts []Option
			if !v2 {
				opts = []Option{WithProfileInfoV2(nil)}
			}
			ps, err := deviceAt(t, openFake(t, opts, g), 0).GPUInstanceProfiles()
			if err != nil {
				t.Fatalf("GPUInstanceProfiles: %v", err)
			}
			got := map[string]partition.Engines{}
			for _, p := range ps {
				got[p.Name] = p.Engines
			}
			w := maps.Clone(want)
			w["1g.10gb"] = partition.Engines{Multiprocessors: 16, CopyEngines: 1, Decoders: 1, Encoders: 2, JPEGs: 1}
			if diff := cmp.Diff(w, got); diff != "" {
				t.Errorf("engines (-want +got):\n%s", diff)
			}
		})
	}
}

func TestModelFromDeviceMatchesCatalogue(t *testing.T) {
	got, err := partition.ModelFromDevice(deviceAt(t, openFake(t, nil, newFakeGPU(0)), 0))
	if err != nil {
		t.Fatalf("ModelFromDevice: %v", err)
	}
	h100 := catalogueWithMemory(t, "H100-80GB", got.Profiles)
	h100.Product, h100.OtherProducts, h100.PCIDeviceIDs = got.Product, nil, []uint32{0x233010DE}
	if !reflect.DeepEqual(got, h100) {
		t.Errorf("model from NVML:\n got %+v\nwant %+v", got, h100)
	}
}

func TestProfileNames(t *testing.T) {
	tests := []struct {
		name string
		p    giProfile
		want string
	}{
		{"V2 name", giProfile{id: gonvml.GPU_INSTANCE_PROFILE_1_SLICE, name: "MIG 1g.10gb"}, "1g.10gb"},
		{"V2 name with +me", giProfile{id: gonvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, name: "MIG 1g.10gb+me"}, "1g.10gb+me"},
		{"V2 name lacking +me", giProfile{id: gonvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1, name: "MIG 2g.12gb"}, "2g.12gb+me"},
		{"V2 name with +me.all", giProfile{id: gonvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME, name: "MIG 1g.24gb+me.all"}, "1g.24gb+me.all"},
		{"V2 name lacking +me.all", giProfile{id: gonvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME, name: "MIG 2g.48gb"}, "2g.48gb+me.all"},
		{"V2 name, -me", giProfile{id: gonvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME, name: "MIG 2g.48gb-me"}, "2g.48gb-me"},
		{"built", giProfile{id: gonvml.GPU_INSTANCE_PROFILE_2_SLICE, info: gonvml.GpuInstanceProfileInfo{SliceCount: 2, MemorySizeMB: 11904}}, "2g.12gb"},
		{"built +me", giProfile{id: gonvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, info: gonvml.GpuInstanceProfileInfo{SliceCount: 1, MemorySizeMB: 4864}}, "1g.5gb+me"},
		{"built -me", giProfile{id: gonvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, info: gonvml.GpuInstanceProfileInfo{SliceCount: 1, MemorySizeMB: 23552}}, "1g.23gb-me"},
		{"built +gfx", giProfile{id: gonvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX, info: gonvml.GpuInstanceProfileInfo{SliceCount: 2, MemorySizeMB: 47104}}, "2g.46gb+gfx"},
		{"built +gfx, 3g", giProfile{id: gonvml.GPU_INSTANCE_PROFILE_3_SLICE_GFX, info: gonvml.GpuInstanceProfileInfo{SliceCount: 3, MemorySizeMB: 71424}}, "3g.70gb+gfx"},
		{"built +me.all", giProfile{id: gonvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME, info: gonvml.GpuInstanceProfileInfo{SliceCount: 1, MemorySizeMB: 24192}}, "1g.24gb+me.all"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := profileName(tt.p); got != tt.want {
				t.Errorf("profileName = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestCatalogueProfileIDs checks the catalogue's profile IDs against
// go-nvml's GPU_INSTANCE_PROFILE_* values: each is one, of the variant its
// name ends in and of its compute slices, and the media extensions are the
// +me and +me.all ones.
func TestCatalogueProfileIDs(t *testing.T) {
	slicesOf := map[int]int{
		gonvml.GPU_INSTANCE_PROFILE_1_SLICE: 1, gonvml.GPU_INSTANCE_PROFILE_2_SLICE: 2, gonvml.GPU_INSTANCE_PROFILE_3_SLICE: 3,
		gonvml.GPU_INSTANCE_PROFILE_4_SLICE: 4, gonvml.GPU_INSTANCE_PROFILE_7_SLICE: 7, gonvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1: 1,
		gonvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1: 2, gonvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2: 1, gonvml.GPU_INSTANCE_PROFILE_1_SLICE_GFX: 1,
		gonvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX: 2, gonvml.GPU_INSTANCE_PROFILE_4_SLICE_GFX: 4, gonvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME: 1,
		gonvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME: 2, gonvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME: 1, gonvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME: 2,
		gonvml.GPU_INSTANCE_PROFILE_3_SLICE_GFX: 3,
	}
	for _, m := range partition.Catalogue() {
		for _, p := range m.Profiles {
			n, ok := slicesOf[p.ID]
			if !ok || n != p.ComputeSlices {
				t.Errorf("%s %s: profile ID %d is no GPU_INSTANCE_PROFILE_* of %d compute slices", m.Key, p.Name, p.ID, p.ComputeSlices)
			}
			if _, v := partition.SplitProfileName(p.Name); v != variantSuffix(p.ID) {
				t.Errorf("%s %s: profile ID %d is of variant %q", m.Key, p.Name, p.ID, variantSuffix(p.ID))
			}
			if p.MediaExtensions != mediaExtensions(p.ID) {
				t.Errorf("%s %s: media extensions %v, NVML's profile %d says %v", m.Key, p.Name, p.MediaExtensions, p.ID, mediaExtensions(p.ID))
			}
		}
	}
}

func TestGPUInstanceProfilesErrors(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(g *fakeGPU)
		wantErr error
	}{
		{"MIG disabled", func(g *fakeGPU) { g.migCur = gonvml.DEVICE_MIG_DISABLE }, partition.ErrNotSupported},
		{"no MIG", func(g *fakeGPU) { g.noMIG = true }, partition.ErrNotSupported},
		{"profile info fails", func(g *fakeGPU) {
			g.dev.GetGpuInstanceProfileInfoFunc = func(int) (gonvml.GpuInstanceProfileInfo, gonvml.Return) {
				return gonvml.GpuInstanceProfileInfo{}, gonvml.ERROR_GPU_IS_LOST
			}
		}, nil},
		{"placements fail", func(g *fakeGPU) {
			g.dev.GetGpuInstancePossiblePlacementsFunc = func(*gonvml.GpuInstanceProfileInfo) ([]gonvml.GpuInstancePlacement, gonvml.Return) {
				return nil, gonvml.ERROR_UNKNOWN
			}
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newFakeGPU(0)
			tt.setup(g)
			ps, err := deviceAt(t, openFake(t, []Option{WithProfileInfoV2(nil)}, g), 0).GPUInstanceProfiles()
			if err == nil {
				t.Fatalf("GPUInstanceProfiles = %+v, want an error", ps)
			}
			checkSentinel(t, err, tt.wantErr)
		})
	}
}

func TestInstancesAndMIGDeviceUUIDs(t *testing.T) {
	g := newFakeGPU(0)
	gi3g := g.seed(gonvml.GPU_INSTANCE_PROFILE_3_SLICE, 4, true)     // GI 1
	gi1g := g.seed(gonvml.GPU_INSTANCE_PROFILE_1_SLICE, 0, true)     // GI 2
	me := g.seed(gonvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, 1, false) // GI 3, no CI yet
	d := deviceAt(t, openFake(t, nil, g), 0)

	gis, err := d.GPUInstances()
	if err != nil {
		t.Fatalf("GPUInstances: %v", err)
	}
	want := []partition.GPUInstance{
		{ID: int(gi1g.id), ProfileID: gonvml.GPU_INSTANCE_PROFILE_1_SLICE, Placement: partition.Placement{Start: 0, Size: 1}},
		{ID: int(me.id), ProfileID: gonvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, Placement: partition.Placement{Start: 1, Size: 1}},
		{ID: int(gi3g.id), ProfileID: gonvml.GPU_INSTANCE_PROFILE_3_SLICE, Placement: partition.Placement{Start: 4, Size: 4}},
	}
	if !reflect.DeepEqual(gis, want) {
		t.Errorf("GPUInstances:\n got %+v\nwant %+v", gis, want)
	}

	cis, err := d.ComputeInstances(int(gi3g.id))
	if err != nil {
		t.Fatalf("ComputeInstances: %v", err)
	}
	wantCIs := []partition.ComputeInstance{{ID: 0, GIID: int(gi3g.id), ComputeSlices: 3, UUID: "MIG-0-1-0"}}
	if !reflect.DeepEqual(cis, wantCIs) {
		t.Errorf("ComputeInstances(%d) = %+v, want %+v", gi3g.id, cis, wantCIs)
	}
	if cis, err := d.ComputeInstances(int(me.id)); err != nil || len(cis) != 0 {
		t.Errorf("ComputeInstances of an empty GPU instance = %+v, %v; want none", cis, err)
	}
	if _, err := d.ComputeInstances(42); !errors.Is(err, partition.ErrNotFound) {
		t.Errorf("ComputeInstances(42) = %v, want ErrNotFound", err)
	}

	// The inventory reads the same through the interface.
	gpu, err := partition.ReadGPU(d)
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

func TestComputeInstanceWithoutMIGDevice(t *testing.T) {
	g := newFakeGPU(0)
	gi := g.seed(gonvml.GPU_INSTANCE_PROFILE_7_SLICE, 0, true)
	g.dev.GetMigDeviceHandleByIndexFunc = func(int) (gonvml.Device, gonvml.Return) { return nil, gonvml.ERROR_NOT_FOUND }
	if _, err := deviceAt(t, openFake(t, nil, g), 0).ComputeInstances(int(gi.id)); !errors.Is(err, partition.ErrNotFound) {
		t.Errorf("ComputeInstances with no MIG device = %v, want ErrNotFound", err)
	}
}

func TestCreateGPUInstance(t *testing.T) {
	tests := []struct {
		name    string
		seed    func(g *fakeGPU)
		profile int
		at      partition.Placement
		wantID  uint32 // NVML profile ID go-nvml must get
		wantErr error
	}{
		{"2g at 2", nil, gonvml.GPU_INSTANCE_PROFILE_2_SLICE, partition.Placement{Start: 2, Size: 2}, 14, nil},
		{"+me at 6", nil, gonvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, partition.Placement{Start: 6, Size: 1}, 20, nil},
		{"overlap", func(g *fakeGPU) { g.seed(gonvml.GPU_INSTANCE_PROFILE_4_SLICE, 0, false) },
			gonvml.GPU_INSTANCE_PROFILE_2_SLICE, partition.Placement{Start: 2, Size: 2}, 14, partition.ErrInsufficientResources},
		{"bad placement", nil, gonvml.GPU_INSTANCE_PROFILE_3_SLICE, partition.Placement{Start: 2, Size: 4}, 9, partition.ErrInvalidArgument},
		{"unsupported profile", nil, gonvml.GPU_INSTANCE_PROFILE_6_SLICE, partition.Placement{Start: 0, Size: 6}, 0, partition.ErrNotSupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newFakeGPU(0)
			if tt.seed != nil {
				tt.seed(g)
			}
			d := deviceAt(t, openFake(t, nil, g), 0)
			gi, err := d.CreateGPUInstance(tt.profile, tt.at)
			if tt.wantErr != nil {
				checkSentinel(t, err, tt.wantErr)
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
				*calls[0].GpuInstancePlacement != (gonvml.GpuInstancePlacement{Start: uint32(tt.at.Start), Size: uint32(tt.at.Size)}) {
				t.Errorf("go-nvml got %d calls, first %+v; want profile ID %d at %+v", len(calls), calls, tt.wantID, tt.at)
			}
			gis, err := d.GPUInstances()
			if err != nil || !slices.Contains(gis, gi) {
				t.Errorf("GPUInstances after create = %+v, %v; want it to hold %+v", gis, err, gi)
			}
		})
	}
}

func TestCreateComputeInstanceFillsGPUInstance(t *testing.T) {
	tests := []struct {
		profile   int
		wantSlice uint32
	}{
		{gonvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, 1},
		{gonvml.GPU_INSTANCE_PROFILE_2_SLICE, 2},
		{gonvml.GPU_INSTANCE_PROFILE_3_SLICE, 3},
		{gonvml.GPU_INSTANCE_PROFILE_4_SLICE, 4},
		{gonvml.GPU_INSTANCE_PROFILE_7_SLICE, 7},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("profile %d", tt.profile), func(t *testing.T) {
			g := newFakeGPU(0)
			gi := g.seed(tt.profile, 0, false)
			d := deviceAt(t, openFake(t, nil, g), 0)
			ci, err := d.CreateComputeInstance(int(gi.id))
			if err != nil {
				t.Fatalf("CreateComputeInstance: %v", err)
			}
			want := partition.ComputeInstance{ID: 0, GIID: int(gi.id), ComputeSlices: int(tt.wantSlice), UUID: fmt.Sprintf("MIG-0-%d-0", gi.id)}
			if ci != want {
				t.Errorf("CreateComputeInstance = %+v, want %+v", ci, want)
			}
			calls := gi.gi.CreateComputeInstanceCalls()
			if len(calls) != 1 || calls[0].ComputeInstanceProfileInfo.SliceCount != tt.wantSlice {
				t.Fatalf("go-nvml CreateComputeInstance calls = %+v, want one for %d slices", calls, tt.wantSlice)
			}
			for _, c := range gi.gi.GetComputeInstanceProfileInfoCalls() {
				if c.N2 != gonvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED {
					t.Errorf("compute instance profile read with engine profile %d, want shared", c.N2)
				}
			}
			// The GPU instance is full now.
			if _, err := d.CreateComputeInstance(int(gi.id)); !errors.Is(err, partition.ErrInsufficientResources) {
				t.Errorf("second CreateComputeInstance = %v, want ErrInsufficientResources", err)
			}
		})
	}
}

func TestDestroy(t *testing.T) {
	g := newFakeGPU(0)
	gi := g.seed(gonvml.GPU_INSTANCE_PROFILE_2_SLICE, 2, true)
	d := deviceAt(t, openFake(t, nil, g), 0)
	id := int(gi.id)

	if err := d.DestroyGPUInstance(id); !errors.Is(err, partition.ErrInUse) {
		t.Fatalf("DestroyGPUInstance with a compute instance = %v, want ErrInUse", err)
	}
	gi.cis[0].procs = []uint32{4242}
	if err := d.DestroyComputeInstance(id, 0); !errors.Is(err, partition.ErrInUse) {
		t.Fatalf("DestroyComputeInstance in use = %v, want ErrInUse", err)
	}
	gi.cis[0].procs = nil
	if err := d.DestroyComputeInstance(id, 0); err != nil {
		t.Fatalf("DestroyComputeInstance: %v", err)
	}
	if err := d.DestroyComputeInstance(id, 0); !errors.Is(err, partition.ErrNotFound) {
		t.Errorf("DestroyComputeInstance again = %v, want ErrNotFound", err)
	}
	if err := d.DestroyGPUInstance(id); err != nil {
		t.Fatalf("DestroyGPUInstance: %v", err)
	}
	if gis, err := d.GPUInstances(); err != nil || len(gis) != 0 {
		t.Errorf("GPUInstances after destroy = %+v, %v; want none", gis, err)
	}
	if err := d.DestroyGPUInstance(id); !errors.Is(err, partition.ErrNotFound) {
		t.Errorf("DestroyGPUInstance again = %v, want ErrNotFound", err)
	}
	if err := d.DestroyGPUInstance(-1); !errors.Is(err, partition.ErrInvalidArgument) {
		t.Errorf("DestroyGPUInstance(-1) = %v, want ErrInvalidArgument", err)
	}
}
