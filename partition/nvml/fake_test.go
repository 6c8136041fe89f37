//go:build cgo

package nvml

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/carve-dev/carve/partition"
)

// openFake returns an initialized NVML over fake GPUs, with V2 profile
// names, shut down when the test ends.
func openFake(t *testing.T, opts []Option, gpus ...*fakeGPU) partition.NVML {
	t.Helper()
	lib := NewFrom(fakeLib(gpus...), append([]Option{WithProfileInfoV2(fakeProfileInfoV2(gpus...))}, opts...)...)
	if err := lib.Init(); err != nil {
		t.Fatalf("Init: %v", err)
	}
	t.Cleanup(func() { _ = lib.Shutdown() })
	return lib
}

func deviceAt(t *testing.T, lib partition.NVML, i int) partition.Device {
	t.Helper()
	d, err := lib.Device(i)
	if err != nil {
		t.Fatalf("Device(%d): %v", i, err)
	}
	return d
}

// A fake GPU for the NVML tests, built from go-nvml's mocks. Unlike the
// mock servers of go-nvml (whose profile IDs equal the
// GPU_INSTANCE_PROFILE_* values), it behaves like the hardware: NVML's
// profile IDs (info.Id, 19 for 1g.10gb) differ from the values profiles
// are read with, placements and counts are enforced, and a GPU instance
// with compute instances cannot be destroyed.

// fakeProfile is one GPU instance profile of a fake GPU.
type fakeProfile struct {
	enum   int    // nvml.GPU_INSTANCE_PROFILE_*
	id     uint32 // NVML's profile ID
	slices uint32
	count  uint32
	memMB  uint64
	name   string // the V2 name
	size   uint32
	starts []uint32
	eng    fakeEngines
}

// fakeEngines are a profile's SMs and engines, in nvidia-smi mig -lgip's
// column order: SM, CE, DEC, ENC, JPEG, OFA.
type fakeEngines [6]uint32

// set copies the engines into NVML's profile info.
func (e fakeEngines) set(info *gonvml.GpuInstanceProfileInfo) {
	info.MultiprocessorCount, info.CopyEngineCount, info.DecoderCount = e[0], e[1], e[2]
	info.EncoderCount, info.JpegCount, info.OfaCount = e[3], e[4], e[5]
}

// h100Profiles are an H100 80GB HBM3's profiles as NVML reported them on
// one (driver 580): IDs, names, counts, memory sizes and placements; the
// SMs and engines are those published nvidia-smi mig -lgip listings of
// the GH100 show (docs/hardware.md).
func h100Profiles() []fakeProfile {
	return []fakeProfile{
		{gonvml.GPU_INSTANCE_PROFILE_1_SLICE, 19, 1, 7, 9984, "MIG 1g.10gb", 1, []uint32{0, 1, 2, 3, 4, 5, 6}, fakeEngines{16, 1, 1, 0, 1, 0}},
		{gonvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, 20, 1, 1, 9984, "MIG 1g.10gb+me", 1, []uint32{0, 1, 2, 3, 4, 5, 6}, fakeEngines{16, 1, 1, 0, 1, 1}},
		{gonvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, 15, 1, 4, 20096, "MIG 1g.20gb", 2, []uint32{0, 2, 4, 6}, fakeEngines{26, 1, 1, 0, 1, 0}},
		{gonvml.GPU_INSTANCE_PROFILE_2_SLICE, 14, 2, 3, 20096, "MIG 2g.20gb", 2, []uint32{0, 2, 4}, fakeEngines{32, 2, 2, 0, 2, 0}},
		{gonvml.GPU_INSTANCE_PROFILE_3_SLICE, 9, 3, 2, 40448, "MIG 3g.40gb", 4, []uint32{0, 4}, fakeEngines{60, 3, 3, 0, 3, 0}},
		{gonvml.GPU_INSTANCE_PROFILE_4_SLICE, 5, 4, 1, 40448, "MIG 4g.40gb", 4, []uint32{0}, fakeEngines{64, 4, 4, 0, 4, 0}},
		{gonvml.GPU_INSTANCE_PROFILE_7_SLICE, 0, 7, 1, 81152, "MIG 7g.80gb", 8, []uint32{0}, fakeEngines{132, 8, 7, 0, 7, 1}},
	}
}

// ciSliceTable maps the compute instance profiles the fake knows to their
// slices; a GPU instance supports those that fit it.
func ciSliceTable() map[int]uint32 {
	return map[int]uint32{
		gonvml.COMPUTE_INSTANCE_PROFILE_1_SLICE: 1,
		gonvml.COMPUTE_INSTANCE_PROFILE_2_SLICE: 2,
		gonvml.COMPUTE_INSTANCE_PROFILE_3_SLICE: 3,
		gonvml.COMPUTE_INSTANCE_PROFILE_4_SLICE: 4,
		gonvml.COMPUTE_INSTANCE_PROFILE_7_SLICE: 7,
	}
}

// ciProfileID is the fake's NVML ID of a compute instance profile, made to
// differ from the COMPUTE_INSTANCE_PROFILE_* value.
func ciProfileID(enum int) uint32 { return uint32(100 + enum) }

type fakeGPU struct {
	mu       sync.Mutex
	index    int
	uuid     string
	name     string
	busID    string
	pciID    uint32 // PCI device and vendor ID
	memBytes uint64
	migCur   int
	migPend  int
	noMIG    bool
	profiles []fakeProfile
	gis      map[uint32]*fakeGI
	nextGI   uint32
	procs    []uint32          // compute processes on the whole GPU
	gfx      []uint32          // graphics processes on the whole GPU
	names    map[uint32]string // process names SystemGetProcessName tells
	nvlinks  map[int]string    // enabled link -> remote bus ID
	offLinks map[int]string    // disabled link -> remote bus ID
	links    int               // links the GPU has; 0: no NVLink

	dev *mock.Device
}

type fakeGI struct {
	id        uint32
	prof      fakeProfile
	placement gonvml.GpuInstancePlacement
	cis       map[uint32]*fakeCI
	nextCI    uint32
	gi        *mock.GpuInstance
}

type fakeCI struct {
	id     uint32
	enum   int
	slices uint32
	uuid   string
	procs  []uint32
	ci     *mock.ComputeInstance
}

// newFakeGPU returns an H100 80GB in MIG mode with no instances.
func newFakeGPU(index int) *fakeGPU {
	g := &fakeGPU{
		index:    index,
		uuid:     fmt.Sprintf("GPU-0000000%d-aaaa-bbbb-cccc-dddddddddddd", index),
		name:     "NVIDIA H100 80GB HBM3",
		busID:    fmt.Sprintf("00000000:%02X:00.0", 0x18+index),
		pciID:    0x233010DE,
		memBytes: 81559 << 20,
		migCur:   gonvml.DEVICE_MIG_ENABLE,
		migPend:  gonvml.DEVICE_MIG_ENABLE,
		profiles: h100Profiles(),
		gis:      map[uint32]*fakeGI{},
		nextGI:   1,
		nvlinks:  map[int]string{},
		offLinks: map[int]string{},
		links:    18,
	}
	g.dev = g.newDevice()
	return g
}

func setCString(dst []int8, s string) {
	for i := range dst {
		dst[i] = 0
	}
	for i := 0; i < len(s) && i < len(dst)-1; i++ {
		dst[i] = int8(s[i])
	}
}

func pciInfo(busID string) gonvml.PciInfo {
	var p gonvml.PciInfo
	setCString(p.BusId[:], busID)
	return p
}

func (g *fakeGPU) profileByEnum(enum int) (fakeProfile, bool) {
	for _, p := range g.profiles {
		if p.enum == enum {
			return p, true
		}
	}
	return fakeProfile{}, false
}

func (g *fakeGPU) profileByID(id uint32) (fakeProfile, bool) {
	for _, p := range g.profiles {
		if p.id == id {
			return p, true
		}
	}
	return fakeProfile{}, false
}

func (p fakeProfile) info() gonvml.GpuInstanceProfileInfo {
	info := gonvml.GpuInstanceProfileInfo{Id: p.id, SliceCount: p.slices, InstanceCount: p.count, MemorySizeMB: p.memMB}
	p.eng.set(&info)
	return info
}

// fakeProfileInfoV2 is a WithProfileInfoV2 reader for fake GPUs.
func fakeProfileInfoV2(gpus ...*fakeGPU) func(gonvml.Device, int) (gonvml.GpuInstanceProfileInfo_v2, gonvml.Return) {
	return func(dev gonvml.Device, enum int) (gonvml.GpuInstanceProfileInfo_v2, gonvml.Return) {
		for _, g := range gpus {
			if g.dev != dev {
				continue
			}
			info, ret := g.dev.GetGpuInstanceProfileInfo(enum)
			if ret != gonvml.SUCCESS {
				return gonvml.GpuInstanceProfileInfo_v2{}, ret
			}
			p, _ := g.profileByEnum(enum)
			v2 := gonvml.GpuInstanceProfileInfo_v2{Version: 2, Id: info.Id, SliceCount: info.SliceCount,
				InstanceCount: info.InstanceCount, MultiprocessorCount: info.MultiprocessorCount,
				CopyEngineCount: info.CopyEngineCount, DecoderCount: info.DecoderCount, EncoderCount: info.EncoderCount,
				JpegCount: info.JpegCount, OfaCount: info.OfaCount, MemorySizeMB: info.MemorySizeMB}
			setCString(v2.Name[:], p.name)
			return v2, gonvml.SUCCESS
		}
		return gonvml.GpuInstanceProfileInfo_v2{}, gonvml.ERROR_INVALID_ARGUMENT
	}
}

func (g *fakeGPU) newDevice() *mock.Device {
	return &mock.Device{
		GetUUIDFunc: func() (string, gonvml.Return) { return g.uuid, gonvml.SUCCESS },
		GetNameFunc: func() (string, gonvml.Return) { return g.name, gonvml.SUCCESS },
		GetPciInfoFunc: func() (gonvml.PciInfo, gonvml.Return) {
			p := pciInfo(g.busID)
			p.PciDeviceId = g.pciID
			return p, gonvml.SUCCESS
		},
		GetMemoryInfoFunc: func() (gonvml.Memory, gonvml.Return) { return gonvml.Memory{Total: g.memBytes}, gonvml.SUCCESS },
		GetMigModeFunc: func() (int, int, gonvml.Return) {
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.noMIG {
				return 0, 0, gonvml.ERROR_NOT_SUPPORTED
			}
			return g.migCur, g.migPend, gonvml.SUCCESS
		},
		SetMigModeFunc: func(mode int) (gonvml.Return, gonvml.Return) {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.migPend = mode
			return gonvml.ERROR_RESET_REQUIRED, gonvml.SUCCESS
		},
		GetComputeRunningProcessesFunc: func() ([]gonvml.ProcessInfo, gonvml.Return) {
			g.mu.Lock()
			defer g.mu.Unlock()
			return processInfos(g.procs), gonvml.SUCCESS
		},
		GetGraphicsRunningProcessesFunc: func() ([]gonvml.ProcessInfo, gonvml.Return) {
			g.mu.Lock()
			defer g.mu.Unlock()
			return processInfos(g.gfx), gonvml.SUCCESS
		},
		GetGpuInstanceProfileInfoFunc: func(enum int) (gonvml.GpuInstanceProfileInfo, gonvml.Return) {
			g.mu.Lock()
			defer g.mu.Unlock()
			if enum < 0 || enum >= gonvml.GPU_INSTANCE_PROFILE_COUNT {
				return gonvml.GpuInstanceProfileInfo{}, gonvml.ERROR_INVALID_ARGUMENT
			}
			p, ok := g.profileByEnum(enum)
			if !ok || g.noMIG || g.migCur != gonvml.DEVICE_MIG_ENABLE {
				return gonvml.GpuInstanceProfileInfo{}, gonvml.ERROR_NOT_SUPPORTED
			}
			return p.info(), gonvml.SUCCESS
		},
		GetGpuInstancePossiblePlacementsFunc: func(info *gonvml.GpuInstanceProfileInfo) ([]gonvml.GpuInstancePlacement, gonvml.Return) {
			p, ok := g.profileByID(info.Id)
			if !ok {
				return nil, gonvml.ERROR_INVALID_ARGUMENT
			}
			var pls []gonvml.GpuInstancePlacement
			for _, s := range slices.Backward(p.starts) { // NVML's order is not promised
				pls = append(pls, gonvml.GpuInstancePlacement{Start: s, Size: p.size})
			}
			return pls, gonvml.SUCCESS
		},
		GetGpuInstancesFunc: func(info *gonvml.GpuInstanceProfileInfo) ([]gonvml.GpuInstance, gonvml.Return) {
			g.mu.Lock()
			defer g.mu.Unlock()
			if _, ok := g.profileByID(info.Id); !ok || info.InstanceCount == 0 {
				return nil, gonvml.ERROR_INVALID_ARGUMENT
			}
			var out []gonvml.GpuInstance
			for _, gi := range g.sortedGIs() {
				if gi.prof.id == info.Id {
					out = append(out, gi.gi)
				}
			}
			return out, gonvml.SUCCESS
		},
		CreateGpuInstanceWithPlacementFunc: func(info *gonvml.GpuInstanceProfileInfo, pl *gonvml.GpuInstancePlacement) (gonvml.GpuInstance, gonvml.Return) {
			g.mu.Lock()
			defer g.mu.Unlock()
			gi, ret := g.createGI(info.Id, *pl)
			if ret != gonvml.SUCCESS {
				return nil, ret
			}
			return gi.gi, ret
		},
		GetGpuInstanceByIdFunc: func(id int) (gonvml.GpuInstance, gonvml.Return) {
			g.mu.Lock()
			defer g.mu.Unlock()
			gi, ok := g.gis[uint32(id)]
			if !ok {
				return nil, gonvml.ERROR_NOT_FOUND
			}
			return gi.gi, gonvml.SUCCESS
		},
		GetMaxMigDeviceCountFunc: func() (int, gonvml.Return) { return 8, gonvml.SUCCESS },
		GetMigDeviceHandleByIndexFunc: func(i int) (gonvml.Device, gonvml.Return) {
			g.mu.Lock()
			defer g.mu.Unlock()
			// Slot 0 stays empty so callers must skip empty slots.
			var cis []*fakeCI
			var giIDs []uint32
			for _, gi := range g.sortedGIs() {
				for _, ci := range gi.sortedCIs() {
					cis, giIDs = append(cis, ci), append(giIDs, gi.id)
				}
			}
			if i < 1 || i > len(cis) {
				return nil, gonvml.ERROR_NOT_FOUND
			}
			return g.migDevice(giIDs[i-1], cis[i-1]), gonvml.SUCCESS
		},
		GetTopologyCommonAncestorFunc: func(gonvml.Device) (gonvml.GpuTopologyLevel, gonvml.Return) {
			return gonvml.TOPOLOGY_HOSTBRIDGE, gonvml.SUCCESS
		},
		GetNvLinkStateFunc: func(link int) (gonvml.EnableState, gonvml.Return) {
			switch {
			case g.links == 0:
				return 0, gonvml.ERROR_NOT_SUPPORTED
			case link >= g.links:
				return 0, gonvml.ERROR_INVALID_ARGUMENT
			case g.nvlinks[link] != "":
				return gonvml.FEATURE_ENABLED, gonvml.SUCCESS
			}
			return gonvml.FEATURE_DISABLED, gonvml.SUCCESS
		},
		GetNvLinkRemotePciInfoFunc: func(link int) (gonvml.PciInfo, gonvml.Return) {
			if id := g.nvlinks[link]; id != "" {
				return pciInfo(id), gonvml.SUCCESS
			}
			if id := g.offLinks[link]; id != "" {
				return pciInfo(id), gonvml.SUCCESS
			}
			return gonvml.PciInfo{}, gonvml.ERROR_NOT_SUPPORTED
		},
		RegisterEventsFunc: func(uint64, gonvml.EventSet) gonvml.Return { return gonvml.SUCCESS },
	}
}

// migDevice is the MIG device handle of a compute instance; g.mu is held.
func (g *fakeGPU) migDevice(giID uint32, ci *fakeCI) *mock.Device {
	procs := slices.Clone(ci.procs)
	return &mock.Device{
		GetGpuInstanceIdFunc:     func() (int, gonvml.Return) { return int(giID), gonvml.SUCCESS },
		GetComputeInstanceIdFunc: func() (int, gonvml.Return) { return int(ci.id), gonvml.SUCCESS },
		GetUUIDFunc:              func() (string, gonvml.Return) { return ci.uuid, gonvml.SUCCESS },
		GetComputeRunningProcessesFunc: func() ([]gonvml.ProcessInfo, gonvml.Return) {
			return processInfos(procs), gonvml.SUCCESS
		},
		GetGraphicsRunningProcessesFunc: func() ([]gonvml.ProcessInfo, gonvml.Return) { return nil, gonvml.ERROR_NOT_SUPPORTED },
	}
}

func (g *fakeGPU) sortedGIs() []*fakeGI {
	out := make([]*fakeGI, 0, len(g.gis))
	for _, gi := range g.gis {
		out = append(out, gi)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

func (gi *fakeGI) sortedCIs() []*fakeCI {
	out := make([]*fakeCI, 0, len(gi.cis))
	for _, ci := range gi.cis {
		out = append(out, ci)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// createGI creates a GPU instance as NVML would; g.mu is held.
func (g *fakeGPU) createGI(profileID uint32, pl gonvml.GpuInstancePlacement) (*fakeGI, gonvml.Return) {
	p, ok := g.profileByID(profileID)
	if !ok || pl.Size != p.size || !slices.Contains(p.starts, pl.Start) {
		return nil, gonvml.ERROR_INVALID_ARGUMENT
	}
	n := 0
	for _, gi := range g.gis {
		if gi.prof.id == p.id {
			n++
		}
		if pl.Start < gi.placement.Start+gi.placement.Size && gi.placement.Start < pl.Start+pl.Size {
			return nil, gonvml.ERROR_INSUFFICIENT_RESOURCES
		}
	}
	if uint32(n) >= p.count {
		return nil, gonvml.ERROR_INSUFFICIENT_RESOURCES
	}
	gi := &fakeGI{id: g.nextGI, prof: p, placement: pl, cis: map[uint32]*fakeCI{}}
	g.nextGI++
	gi.gi = g.newGpuInstance(gi)
	g.gis[gi.id] = gi
	return gi, gonvml.SUCCESS
}

// createCI creates a compute instance as NVML would; g.mu is held.
func (g *fakeGPU) createCI(gi *fakeGI, profileID uint32) (*fakeCI, gonvml.Return) {
	ciSlices := ciSliceTable()
	enum := -1
	for e := range ciSlices {
		if ciProfileID(e) == profileID {
			enum = e
		}
	}
	if enum < 0 || ciSlices[enum] > gi.prof.slices {
		return nil, gonvml.ERROR_INVALID_ARGUMENT
	}
	used := uint32(0)
	for _, ci := range gi.cis {
		used += ci.slices
	}
	if used+ciSlices[enum] > gi.prof.slices {
		return nil, gonvml.ERROR_INSUFFICIENT_RESOURCES
	}
	ci := &fakeCI{id: gi.nextCI, enum: enum, slices: ciSlices[enum],
		uuid: fmt.Sprintf("MIG-%d-%d-%d", g.index, gi.id, gi.nextCI)}
	gi.nextCI++
	ci.ci = &mock.ComputeInstance{
		GetInfoFunc: func() (gonvml.ComputeInstanceInfo, gonvml.Return) {
			return gonvml.ComputeInstanceInfo{Device: g.dev, GpuInstance: gi.gi, Id: ci.id, ProfileId: ciProfileID(ci.enum)}, gonvml.SUCCESS
		},
		DestroyFunc: func() gonvml.Return {
			g.mu.Lock()
			defer g.mu.Unlock()
			if len(ci.procs) > 0 {
				return gonvml.ERROR_IN_USE
			}
			delete(gi.cis, ci.id)
			return gonvml.SUCCESS
		},
	}
	gi.cis[ci.id] = ci
	return ci, gonvml.SUCCESS
}

func (g *fakeGPU) newGpuInstance(gi *fakeGI) *mock.GpuInstance {
	return &mock.GpuInstance{
		GetInfoFunc: func() (gonvml.GpuInstanceInfo, gonvml.Return) {
			return gonvml.GpuInstanceInfo{Device: g.dev, Id: gi.id, ProfileId: gi.prof.id, Placement: gi.placement}, gonvml.SUCCESS
		},
		GetComputeInstanceProfileInfoFunc: func(enum, eng int) (gonvml.ComputeInstanceProfileInfo, gonvml.Return) {
			if enum < 0 || enum >= gonvml.COMPUTE_INSTANCE_PROFILE_COUNT {
				return gonvml.ComputeInstanceProfileInfo{}, gonvml.ERROR_INVALID_ARGUMENT
			}
			s, ok := ciSliceTable()[enum]
			if eng != gonvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED || !ok || s > gi.prof.slices {
				return gonvml.ComputeInstanceProfileInfo{}, gonvml.ERROR_NOT_SUPPORTED
			}
			return gonvml.ComputeInstanceProfileInfo{Id: ciProfileID(enum), SliceCount: s, InstanceCount: gi.prof.slices / s}, gonvml.SUCCESS
		},
		GetComputeInstancesFunc: func(info *gonvml.ComputeInstanceProfileInfo) ([]gonvml.ComputeInstance, gonvml.Return) {
			g.mu.Lock()
			defer g.mu.Unlock()
			if info.InstanceCount == 0 {
				return nil, gonvml.ERROR_INVALID_ARGUMENT
			}
			var out []gonvml.ComputeInstance
			for _, ci := range gi.sortedCIs() {
				if ciProfileID(ci.enum) == info.Id {
					out = append(out, ci.ci)
				}
			}
			return out, gonvml.SUCCESS
		},
		CreateComputeInstanceFunc: func(info *gonvml.ComputeInstanceProfileInfo) (gonvml.ComputeInstance, gonvml.Return) {
			g.mu.Lock()
			defer g.mu.Unlock()
			ci, ret := g.createCI(gi, info.Id)
			if ret != gonvml.SUCCESS {
				return nil, ret
			}
			return ci.ci, ret
		},
		GetComputeInstanceByIdFunc: func(id int) (gonvml.ComputeInstance, gonvml.Return) {
			g.mu.Lock()
			defer g.mu.Unlock()
			ci, ok := gi.cis[uint32(id)]
			if !ok {
				return nil, gonvml.ERROR_NOT_FOUND
			}
			return ci.ci, gonvml.SUCCESS
		},
		DestroyFunc: func() gonvml.Return {
			g.mu.Lock()
			defer g.mu.Unlock()
			if len(gi.cis) > 0 {
				return gonvml.ERROR_IN_USE
			}
			delete(g.gis, gi.id)
			return gonvml.SUCCESS
		},
	}
}

// seed creates a GPU instance of a profile (GPU_INSTANCE_PROFILE_*) at a
// start and, if withCI, one compute instance filling it; it returns the
// GPU instance.
func (g *fakeGPU) seed(enum int, start uint32, withCI bool) *fakeGI {
	g.mu.Lock()
	defer g.mu.Unlock()
	p, ok := g.profileByEnum(enum)
	if !ok {
		panic(fmt.Sprintf("fake GPU: no profile %d", enum))
	}
	gi, ret := g.createGI(p.id, gonvml.GpuInstancePlacement{Start: start, Size: p.size})
	if ret != gonvml.SUCCESS {
		panic(fmt.Sprintf("fake GPU: seed profile %d at %d: %v", enum, start, ret))
	}
	if withCI {
		for e, s := range ciSliceTable() {
			if s == p.slices {
				if _, ret := g.createCI(gi, ciProfileID(e)); ret != gonvml.SUCCESS {
					panic(fmt.Sprintf("fake GPU: seed compute instance: %v", ret))
				}
			}
		}
	}
	return gi
}

// fakeLib is a go-nvml Interface over fake GPUs.
func fakeLib(gpus ...*fakeGPU) *mock.Interface {
	return &mock.Interface{
		InitFunc:           func() gonvml.Return { return gonvml.SUCCESS },
		ShutdownFunc:       func() gonvml.Return { return gonvml.SUCCESS },
		DeviceGetCountFunc: func() (int, gonvml.Return) { return len(gpus), gonvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (gonvml.Device, gonvml.Return) {
			if i < 0 || i >= len(gpus) {
				return nil, gonvml.ERROR_INVALID_ARGUMENT
			}
			return gpus[i].dev, gonvml.SUCCESS
		},
		SystemGetProcessNameFunc: func(pid int) (string, gonvml.Return) {
			for _, g := range gpus {
				g.mu.Lock()
				name, ok := g.names[uint32(pid)]
				g.mu.Unlock()
				if ok {
					return name, gonvml.SUCCESS
				}
			}
			return "", gonvml.ERROR_NOT_FOUND
		},
	}
}

// processInfos is what NVML lists for processes of these PIDs.
func processInfos(pids []uint32) []gonvml.ProcessInfo {
	var ps []gonvml.ProcessInfo
	for _, pid := range pids {
		ps = append(ps, gonvml.ProcessInfo{Pid: pid})
	}
	return ps
}
