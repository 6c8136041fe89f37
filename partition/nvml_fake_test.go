//go:build cgo

package partition

import (
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// A fake GPU for the NVML tests, built from go-nvml's mocks. Unlike the
// mock servers of go-nvml (whose profile IDs equal the
// GPU_INSTANCE_PROFILE_* values), it behaves like the hardware: NVML's
// profile IDs (info.Id, 19 for 1g.10gb) differ from the values profiles
// are read with, placements and counts are enforced, and a GPU instance
// with compute instances cannot be destroyed.

// nvmlFakeProfile is one GPU instance profile of a fake GPU.
type nvmlFakeProfile struct {
	enum   int    // nvml.GPU_INSTANCE_PROFILE_*
	id     uint32 // NVML's profile ID
	slices uint32
	count  uint32
	memMB  uint64
	name   string // the V2 name
	size   uint32
	starts []uint32
}

// nvmlH100Profiles are an H100 80GB HBM3's profiles as NVML reported them on
// one (driver 580): IDs, names, counts, memory sizes and placements.
func nvmlH100Profiles() []nvmlFakeProfile {
	return []nvmlFakeProfile{
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, 19, 1, 7, 9984, "MIG 1g.10gb", 1, []uint32{0, 1, 2, 3, 4, 5, 6}},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, 20, 1, 1, 9984, "MIG 1g.10gb+me", 1, []uint32{0, 1, 2, 3, 4, 5, 6}},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, 15, 1, 4, 20096, "MIG 1g.20gb", 2, []uint32{0, 2, 4, 6}},
		{nvml.GPU_INSTANCE_PROFILE_2_SLICE, 14, 2, 3, 20096, "MIG 2g.20gb", 2, []uint32{0, 2, 4}},
		{nvml.GPU_INSTANCE_PROFILE_3_SLICE, 9, 3, 2, 40448, "MIG 3g.40gb", 4, []uint32{0, 4}},
		{nvml.GPU_INSTANCE_PROFILE_4_SLICE, 5, 4, 1, 40448, "MIG 4g.40gb", 4, []uint32{0}},
		{nvml.GPU_INSTANCE_PROFILE_7_SLICE, 0, 7, 1, 81152, "MIG 7g.80gb", 8, []uint32{0}},
	}
}

// nvmlCISliceTable maps the compute instance profiles the fake knows to their
// slices; a GPU instance supports those that fit it.
func nvmlCISliceTable() map[int]uint32 {
	return map[int]uint32{
		nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE: 1,
		nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE: 2,
		nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE: 3,
		nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE: 4,
		nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE: 7,
	}
}

// nvmlCIProfileID is the fake's NVML ID of a compute instance profile, made to
// differ from the COMPUTE_INSTANCE_PROFILE_* value.
func nvmlCIProfileID(enum int) uint32 { return uint32(100 + enum) }

type nvmlFakeGPU struct {
	mu       sync.Mutex
	index    int
	uuid     string
	name     string
	busID    string
	memBytes uint64
	migCur   int
	migPend  int
	noMIG    bool
	profiles []nvmlFakeProfile
	gis      map[uint32]*nvmlFakeGI
	nextGI   uint32
	procs    []uint32       // processes on the whole GPU
	nvlinks  map[int]string // enabled link -> remote bus ID
	offLinks map[int]string // disabled link -> remote bus ID
	links    int            // links the GPU has; 0: no NVLink

	dev *mock.Device
}

type nvmlFakeGI struct {
	id        uint32
	prof      nvmlFakeProfile
	placement nvml.GpuInstancePlacement
	cis       map[uint32]*nvmlFakeCI
	nextCI    uint32
	gi        *mock.GpuInstance
}

type nvmlFakeCI struct {
	id     uint32
	enum   int
	slices uint32
	uuid   string
	procs  []uint32
	ci     *mock.ComputeInstance
}

// newNVMLFakeGPU returns an H100 80GB in MIG mode with no instances.
func newNVMLFakeGPU(index int) *nvmlFakeGPU {
	g := &nvmlFakeGPU{
		index:    index,
		uuid:     fmt.Sprintf("GPU-0000000%d-aaaa-bbbb-cccc-dddddddddddd", index),
		name:     "NVIDIA H100 80GB HBM3",
		busID:    fmt.Sprintf("00000000:%02X:00.0", 0x18+index),
		memBytes: 81559 << 20,
		migCur:   nvml.DEVICE_MIG_ENABLE,
		migPend:  nvml.DEVICE_MIG_ENABLE,
		profiles: nvmlH100Profiles(),
		gis:      map[uint32]*nvmlFakeGI{},
		nextGI:   1,
		nvlinks:  map[int]string{},
		offLinks: map[int]string{},
		links:    18,
	}
	g.dev = g.newDevice()
	return g
}

func nvmlSetCString(dst []int8, s string) {
	for i := range dst {
		dst[i] = 0
	}
	for i := 0; i < len(s) && i < len(dst)-1; i++ {
		dst[i] = int8(s[i])
	}
}

func nvmlPciInfo(busID string) nvml.PciInfo {
	var p nvml.PciInfo
	nvmlSetCString(p.BusId[:], busID)
	return p
}

func (g *nvmlFakeGPU) profileByEnum(enum int) (nvmlFakeProfile, bool) {
	for _, p := range g.profiles {
		if p.enum == enum {
			return p, true
		}
	}
	return nvmlFakeProfile{}, false
}

func (g *nvmlFakeGPU) profileByID(id uint32) (nvmlFakeProfile, bool) {
	for _, p := range g.profiles {
		if p.id == id {
			return p, true
		}
	}
	return nvmlFakeProfile{}, false
}

func (p nvmlFakeProfile) info() nvml.GpuInstanceProfileInfo {
	return nvml.GpuInstanceProfileInfo{Id: p.id, SliceCount: p.slices, InstanceCount: p.count, MemorySizeMB: p.memMB}
}

// nvmlFakeProfileInfoV2 is a WithProfileInfoV2 reader for fake GPUs.
func nvmlFakeProfileInfoV2(gpus ...*nvmlFakeGPU) func(nvml.Device, int) (nvml.GpuInstanceProfileInfo_v2, nvml.Return) {
	return func(dev nvml.Device, enum int) (nvml.GpuInstanceProfileInfo_v2, nvml.Return) {
		for _, g := range gpus {
			if g.dev != dev {
				continue
			}
			info, ret := g.dev.GetGpuInstanceProfileInfo(enum)
			if ret != nvml.SUCCESS {
				return nvml.GpuInstanceProfileInfo_v2{}, ret
			}
			p, _ := g.profileByEnum(enum)
			v2 := nvml.GpuInstanceProfileInfo_v2{Version: 2, Id: info.Id, SliceCount: info.SliceCount,
				InstanceCount: info.InstanceCount, MemorySizeMB: info.MemorySizeMB}
			nvmlSetCString(v2.Name[:], p.name)
			return v2, nvml.SUCCESS
		}
		return nvml.GpuInstanceProfileInfo_v2{}, nvml.ERROR_INVALID_ARGUMENT
	}
}

func (g *nvmlFakeGPU) newDevice() *mock.Device {
	return &mock.Device{
		GetUUIDFunc:       func() (string, nvml.Return) { return g.uuid, nvml.SUCCESS },
		GetNameFunc:       func() (string, nvml.Return) { return g.name, nvml.SUCCESS },
		GetPciInfoFunc:    func() (nvml.PciInfo, nvml.Return) { return nvmlPciInfo(g.busID), nvml.SUCCESS },
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: g.memBytes}, nvml.SUCCESS },
		GetMigModeFunc: func() (int, int, nvml.Return) {
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.noMIG {
				return 0, 0, nvml.ERROR_NOT_SUPPORTED
			}
			return g.migCur, g.migPend, nvml.SUCCESS
		},
		SetMigModeFunc: func(mode int) (nvml.Return, nvml.Return) {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.migPend = mode
			return nvml.ERROR_RESET_REQUIRED, nvml.SUCCESS
		},
		GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
			g.mu.Lock()
			defer g.mu.Unlock()
			var ps []nvml.ProcessInfo
			for _, pid := range g.procs {
				ps = append(ps, nvml.ProcessInfo{Pid: pid})
			}
			return ps, nvml.SUCCESS
		},
		GetGraphicsRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS },
		GetGpuInstanceProfileInfoFunc: func(enum int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
			g.mu.Lock()
			defer g.mu.Unlock()
			if enum < 0 || enum >= nvml.GPU_INSTANCE_PROFILE_COUNT {
				return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_INVALID_ARGUMENT
			}
			p, ok := g.profileByEnum(enum)
			if !ok || g.noMIG || g.migCur != nvml.DEVICE_MIG_ENABLE {
				return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
			}
			return p.info(), nvml.SUCCESS
		},
		GetGpuInstancePossiblePlacementsFunc: func(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
			p, ok := g.profileByID(info.Id)
			if !ok {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			var pls []nvml.GpuInstancePlacement
			for _, s := range slices.Backward(p.starts) { // NVML's order is not promised
				pls = append(pls, nvml.GpuInstancePlacement{Start: s, Size: p.size})
			}
			return pls, nvml.SUCCESS
		},
		GetGpuInstancesFunc: func(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstance, nvml.Return) {
			g.mu.Lock()
			defer g.mu.Unlock()
			if _, ok := g.profileByID(info.Id); !ok || info.InstanceCount == 0 {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			var out []nvml.GpuInstance
			for _, gi := range g.sortedGIs() {
				if gi.prof.id == info.Id {
					out = append(out, gi.gi)
				}
			}
			return out, nvml.SUCCESS
		},
		CreateGpuInstanceWithPlacementFunc: func(info *nvml.GpuInstanceProfileInfo, pl *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
			g.mu.Lock()
			defer g.mu.Unlock()
			gi, ret := g.createGI(info.Id, *pl)
			if ret != nvml.SUCCESS {
				return nil, ret
			}
			return gi.gi, ret
		},
		GetGpuInstanceByIdFunc: func(id int) (nvml.GpuInstance, nvml.Return) {
			g.mu.Lock()
			defer g.mu.Unlock()
			gi, ok := g.gis[uint32(id)]
			if !ok {
				return nil, nvml.ERROR_NOT_FOUND
			}
			return gi.gi, nvml.SUCCESS
		},
		GetMaxMigDeviceCountFunc: func() (int, nvml.Return) { return 8, nvml.SUCCESS },
		GetMigDeviceHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			g.mu.Lock()
			defer g.mu.Unlock()
			// Slot 0 stays empty so callers must skip empty slots.
			var cis []*nvmlFakeCI
			var giIDs []uint32
			for _, gi := range g.sortedGIs() {
				for _, ci := range gi.sortedCIs() {
					cis, giIDs = append(cis, ci), append(giIDs, gi.id)
				}
			}
			if i < 1 || i > len(cis) {
				return nil, nvml.ERROR_NOT_FOUND
			}
			return g.migDevice(giIDs[i-1], cis[i-1]), nvml.SUCCESS
		},
		GetTopologyCommonAncestorFunc: func(other nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
			return nvml.TOPOLOGY_HOSTBRIDGE, nvml.SUCCESS
		},
		GetNvLinkStateFunc: func(link int) (nvml.EnableState, nvml.Return) {
			switch {
			case g.links == 0:
				return 0, nvml.ERROR_NOT_SUPPORTED
			case link >= g.links:
				return 0, nvml.ERROR_INVALID_ARGUMENT
			case g.nvlinks[link] != "":
				return nvml.FEATURE_ENABLED, nvml.SUCCESS
			}
			return nvml.FEATURE_DISABLED, nvml.SUCCESS
		},
		GetNvLinkRemotePciInfoFunc: func(link int) (nvml.PciInfo, nvml.Return) {
			if id := g.nvlinks[link]; id != "" {
				return nvmlPciInfo(id), nvml.SUCCESS
			}
			if id := g.offLinks[link]; id != "" {
				return nvmlPciInfo(id), nvml.SUCCESS
			}
			return nvml.PciInfo{}, nvml.ERROR_NOT_SUPPORTED
		},
		RegisterEventsFunc: func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS },
	}
}

// migDevice is the MIG device handle of a compute instance; g.mu is held.
func (g *nvmlFakeGPU) migDevice(giID uint32, ci *nvmlFakeCI) *mock.Device {
	procs := slices.Clone(ci.procs)
	return &mock.Device{
		GetGpuInstanceIdFunc:     func() (int, nvml.Return) { return int(giID), nvml.SUCCESS },
		GetComputeInstanceIdFunc: func() (int, nvml.Return) { return int(ci.id), nvml.SUCCESS },
		GetUUIDFunc:              func() (string, nvml.Return) { return ci.uuid, nvml.SUCCESS },
		GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
			var ps []nvml.ProcessInfo
			for _, pid := range procs {
				ps = append(ps, nvml.ProcessInfo{Pid: pid})
			}
			return ps, nvml.SUCCESS
		},
		GetGraphicsRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED },
	}
}

func (g *nvmlFakeGPU) sortedGIs() []*nvmlFakeGI {
	out := make([]*nvmlFakeGI, 0, len(g.gis))
	for _, gi := range g.gis {
		out = append(out, gi)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

func (gi *nvmlFakeGI) sortedCIs() []*nvmlFakeCI {
	out := make([]*nvmlFakeCI, 0, len(gi.cis))
	for _, ci := range gi.cis {
		out = append(out, ci)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// createGI creates a GPU instance as NVML would; g.mu is held.
func (g *nvmlFakeGPU) createGI(profileID uint32, pl nvml.GpuInstancePlacement) (*nvmlFakeGI, nvml.Return) {
	p, ok := g.profileByID(profileID)
	if !ok || pl.Size != p.size || !slices.Contains(p.starts, pl.Start) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	n := 0
	for _, gi := range g.gis {
		if gi.prof.id == p.id {
			n++
		}
		if pl.Start < gi.placement.Start+gi.placement.Size && gi.placement.Start < pl.Start+pl.Size {
			return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
		}
	}
	if uint32(n) >= p.count {
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	gi := &nvmlFakeGI{id: g.nextGI, prof: p, placement: pl, cis: map[uint32]*nvmlFakeCI{}}
	g.nextGI++
	gi.gi = g.newGpuInstance(gi)
	g.gis[gi.id] = gi
	return gi, nvml.SUCCESS
}

// createCI creates a compute instance as NVML would; g.mu is held.
func (g *nvmlFakeGPU) createCI(gi *nvmlFakeGI, profileID uint32) (*nvmlFakeCI, nvml.Return) {
	ciSlices := nvmlCISliceTable()
	enum := -1
	for e := range ciSlices {
		if nvmlCIProfileID(e) == profileID {
			enum = e
		}
	}
	if enum < 0 || ciSlices[enum] > gi.prof.slices {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	used := uint32(0)
	for _, ci := range gi.cis {
		used += ci.slices
	}
	if used+ciSlices[enum] > gi.prof.slices {
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	ci := &nvmlFakeCI{id: gi.nextCI, enum: enum, slices: ciSlices[enum],
		uuid: fmt.Sprintf("MIG-%d-%d-%d", g.index, gi.id, gi.nextCI)}
	gi.nextCI++
	ci.ci = &mock.ComputeInstance{
		GetInfoFunc: func() (nvml.ComputeInstanceInfo, nvml.Return) {
			return nvml.ComputeInstanceInfo{Device: g.dev, GpuInstance: gi.gi, Id: ci.id, ProfileId: nvmlCIProfileID(ci.enum)}, nvml.SUCCESS
		},
		DestroyFunc: func() nvml.Return {
			g.mu.Lock()
			defer g.mu.Unlock()
			if len(ci.procs) > 0 {
				return nvml.ERROR_IN_USE
			}
			delete(gi.cis, ci.id)
			return nvml.SUCCESS
		},
	}
	gi.cis[ci.id] = ci
	return ci, nvml.SUCCESS
}

func (g *nvmlFakeGPU) newGpuInstance(gi *nvmlFakeGI) *mock.GpuInstance {
	return &mock.GpuInstance{
		GetInfoFunc: func() (nvml.GpuInstanceInfo, nvml.Return) {
			return nvml.GpuInstanceInfo{Device: g.dev, Id: gi.id, ProfileId: gi.prof.id, Placement: gi.placement}, nvml.SUCCESS
		},
		GetComputeInstanceProfileInfoFunc: func(enum, eng int) (nvml.ComputeInstanceProfileInfo, nvml.Return) {
			if enum < 0 || enum >= nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
				return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_INVALID_ARGUMENT
			}
			s, ok := nvmlCISliceTable()[enum]
			if eng != nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED || !ok || s > gi.prof.slices {
				return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
			}
			return nvml.ComputeInstanceProfileInfo{Id: nvmlCIProfileID(enum), SliceCount: s, InstanceCount: gi.prof.slices / s}, nvml.SUCCESS
		},
		GetComputeInstancesFunc: func(info *nvml.ComputeInstanceProfileInfo) ([]nvml.ComputeInstance, nvml.Return) {
			g.mu.Lock()
			defer g.mu.Unlock()
			if info.InstanceCount == 0 {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			var out []nvml.ComputeInstance
			for _, ci := range gi.sortedCIs() {
				if nvmlCIProfileID(ci.enum) == info.Id {
					out = append(out, ci.ci)
				}
			}
			return out, nvml.SUCCESS
		},
		CreateComputeInstanceFunc: func(info *nvml.ComputeInstanceProfileInfo) (nvml.ComputeInstance, nvml.Return) {
			g.mu.Lock()
			defer g.mu.Unlock()
			ci, ret := g.createCI(gi, info.Id)
			if ret != nvml.SUCCESS {
				return nil, ret
			}
			return ci.ci, ret
		},
		GetComputeInstanceByIdFunc: func(id int) (nvml.ComputeInstance, nvml.Return) {
			g.mu.Lock()
			defer g.mu.Unlock()
			ci, ok := gi.cis[uint32(id)]
			if !ok {
				return nil, nvml.ERROR_NOT_FOUND
			}
			return ci.ci, nvml.SUCCESS
		},
		DestroyFunc: func() nvml.Return {
			g.mu.Lock()
			defer g.mu.Unlock()
			if len(gi.cis) > 0 {
				return nvml.ERROR_IN_USE
			}
			delete(g.gis, gi.id)
			return nvml.SUCCESS
		},
	}
}

// seed creates a GPU instance of a profile (GPU_INSTANCE_PROFILE_*) at a
// start and, if withCI, one compute instance filling it; it returns the
// GPU instance.
func (g *nvmlFakeGPU) seed(enum int, start uint32, withCI bool) *nvmlFakeGI {
	g.mu.Lock()
	defer g.mu.Unlock()
	p, ok := g.profileByEnum(enum)
	if !ok {
		panic(fmt.Sprintf("fake GPU: no profile %d", enum))
	}
	gi, ret := g.createGI(p.id, nvml.GpuInstancePlacement{Start: start, Size: p.size})
	if ret != nvml.SUCCESS {
		panic(fmt.Sprintf("fake GPU: seed profile %d at %d: %v", enum, start, ret))
	}
	if withCI {
		for e, s := range nvmlCISliceTable() {
			if s == p.slices {
				if _, ret := g.createCI(gi, nvmlCIProfileID(e)); ret != nvml.SUCCESS {
					panic(fmt.Sprintf("fake GPU: seed compute instance: %v", ret))
				}
			}
		}
	}
	return gi
}

// nvmlFakeLib is a go-nvml Interface over fake GPUs.
func nvmlFakeLib(gpus ...*nvmlFakeGPU) *mock.Interface {
	return &mock.Interface{
		InitFunc:           func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:       func() nvml.Return { return nvml.SUCCESS },
		DeviceGetCountFunc: func() (int, nvml.Return) { return len(gpus), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(gpus) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return gpus[i].dev, nvml.SUCCESS
		},
	}
}
