//go:build cgo

package partition

import (
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nvmlProfileInfoV2Func reads version 2 of a GPU instance profile's info, which
// adds the profile's name. profile is one of nvml.GPU_INSTANCE_PROFILE_*.
type nvmlProfileInfoV2Func = func(dev nvml.Device, profile int) (nvml.GpuInstanceProfileInfo_v2, nvml.Return)

// WithProfileInfoV2 makes GPUInstanceProfiles read each profile through
// read (version 2 of the profile info) and name the profile after the info's
// Name field ("MIG 1g.10gb" becomes "1g.10gb"). NewNVML uses go-nvml's
// GetGpuInstanceProfileInfoV(...).V2() when the driver has that call;
// NewNVMLFrom uses nothing unless told, because V2 on a mock device would
// call into the real library. Without it, names come from ProfileName.
func WithProfileInfoV2(read func(dev nvml.Device, profile int) (nvml.GpuInstanceProfileInfo_v2, nvml.Return)) NVMLOption {
	return func(o *nvmlOptions) { o.profileInfoV2 = read }
}

// NewNVML returns the NVML implementation over the system's NVML library
// (libnvidia-ml.so.1, through go-nvml). Without an NVIDIA driver its Init
// returns an error wrapping ErrLibraryNotFound.
func NewNVML(opts ...NVMLOption) NVML {
	l := newNVMLLib(nvml.New(), opts)
	l.real = true
	return l
}

// NewNVMLFrom returns the NVML implementation over any go-nvml Interface,
// such as the mocks of github.com/NVIDIA/go-nvml/pkg/nvml/mock.
func NewNVMLFrom(lib nvml.Interface, opts ...NVMLOption) NVML {
	return newNVMLLib(lib, opts)
}

func newNVMLLib(lib nvml.Interface, opts []NVMLOption) *nvmlLib {
	return &nvmlLib{lib: lib, opts: buildNVMLOptions(opts)}
}

// nvmlProfileInfoVSymbol is the C symbol behind GetGpuInstanceProfileInfoV; old
// drivers lack it, and calling a missing symbol would crash.
const nvmlProfileInfoVSymbol = "nvmlDeviceGetGpuInstanceProfileInfoV"

// nvmlLib implements NVML over go-nvml.
//
// NVML must not be called before Init or after the last Shutdown: go-nvml
// would call into a library that is not loaded. So every call takes mu for
// reading and checks refs; Init and Shutdown take it for writing. Handles
// carry the session (gen) they came from and fail once it has ended.
type nvmlLib struct {
	lib  nvml.Interface
	opts nvmlOptions
	// real marks the system library: V2 profile info is used where the
	// driver has it.
	real bool

	mu   sync.RWMutex
	refs int    // successful Inits not yet matched by a Shutdown
	gen  uint64 // counts sessions (refs going from 0 to 1)
	v2   nvmlProfileInfoV2Func
}

// Init opens NVML. Calls are counted: each successful Init needs its own
// Shutdown, as with NVML itself.
func (l *nvmlLib) Init() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ret := l.lib.Init(); ret != nvml.SUCCESS {
		return nvmlError(ret, "initialize NVML")
	}
	if l.refs == 0 {
		l.gen++
		l.v2 = l.opts.profileInfoV2
		if l.v2 == nil && l.real && l.lib.Extensions().LookupSymbol(nvmlProfileInfoVSymbol) == nil {
			l.v2 = nvmlSystemProfileInfoV2
		}
	}
	l.refs++
	return nil
}

func nvmlSystemProfileInfoV2(dev nvml.Device, profile int) (nvml.GpuInstanceProfileInfo_v2, nvml.Return) {
	return dev.GetGpuInstanceProfileInfoV(profile).V2()
}

// Shutdown closes NVML once every Init has been matched.
func (l *nvmlLib) Shutdown() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refs == 0 {
		return fmt.Errorf("shut down NVML: %w", ErrUninitialized)
	}
	if ret := l.lib.Shutdown(); ret != nvml.SUCCESS {
		return nvmlError(ret, "shut down NVML")
	}
	l.refs--
	return nil
}

// enter takes the read lock for one call of session gen (0: the current
// one). It fails, holding nothing, when NVML is not open or the session
// ended.
func (l *nvmlLib) enter(gen uint64, what string) (release func(), err error) {
	l.mu.RLock()
	switch {
	case l.refs == 0:
		l.mu.RUnlock()
		return nil, fmt.Errorf("%s: %w", what, ErrUninitialized)
	case gen != 0 && gen != l.gen:
		l.mu.RUnlock()
		return nil, fmt.Errorf("%s: handle from an NVML session that was shut down: %w", what, ErrUninitialized)
	}
	return l.mu.RUnlock, nil
}

// DeviceCount returns the number of GPUs.
func (l *nvmlLib) DeviceCount() (int, error) {
	release, err := l.enter(0, "count GPUs")
	if err != nil {
		return 0, err
	}
	defer release()
	n, ret := l.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return 0, nvmlError(ret, "count GPUs")
	}
	return n, nil
}

// Device returns the GPU at an index.
func (l *nvmlLib) Device(index int) (Device, error) {
	what := fmt.Sprintf("GPU %d: get handle", index)
	release, err := l.enter(0, what)
	if err != nil {
		return nil, err
	}
	defer release()
	h, ret := l.lib.DeviceGetHandleByIndex(index)
	if ret != nvml.SUCCESS {
		return nil, nvmlError(ret, "%s", what)
	}
	return &nvmlDevice{l: l, gen: l.gen, index: index, dev: h}, nil
}

// Topology tells how closely two GPUs are connected: their PCIe common
// ancestor and the NVLinks of a that end at b.
func (l *nvmlLib) Topology(a, b int) (Link, error) {
	what := fmt.Sprintf("GPU %d and GPU %d: topology", a, b)
	release, err := l.enter(0, what)
	if err != nil {
		return Link{}, err
	}
	defer release()
	da, ret := l.lib.DeviceGetHandleByIndex(a)
	if ret != nvml.SUCCESS {
		return Link{}, nvmlError(ret, "%s: GPU %d", what, a)
	}
	db, ret := l.lib.DeviceGetHandleByIndex(b)
	if ret != nvml.SUCCESS {
		return Link{}, nvmlError(ret, "%s: GPU %d", what, b)
	}
	if a == b {
		return Link{PCIe: int(nvml.TOPOLOGY_INTERNAL)}, nil
	}
	level, ret := da.GetTopologyCommonAncestor(db)
	if ret != nvml.SUCCESS {
		return Link{}, nvmlError(ret, "%s: common ancestor", what)
	}
	busB, err := nvmlPCIBusID(db)
	if err != nil {
		return Link{}, fmt.Errorf("%s: GPU %d: %w", what, b, err)
	}
	links := 0
	for link := range nvml.NVLINK_MAX_LINKS {
		state, ret := da.GetNvLinkState(link)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_INVALID_ARGUMENT:
			continue // no NVLink, or no such link on this GPU
		default:
			return Link{}, nvmlError(ret, "%s: NVLink %d state", what, link)
		}
		if state != nvml.FEATURE_ENABLED {
			continue
		}
		remote, ret := da.GetNvLinkRemotePciInfo(link)
		if ret != nvml.SUCCESS {
			return Link{}, nvmlError(ret, "%s: NVLink %d remote", what, link)
		}
		if nvmlSameBusID(nvmlBusID(remote), busB) {
			links++
		}
	}
	return Link{NVLinks: links, PCIe: int(level)}, nil
}

// WatchXIDs registers the GPUs for critical XID events.
func (l *nvmlLib) WatchXIDs(indexes []int) (EventSet, error) {
	release, err := l.enter(0, "watch XIDs")
	if err != nil {
		return nil, err
	}
	defer release()
	set, ret := l.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return nil, nvmlError(ret, "watch XIDs: create event set")
	}
	es := &nvmlEventSet{l: l, gen: l.gen, set: set}
	for _, i := range indexes {
		h, ret := l.lib.DeviceGetHandleByIndex(i)
		if ret == nvml.SUCCESS {
			var uuid string
			if uuid, ret = h.GetUUID(); ret == nvml.SUCCESS {
				es.devices = append(es.devices, nvmlWatchedDevice{dev: h, uuid: uuid})
				ret = h.RegisterEvents(nvml.EventTypeXidCriticalError, set)
			}
		}
		if ret != nvml.SUCCESS {
			_ = set.Free()
			return nil, nvmlError(ret, "watch XIDs: GPU %d", i)
		}
	}
	return es, nil
}

// nvmlEventSet implements EventSet.
type nvmlEventSet struct {
	l       *nvmlLib
	gen     uint64
	set     nvml.EventSet
	devices []nvmlWatchedDevice

	mu     sync.Mutex // one Wait or Close at a time
	closed bool
}

type nvmlWatchedDevice struct {
	dev  nvml.Device
	uuid string
}

// nvmlNoInstance is what NVML reports as the GPU or compute instance ID of an
// event that hit the whole GPU.
const nvmlNoInstance = math.MaxUint32

// Wait waits for the next XID event. It holds NVML open while it waits, so
// a Shutdown waits for it.
func (s *nvmlEventSet) Wait(timeout time.Duration) (XIDEvent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return XIDEvent{}, fmt.Errorf("wait for XID events: %w", os.ErrClosed)
	}
	release, err := s.l.enter(s.gen, "wait for XID events")
	if err != nil {
		return XIDEvent{}, err
	}
	defer release()
	ms := min(max(timeout.Milliseconds(), 0), math.MaxUint32)
	ev, ret := s.set.Wait(uint32(ms))
	if ret != nvml.SUCCESS {
		return XIDEvent{}, nvmlError(ret, "wait for XID events")
	}
	x := XIDEvent{XID: ev.EventData, GIID: nvmlInstanceID(ev.GpuInstanceId), CIID: nvmlInstanceID(ev.ComputeInstanceId), Time: time.Now()}
	for _, d := range s.devices {
		if d.dev == ev.Device {
			x.UUID = d.uuid
			break
		}
	}
	if x.UUID == "" && ev.Device != nil {
		uuid, ret := ev.Device.GetUUID()
		if ret != nvml.SUCCESS {
			return x, nvmlError(ret, "XID %d: UUID of the GPU", ev.EventData)
		}
		x.UUID = uuid
	}
	return x, nil
}

func nvmlInstanceID(id uint32) int {
	if id == nvmlNoInstance {
		return -1
	}
	return int(id)
}

// Close frees the event set; closing twice is harmless.
func (s *nvmlEventSet) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	release, err := s.l.enter(s.gen, "close XID event set")
	if err != nil {
		return err
	}
	defer release()
	s.closed = true
	if ret := s.set.Free(); ret != nvml.SUCCESS {
		return nvmlError(ret, "close XID event set")
	}
	return nil
}

// nvmlDevice implements Device over a go-nvml device handle.
type nvmlDevice struct {
	l     *nvmlLib
	gen   uint64
	index int
	dev   nvml.Device
}

// enter starts one call on the device; what names it in errors.
func (d *nvmlDevice) enter(what string) (func(), error) {
	return d.l.enter(d.gen, fmt.Sprintf("GPU %d: %s", d.index, what))
}

// err wraps a failed NVML call on the device.
func (d *nvmlDevice) err(ret nvml.Return, format string, args ...any) error {
	return nvmlError(ret, "GPU %d: %s", d.index, fmt.Sprintf(format, args...))
}

// Index is the GPU's NVML index.
func (d *nvmlDevice) Index() int { return d.index }

// nvmlGet runs one NVML getter on the device, inside enter/release.
func nvmlGet[T any](d *nvmlDevice, what string, get func() (T, nvml.Return)) (T, error) {
	var zero T
	release, err := d.enter(what)
	if err != nil {
		return zero, err
	}
	defer release()
	v, ret := get()
	if ret != nvml.SUCCESS {
		return zero, d.err(ret, "%s", what)
	}
	return v, nil
}

// UUID returns the GPU's UUID.
func (d *nvmlDevice) UUID() (string, error) { return nvmlGet(d, "UUID", d.dev.GetUUID) }

// Name returns the product name.
func (d *nvmlDevice) Name() (string, error) { return nvmlGet(d, "name", d.dev.GetName) }

// PCIBusID returns the PCI bus ID, e.g. "00000000:07:00.0".
func (d *nvmlDevice) PCIBusID() (string, error) {
	release, err := d.enter("PCI bus ID")
	if err != nil {
		return "", err
	}
	defer release()
	id, err := nvmlPCIBusID(d.dev)
	if err != nil {
		return "", fmt.Errorf("GPU %d: %w", d.index, err)
	}
	return id, nil
}

// MemoryMiB returns the total memory.
func (d *nvmlDevice) MemoryMiB() (uint64, error) {
	release, err := d.enter("memory")
	if err != nil {
		return 0, err
	}
	defer release()
	mem, ret := d.dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return 0, d.err(ret, "memory")
	}
	return mem.Total >> 20, nil
}

// MIGMode returns the current and pending MIG mode.
func (d *nvmlDevice) MIGMode() (current, pending MIGMode, err error) {
	release, err := d.enter("MIG mode")
	if err != nil {
		return 0, 0, err
	}
	defer release()
	cur, pend, ret := d.dev.GetMigMode()
	if ret != nvml.SUCCESS {
		return 0, 0, d.err(ret, "MIG mode")
	}
	return nvmlMIGMode(cur), nvmlMIGMode(pend), nil
}

func nvmlMIGMode(m int) MIGMode {
	if m == nvml.DEVICE_MIG_ENABLE {
		return MIGEnabled
	}
	return MIGDisabled
}

// SetMIGMode sets the pending MIG mode. NVML's activation status, which
// says whether a reset is still needed, is not an error: the pending mode
// is what this call sets.
func (d *nvmlDevice) SetMIGMode(mode MIGMode) error {
	what := fmt.Sprintf("set MIG mode %s", mode)
	if mode != MIGEnabled && mode != MIGDisabled {
		return fmt.Errorf("GPU %d: set MIG mode %d: %w", d.index, int(mode), ErrInvalidArgument)
	}
	release, err := d.enter(what)
	if err != nil {
		return err
	}
	defer release()
	nvmlMode := nvml.DEVICE_MIG_DISABLE
	if mode == MIGEnabled {
		nvmlMode = nvml.DEVICE_MIG_ENABLE
	}
	// go-nvml returns the activation status first and the call's result second.
	if _, ret := d.dev.SetMigMode(nvmlMode); ret != nvml.SUCCESS {
		return d.err(ret, "%s", what)
	}
	return nil
}

// Reset resets the GPU with nvidia-smi (NVML has no reset call).
func (d *nvmlDevice) Reset() error {
	busID, err := d.PCIBusID()
	if err != nil {
		return fmt.Errorf("GPU %d: reset: %w", d.index, err)
	}
	return nvmlResetGPU(d.l.opts, d.index, busID)
}

// Processes counts the distinct processes on the GPU and, in MIG mode, on
// its MIG devices.
func (d *nvmlDevice) Processes() (int, error) {
	release, err := d.enter("processes")
	if err != nil {
		return 0, err
	}
	defer release()
	pids := map[uint32]struct{}{}
	if err := d.addProcesses(d.dev, "processes", pids); err != nil {
		return 0, err
	}
	cur, _, ret := d.dev.GetMigMode()
	switch {
	case ret == nvml.ERROR_NOT_SUPPORTED:
		return len(pids), nil
	case ret != nvml.SUCCESS:
		return 0, d.err(ret, "processes: MIG mode")
	case cur != nvml.DEVICE_MIG_ENABLE:
		return len(pids), nil
	}
	err = d.eachMIGDevice(func(i int, mig nvml.Device) error {
		return d.addProcesses(mig, fmt.Sprintf("processes of MIG device %d", i), pids)
	})
	if err != nil {
		return 0, err
	}
	return len(pids), nil
}

func (d *nvmlDevice) addProcesses(dev nvml.Device, what string, pids map[uint32]struct{}) error {
	for _, list := range []struct {
		kind string
		get  func() ([]nvml.ProcessInfo, nvml.Return)
	}{
		{"compute", dev.GetComputeRunningProcesses},
		{"graphics", dev.GetGraphicsRunningProcesses},
	} {
		ps, ret := list.get()
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_NOT_SUPPORTED:
			continue
		default:
			return d.err(ret, "%s: %s", what, list.kind)
		}
		for _, p := range ps {
			pids[p.Pid] = struct{}{}
		}
	}
	return nil
}

// eachMIGDevice calls fn for every MIG device handle of the GPU.
func (d *nvmlDevice) eachMIGDevice(fn func(i int, mig nvml.Device) error) error {
	n, ret := d.dev.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return d.err(ret, "count MIG devices")
	}
	for i := range n {
		mig, ret := d.dev.GetMigDeviceHandleByIndex(i)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_NOT_FOUND, nvml.ERROR_INVALID_ARGUMENT:
			continue // an empty slot
		default:
			return d.err(ret, "MIG device %d", i)
		}
		if err := fn(i, mig); err != nil {
			return err
		}
	}
	return nil
}

// nvmlMIGKey names a MIG device by its GPU and compute instance.
type nvmlMIGKey struct{ gi, ci int }

// migUUIDs maps each MIG device's GI/CI pair to its UUID.
func (d *nvmlDevice) migUUIDs() (map[nvmlMIGKey]string, error) {
	uuids := map[nvmlMIGKey]string{}
	err := d.eachMIGDevice(func(i int, mig nvml.Device) error {
		gi, ret := mig.GetGpuInstanceId()
		if ret != nvml.SUCCESS {
			return d.err(ret, "MIG device %d: GPU instance ID", i)
		}
		ci, ret := mig.GetComputeInstanceId()
		if ret != nvml.SUCCESS {
			return d.err(ret, "MIG device %d: compute instance ID", i)
		}
		uuid, ret := mig.GetUUID()
		if ret != nvml.SUCCESS {
			return d.err(ret, "MIG device %d: UUID", i)
		}
		uuids[nvmlMIGKey{gi, ci}] = uuid
		return nil
	})
	return uuids, err
}

// nvmlGIProfile is one supported GPU instance profile as NVML reports it.
type nvmlGIProfile struct {
	// id is the nvml.GPU_INSTANCE_PROFILE_* value it was read with; info.Id
	// is NVML's own profile ID, which later calls take (nvidia-smi's -lgip
	// IDs: 19 for 1g.10gb on an H100) and which GPU instances report.
	id   int
	info nvml.GpuInstanceProfileInfo
	name string // from the V2 info, "" without it
}

// profiles reads every GPU instance profile the GPU supports. A GPU that
// supports none (no MIG, or MIG mode off) returns an error wrapping
// ErrNotSupported.
func (d *nvmlDevice) profiles() ([]nvmlGIProfile, error) {
	var ps []nvmlGIProfile
	for id := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		p, ret := d.profile(id)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_INVALID_ARGUMENT:
			continue
		default:
			return nil, d.err(ret, "GPU instance profile %d", id)
		}
		if p.info.InstanceCount == 0 {
			continue // go-nvml cannot list instances of a profile with no room
		}
		ps = append(ps, p)
	}
	if len(ps) == 0 {
		return nil, fmt.Errorf("GPU %d: no GPU instance profiles (no MIG support, or MIG mode disabled): %w", d.index, ErrNotSupported)
	}
	return ps, nil
}

// profile reads one profile, from the V2 info where available.
func (d *nvmlDevice) profile(id int) (nvmlGIProfile, nvml.Return) {
	if v2 := d.l.v2; v2 != nil {
		if info, ret := v2(d.dev, id); ret == nvml.SUCCESS {
			return nvmlGIProfile{id: id, name: nvmlCString(info.Name[:]), info: nvml.GpuInstanceProfileInfo{
				Id: info.Id, IsP2pSupported: info.IsP2pSupported, SliceCount: info.SliceCount,
				InstanceCount: info.InstanceCount, MultiprocessorCount: info.MultiprocessorCount,
				CopyEngineCount: info.CopyEngineCount, DecoderCount: info.DecoderCount,
				EncoderCount: info.EncoderCount, JpegCount: info.JpegCount, OfaCount: info.OfaCount,
				MemorySizeMB: info.MemorySizeMB,
			}}, ret
		}
	}
	info, ret := d.dev.GetGpuInstanceProfileInfo(id)
	return nvmlGIProfile{id: id, info: info}, ret
}

// nvmlProfileName names a profile: NVML's own name where known, else one built
// from its size with a suffix for the variants of the same size.
func nvmlProfileName(p nvmlGIProfile) string {
	me := nvmlMediaExtensions(p.id)
	if name := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(p.name), "MIG ")); name != "" {
		if me && !strings.Contains(name, "+me") {
			name += "+me"
		}
		return name
	}
	name := ProfileName(int(p.info.SliceCount), p.info.MemorySizeMB, me)
	switch p.id {
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_GFX, nvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX,
		nvml.GPU_INSTANCE_PROFILE_3_SLICE_GFX, nvml.GPU_INSTANCE_PROFILE_4_SLICE_GFX:
		name += "+gfx"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, nvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME:
		name += "-me"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME, nvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME:
		name += "+me.all"
	}
	return name
}

// nvmlMediaExtensions reports whether a profile is a "+me" one.
func nvmlMediaExtensions(id int) bool {
	return id == nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1 || id == nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1
}

// GPUInstanceProfiles lists the GPU instance profiles with their possible
// placements.
func (d *nvmlDevice) GPUInstanceProfiles() ([]GIProfile, error) {
	release, err := d.enter("GPU instance profiles")
	if err != nil {
		return nil, err
	}
	defer release()
	ps, err := d.profiles()
	if err != nil {
		return nil, err
	}
	out := make([]GIProfile, 0, len(ps))
	for _, p := range ps {
		pls, ret := d.dev.GetGpuInstancePossiblePlacements(&p.info)
		if ret != nvml.SUCCESS {
			return nil, d.err(ret, "placements of GPU instance profile %d", p.id)
		}
		gp := GIProfile{
			ID:              p.id,
			Name:            nvmlProfileName(p),
			ComputeSlices:   int(p.info.SliceCount),
			MemoryMiB:       p.info.MemorySizeMB,
			MaxCount:        int(p.info.InstanceCount),
			MediaExtensions: nvmlMediaExtensions(p.id),
			Placements:      make([]Placement, len(pls)),
		}
		for i, pl := range pls {
			gp.Placements[i] = Placement{Start: int(pl.Start), Size: int(pl.Size)}
			gp.MemorySlices = max(gp.MemorySlices, int(pl.Size))
		}
		sort.Slice(gp.Placements, func(i, j int) bool { return gp.Placements[i].Start < gp.Placements[j].Start })
		out = append(out, gp)
	}
	return out, nil
}

// GPUInstances lists the GPU instances, in placement order. Their
// ProfileID is the nvml.GPU_INSTANCE_PROFILE_* value, as in GIProfile.
func (d *nvmlDevice) GPUInstances() ([]GPUInstance, error) {
	release, err := d.enter("GPU instances")
	if err != nil {
		return nil, err
	}
	defer release()
	ps, err := d.profiles()
	if err != nil {
		return nil, err
	}
	var out []GPUInstance
	seen := map[int]bool{}
	for _, p := range ps {
		gis, ret := d.dev.GetGpuInstances(&p.info)
		if ret != nvml.SUCCESS {
			return nil, d.err(ret, "GPU instances of profile %d", p.id)
		}
		for _, gi := range gis {
			info, ret := gi.GetInfo()
			if ret != nvml.SUCCESS {
				return nil, d.err(ret, "GPU instance of profile %d: info", p.id)
			}
			if seen[int(info.Id)] {
				continue
			}
			seen[int(info.Id)] = true
			out = append(out, GPUInstance{ID: int(info.Id), ProfileID: p.id, Placement: nvmlPlacement(info.Placement)})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Placement.Start != out[j].Placement.Start {
			return out[i].Placement.Start < out[j].Placement.Start
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

func nvmlPlacement(p nvml.GpuInstancePlacement) Placement {
	return Placement{Start: int(p.Start), Size: int(p.Size)}
}

// CreateGPUInstance creates a GPU instance of a profile
// (nvml.GPU_INSTANCE_PROFILE_*) at a placement.
func (d *nvmlDevice) CreateGPUInstance(profileID int, at Placement) (GPUInstance, error) {
	what := fmt.Sprintf("create GPU instance (profile %d at %d:%d)", profileID, at.Start, at.Size)
	if profileID < 0 || at.Start < 0 || at.Size <= 0 {
		return GPUInstance{}, fmt.Errorf("GPU %d: %s: %w", d.index, what, ErrInvalidArgument)
	}
	release, err := d.enter(what)
	if err != nil {
		return GPUInstance{}, err
	}
	defer release()
	info, ret := d.dev.GetGpuInstanceProfileInfo(profileID)
	if ret != nvml.SUCCESS {
		return GPUInstance{}, d.err(ret, "%s: profile info", what)
	}
	gi, ret := d.dev.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: uint32(at.Start), Size: uint32(at.Size)})
	if ret != nvml.SUCCESS {
		return GPUInstance{}, d.err(ret, "%s", what)
	}
	gii, ret := gi.GetInfo()
	if ret != nvml.SUCCESS {
		return GPUInstance{}, d.err(ret, "%s: created, but reading it back failed", what)
	}
	return GPUInstance{ID: int(gii.Id), ProfileID: profileID, Placement: nvmlPlacement(gii.Placement)}, nil
}

// DestroyGPUInstance destroys a GPU instance.
func (d *nvmlDevice) DestroyGPUInstance(giID int) error {
	what := fmt.Sprintf("destroy GPU instance %d", giID)
	release, err := d.enter(what)
	if err != nil {
		return err
	}
	defer release()
	gi, err := d.gpuInstance(giID, what)
	if err != nil {
		return err
	}
	if ret := gi.Destroy(); ret != nvml.SUCCESS {
		return d.err(ret, "%s", what)
	}
	return nil
}

func (d *nvmlDevice) gpuInstance(giID int, what string) (nvml.GpuInstance, error) {
	if giID < 0 {
		return nil, fmt.Errorf("GPU %d: %s: %w", d.index, what, ErrInvalidArgument)
	}
	gi, ret := d.dev.GetGpuInstanceById(giID)
	if ret != nvml.SUCCESS {
		return nil, d.err(ret, "%s: find GPU instance", what)
	}
	return gi, nil
}

// nvmlCIProfile is one compute instance profile a GPU instance supports.
type nvmlCIProfile struct {
	id   int // nvml.COMPUTE_INSTANCE_PROFILE_*
	info nvml.ComputeInstanceProfileInfo
}

// ciProfiles reads the compute instance profiles (shared engines) a GPU
// instance supports.
func (d *nvmlDevice) ciProfiles(gi nvml.GpuInstance, what string) ([]nvmlCIProfile, error) {
	var ps []nvmlCIProfile
	for id := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		info, ret := gi.GetComputeInstanceProfileInfo(id, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_INVALID_ARGUMENT:
			continue
		default:
			return nil, d.err(ret, "%s: compute instance profile %d", what, id)
		}
		if info.InstanceCount > 0 {
			ps = append(ps, nvmlCIProfile{id: id, info: info})
		}
	}
	return ps, nil
}

// ComputeInstances lists a GPU instance's compute instances by ID, each
// with its MIG device UUID.
func (d *nvmlDevice) ComputeInstances(giID int) ([]ComputeInstance, error) {
	what := fmt.Sprintf("compute instances of GPU instance %d", giID)
	release, err := d.enter(what)
	if err != nil {
		return nil, err
	}
	defer release()
	gi, err := d.gpuInstance(giID, what)
	if err != nil {
		return nil, err
	}
	ps, err := d.ciProfiles(gi, what)
	if err != nil {
		return nil, err
	}
	var out []ComputeInstance
	seen := map[int]bool{}
	for _, p := range ps {
		cis, ret := gi.GetComputeInstances(&p.info)
		if ret != nvml.SUCCESS {
			return nil, d.err(ret, "%s: profile %d", what, p.id)
		}
		for _, ci := range cis {
			info, ret := ci.GetInfo()
			if ret != nvml.SUCCESS {
				return nil, d.err(ret, "%s: info", what)
			}
			if seen[int(info.Id)] {
				continue
			}
			seen[int(info.Id)] = true
			out = append(out, ComputeInstance{ID: int(info.Id), GIID: giID, ComputeSlices: int(p.info.SliceCount)})
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	uuids, err := d.migUUIDs()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	for i := range out {
		uuid, ok := uuids[nvmlMIGKey{giID, out[i].ID}]
		if !ok {
			return nil, fmt.Errorf("GPU %d: %s: no MIG device for compute instance %d: %w", d.index, what, out[i].ID, ErrNotFound)
		}
		out[i].UUID = uuid
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// CreateComputeInstance creates one compute instance that fills the GPU
// instance: the compute instance profile with as many slices as the GPU
// instance's profile, sharing its engines.
func (d *nvmlDevice) CreateComputeInstance(giID int) (ComputeInstance, error) {
	what := fmt.Sprintf("create compute instance in GPU instance %d", giID)
	release, err := d.enter(what)
	if err != nil {
		return ComputeInstance{}, err
	}
	defer release()
	gi, err := d.gpuInstance(giID, what)
	if err != nil {
		return ComputeInstance{}, err
	}
	giInfo, ret := gi.GetInfo()
	if ret != nvml.SUCCESS {
		return ComputeInstance{}, d.err(ret, "%s: GPU instance info", what)
	}
	gps, err := d.profiles()
	if err != nil {
		return ComputeInstance{}, fmt.Errorf("%s: %w", what, err)
	}
	slices := uint32(0)
	for _, p := range gps {
		if p.info.Id == giInfo.ProfileId {
			slices = p.info.SliceCount
			break
		}
	}
	if slices == 0 {
		return ComputeInstance{}, fmt.Errorf("GPU %d: %s: GPU instance has unknown profile %d: %w", d.index, what, giInfo.ProfileId, ErrNotFound)
	}
	cps, err := d.ciProfiles(gi, what)
	if err != nil {
		return ComputeInstance{}, err
	}
	var chosen *nvmlCIProfile
	for i := range cps {
		if cps[i].info.SliceCount == slices {
			chosen = &cps[i]
			break
		}
	}
	if chosen == nil {
		return ComputeInstance{}, fmt.Errorf("GPU %d: %s: no compute instance profile with %d slices: %w", d.index, what, slices, ErrNotSupported)
	}
	ci, ret := gi.CreateComputeInstance(&chosen.info)
	if ret != nvml.SUCCESS {
		return ComputeInstance{}, d.err(ret, "%s (profile %d)", what, chosen.id)
	}
	ciInfo, ret := ci.GetInfo()
	if ret != nvml.SUCCESS {
		return ComputeInstance{}, d.err(ret, "%s: created, but reading it back failed", what)
	}
	out := ComputeInstance{ID: int(ciInfo.Id), GIID: giID, ComputeSlices: int(chosen.info.SliceCount)}
	uuids, err := d.migUUIDs()
	if err != nil {
		return out, fmt.Errorf("%s: %w", what, err)
	}
	uuid, ok := uuids[nvmlMIGKey{giID, out.ID}]
	if !ok {
		return out, fmt.Errorf("GPU %d: %s: no MIG device for compute instance %d: %w", d.index, what, out.ID, ErrNotFound)
	}
	out.UUID = uuid
	return out, nil
}

// DestroyComputeInstance destroys a compute instance.
func (d *nvmlDevice) DestroyComputeInstance(giID, ciID int) error {
	what := fmt.Sprintf("destroy compute instance %d of GPU instance %d", ciID, giID)
	release, err := d.enter(what)
	if err != nil {
		return err
	}
	defer release()
	gi, err := d.gpuInstance(giID, what)
	if err != nil {
		return err
	}
	if ciID < 0 {
		return fmt.Errorf("GPU %d: %s: %w", d.index, what, ErrInvalidArgument)
	}
	ci, ret := gi.GetComputeInstanceById(ciID)
	if ret != nvml.SUCCESS {
		return d.err(ret, "%s: find compute instance", what)
	}
	if ret := ci.Destroy(); ret != nvml.SUCCESS {
		return d.err(ret, "%s", what)
	}
	return nil
}

// nvmlPCIBusID reads a device's PCI bus ID.
func nvmlPCIBusID(dev nvml.Device) (string, error) {
	pci, ret := dev.GetPciInfo()
	if ret != nvml.SUCCESS {
		return "", nvmlError(ret, "PCI info")
	}
	return nvmlBusID(pci), nil
}

// nvmlBusID returns NVML's bus ID string, falling back to the legacy
// one and then to the numeric fields.
func nvmlBusID(pci nvml.PciInfo) string {
	if id := nvmlCString(pci.BusId[:]); id != "" {
		return id
	}
	if id := nvmlCString(pci.BusIdLegacy[:]); id != "" {
		return id
	}
	return fmt.Sprintf("%08x:%02x:%02x.0", pci.Domain, pci.Bus, pci.Device)
}

// nvmlSameBusID compares PCI bus IDs, ignoring case and the width of the
// domain ("00000000:07:00.0" is "0000:07:00.0").
func nvmlSameBusID(a, b string) bool {
	norm := func(s string) string {
		s = strings.ToLower(strings.TrimSpace(s))
		if dom, rest, ok := strings.Cut(s, ":"); ok && strings.Count(s, ":") == 2 {
			dom = strings.TrimLeft(dom, "0")
			return dom + ":" + rest
		}
		return s
	}
	return a != "" && norm(a) == norm(b)
}

// nvmlCString converts a NUL-terminated C char array.
func nvmlCString(b []int8) string {
	var sb strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}

// nvmlSentinel maps NVML return codes to this package's sentinels.
func nvmlSentinel(ret nvml.Return) error {
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return ErrLibraryNotFound
	case nvml.ERROR_NOT_SUPPORTED:
		return ErrNotSupported
	case nvml.ERROR_IN_USE:
		return ErrInUse
	case nvml.ERROR_INSUFFICIENT_RESOURCES:
		return ErrInsufficientResources
	case nvml.ERROR_INVALID_ARGUMENT:
		return ErrInvalidArgument
	case nvml.ERROR_NOT_FOUND:
		return ErrNotFound
	case nvml.ERROR_TIMEOUT:
		return ErrTimeout
	case nvml.ERROR_UNINITIALIZED:
		return ErrUninitialized
	}
	return nil
}

// nvmlError describes a failed NVML call: the context, the matching
// sentinel where there is one, and NVML's own error (an nvml.Return, which
// errors.As can recover).
func nvmlError(ret nvml.Return, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	if s := nvmlSentinel(ret); s != nil {
		return fmt.Errorf("%s: %w: %w", what, s, ret)
	}
	return fmt.Errorf("%s: NVML error: %w", what, ret)
}

// Interface checks.
var (
	_ NVML     = (*nvmlLib)(nil)
	_ Device   = (*nvmlDevice)(nil)
	_ EventSet = (*nvmlEventSet)(nil)
)
