//go:build cgo

package nvml

import (
	"fmt"
	"sort"
	"strings"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/carve-dev/carve/partition"
)

// giProfile is one supported GPU instance profile as NVML reports it.
type giProfile struct {
	// id is the gonvml.GPU_INSTANCE_PROFILE_* value it was read with; info.Id
	// is NVML's own profile ID, which later calls take (nvidia-smi's -lgip
	// IDs: 19 for 1g.10gb on an H100) and which GPU instances report.
	id   int
	info gonvml.GpuInstanceProfileInfo
	name string // from the V2 info, "" without it
}

// profiles reads every GPU instance profile the GPU supports. A GPU that
// supports none (no MIG, or MIG mode off) returns an error wrapping
// partition.ErrNotSupported.
func (d *device) profiles() ([]giProfile, error) {
	var ps []giProfile
	for id := range gonvml.GPU_INSTANCE_PROFILE_COUNT {
		p, ret := d.profile(id)
		switch ret {
		case gonvml.SUCCESS:
		case gonvml.ERROR_NOT_SUPPORTED, gonvml.ERROR_INVALID_ARGUMENT:
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
		return nil, fmt.Errorf("GPU %d: no GPU instance profiles (no MIG support, or MIG mode disabled): %w", d.index, partition.ErrNotSupported)
	}
	return ps, nil
}

// profile reads one profile, from the V2 info where available.
func (d *device) profile(id int) (giProfile, gonvml.Return) {
	if v2 := d.l.v2; v2 != nil {
		if info, ret := v2(d.dev, id); ret == gonvml.SUCCESS {
			return giProfile{id: id, name: cString(info.Name[:]), info: gonvml.GpuInstanceProfileInfo{
				Id: info.Id, IsP2pSupported: info.IsP2pSupported, SliceCount: info.SliceCount,
				InstanceCount: info.InstanceCount, MultiprocessorCount: info.MultiprocessorCount,
				CopyEngineCount: info.CopyEngineCount, DecoderCount: info.DecoderCount,
				EncoderCount: info.EncoderCount, JpegCount: info.JpegCount, OfaCount: info.OfaCount,
				MemorySizeMB: info.MemorySizeMB,
			}}, gonvml.SUCCESS
		}
	}
	info, ret := d.dev.GetGpuInstanceProfileInfo(id)
	return giProfile{id: id, info: info}, ret
}

// profileName names a profile: NVML's own name where known, else one built
// from its size with the variant's suffix. The built name can differ from
// NVIDIA's, which follows the marketing memory (an H200's 1g.18gb has
// 16384 MiB); drivers without the V2 profile info are older than every
// model that needs it.
func profileName(p giProfile) string {
	if name := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(p.name), "MIG ")); name != "" {
		if mediaExtensions(p.id) && !strings.Contains(name, partition.VariantMediaExtensions) {
			name += variantSuffix(p.id)
		}
		return name
	}
	return partition.ProfileName(int(p.info.SliceCount), p.info.MemorySizeMB, false) + variantSuffix(p.id)
}

// variantSuffix is the name suffix of a GPU_INSTANCE_PROFILE_* value's
// variant: "+me", "+me.all", "-me", "+gfx" or "".
func variantSuffix(id int) string {
	switch id {
	case gonvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, gonvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1:
		return partition.VariantMediaExtensions
	case gonvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME, gonvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME:
		return partition.VariantAllMedia
	case gonvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, gonvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME:
		return partition.VariantNoMedia
	case gonvml.GPU_INSTANCE_PROFILE_1_SLICE_GFX, gonvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX,
		gonvml.GPU_INSTANCE_PROFILE_3_SLICE_GFX, gonvml.GPU_INSTANCE_PROFILE_4_SLICE_GFX:
		return partition.VariantGraphics
	}
	return ""
}

// mediaExtensions reports whether a profile takes the GPU's one set of
// media extensions: "+me" and "+me.all".
func mediaExtensions(id int) bool {
	switch variantSuffix(id) {
	case partition.VariantMediaExtensions, partition.VariantAllMedia:
		return true
	}
	return false
}

// GPUInstanceProfiles lists the GPU instance profiles with their possible
// placements.
func (d *device) GPUInstanceProfiles() ([]partition.GIProfile, error) {
	release, err := d.enter("GPU instance profiles")
	if err != nil {
		return nil, err
	}
	defer release()
	ps, err := d.profiles()
	if err != nil {
		return nil, err
	}
	out := make([]partition.GIProfile, 0, len(ps))
	for _, p := range ps {
		pls, ret := d.dev.GetGpuInstancePossiblePlacements(&p.info)
		if ret != gonvml.SUCCESS {
			return nil, d.err(ret, "placements of GPU instance profile %d", p.id)
		}
		gp := partition.GIProfile{
			ID:              p.id,
			InfoID:          int(p.info.Id),
			Name:            profileName(p),
			ComputeSlices:   int(p.info.SliceCount),
			MemoryMiB:       p.info.MemorySizeMB,
			MaxCount:        int(p.info.InstanceCount),
			MediaExtensions: mediaExtensions(p.id),
			Engines: partition.Engines{
				Multiprocessors: int(p.info.MultiprocessorCount), CopyEngines: int(p.info.CopyEngineCount),
				Decoders: int(p.info.DecoderCount), Encoders: int(p.info.EncoderCount),
				JPEGs: int(p.info.JpegCount), OFAs: int(p.info.OfaCount),
			},
			Placements: make([]partition.Placement, len(pls)),
		}
		for i, pl := range pls {
			gp.Placements[i] = partition.Placement{Start: int(pl.Start), Size: int(pl.Size)}
			gp.MemorySlices = max(gp.MemorySlices, int(pl.Size))
		}
		sort.Slice(gp.Placements, func(i, j int) bool { return gp.Placements[i].Start < gp.Placements[j].Start })
		out = append(out, gp)
	}
	return out, nil
}

// GPUInstances lists the GPU instances, in placement order. Their
// ProfileID is the gonvml.GPU_INSTANCE_PROFILE_* value, as in partition.GIProfile.
func (d *device) GPUInstances() ([]partition.GPUInstance, error) {
	release, err := d.enter("GPU instances")
	if err != nil {
		return nil, err
	}
	defer release()
	ps, err := d.profiles()
	if err != nil {
		return nil, err
	}
	var out []partition.GPUInstance
	seen := map[int]bool{}
	for _, p := range ps {
		gis, ret := d.dev.GetGpuInstances(&p.info)
		if ret != gonvml.SUCCESS {
			return nil, d.err(ret, "GPU instances of profile %d", p.id)
		}
		for _, gi := range gis {
			info, ret := gi.GetInfo()
			if ret != gonvml.SUCCESS {
				return nil, d.err(ret, "GPU instance of profile %d: info", p.id)
			}
			if seen[int(info.Id)] {
				continue
			}
			seen[int(info.Id)] = true
			out = append(out, partition.GPUInstance{ID: int(info.Id), ProfileID: p.id, Placement: toPlacement(info.Placement)})
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

// toPlacement converts NVML's placement.
func toPlacement(p gonvml.GpuInstancePlacement) partition.Placement {
	return partition.Placement{Start: int(p.Start), Size: int(p.Size)}
}

// CreateGPUInstance creates a GPU instance of a profile
// (gonvml.GPU_INSTANCE_PROFILE_*) at a placement.
func (d *device) CreateGPUInstance(profileID int, at partition.Placement) (partition.GPUInstance, error) {
	what := fmt.Sprintf("create GPU instance (profile %d at %d:%d)", profileID, at.Start, at.Size)
	if profileID < 0 || at.Start < 0 || at.Size <= 0 {
		return partition.GPUInstance{}, fmt.Errorf("GPU %d: %s: %w", d.index, what, partition.ErrInvalidArgument)
	}
	release, err := d.enter(what)
	if err != nil {
		return partition.GPUInstance{}, err
	}
	defer release()
	info, ret := d.dev.GetGpuInstanceProfileInfo(profileID)
	if ret != gonvml.SUCCESS {
		return partition.GPUInstance{}, d.err(ret, "%s: profile info", what)
	}
	gi, ret := d.dev.CreateGpuInstanceWithPlacement(&info, &gonvml.GpuInstancePlacement{Start: uint32(at.Start), Size: uint32(at.Size)})
	if ret != gonvml.SUCCESS {
		return partition.GPUInstance{}, d.err(ret, "%s", what)
	}
	gii, ret := gi.GetInfo()
	if ret != gonvml.SUCCESS {
		return partition.GPUInstance{}, d.err(ret, "%s: created, but reading it back failed", what)
	}
	return partition.GPUInstance{ID: int(gii.Id), ProfileID: profileID, Placement: toPlacement(gii.Placement)}, nil
}

// DestroyGPUInstance destroys a GPU instance. Refused because it is in
// use, it fails with a *partition.InUseError naming the processes on its
// MIG devices.
func (d *device) DestroyGPUInstance(giID int) error {
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
	if ret := gi.Destroy(); ret != gonvml.SUCCESS {
		return d.inUse(d.err(ret, "%s", what), scope{gi: giID, ci: -1})
	}
	return nil
}

// gpuInstance finds the GPU instance giID; what names the call in errors.
func (d *device) gpuInstance(giID int, what string) (gonvml.GpuInstance, error) {
	if giID < 0 {
		return nil, fmt.Errorf("GPU %d: %s: %w", d.index, what, partition.ErrInvalidArgument)
	}
	gi, ret := d.dev.GetGpuInstanceById(giID)
	if ret != gonvml.SUCCESS {
		return nil, d.err(ret, "%s: find GPU instance", what)
	}
	return gi, nil
}

// ciProfile is one compute instance profile a GPU instance supports.
type ciProfile struct {
	id   int // nvml.COMPUTE_INSTANCE_PROFILE_*
	info gonvml.ComputeInstanceProfileInfo
}

// ciProfiles reads the compute instance profiles (shared engines) a GPU
// instance supports.
func (d *device) ciProfiles(gi gonvml.GpuInstance, what string) ([]ciProfile, error) {
	var ps []ciProfile
	for id := range gonvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		info, ret := gi.GetComputeInstanceProfileInfo(id, gonvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		switch ret {
		case gonvml.SUCCESS:
		case gonvml.ERROR_NOT_SUPPORTED, gonvml.ERROR_INVALID_ARGUMENT:
			continue
		default:
			return nil, d.err(ret, "%s: compute instance profile %d", what, id)
		}
		if info.InstanceCount > 0 {
			ps = append(ps, ciProfile{id: id, info: info})
		}
	}
	return ps, nil
}

// ComputeInstances lists a GPU instance's compute instances by ID, each
// with its MIG device UUID.
func (d *device) ComputeInstances(giID int) ([]partition.ComputeInstance, error) {
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
	var out []partition.ComputeInstance
	seen := map[int]bool{}
	for _, p := range ps {
		cis, ret := gi.GetComputeInstances(&p.info)
		if ret != gonvml.SUCCESS {
			return nil, d.err(ret, "%s: profile %d", what, p.id)
		}
		for _, ci := range cis {
			info, ret := ci.GetInfo()
			if ret != gonvml.SUCCESS {
				return nil, d.err(ret, "%s: info", what)
			}
			if seen[int(info.Id)] {
				continue
			}
			seen[int(info.Id)] = true
			out = append(out, partition.ComputeInstance{ID: int(info.Id), GIID: giID, ComputeSlices: int(p.info.SliceCount)})
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
		uuid, ok := uuids[migKey{giID, out[i].ID}]
		if !ok {
			return nil, fmt.Errorf("GPU %d: %s: no MIG device for compute instance %d: %w", d.index, what, out[i].ID, partition.ErrNotFound)
		}
		out[i].UUID = uuid
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// CreateComputeInstance creates one compute instance that fills the GPU
// instance: the compute instance profile with as many slices as the GPU
// instance's profile, sharing its engines.
func (d *device) CreateComputeInstance(giID int) (partition.ComputeInstance, error) {
	what := fmt.Sprintf("create compute instance in GPU instance %d", giID)
	release, err := d.enter(what)
	if err != nil {
		return partition.ComputeInstance{}, err
	}
	defer release()
	gi, err := d.gpuInstance(giID, what)
	if err != nil {
		return partition.ComputeInstance{}, err
	}
	giInfo, ret := gi.GetInfo()
	if ret != gonvml.SUCCESS {
		return partition.ComputeInstance{}, d.err(ret, "%s: GPU instance info", what)
	}
	gps, err := d.profiles()
	if err != nil {
		return partition.ComputeInstance{}, fmt.Errorf("%s: %w", what, err)
	}
	slices := uint32(0)
	for _, p := range gps {
		if p.info.Id == giInfo.ProfileId {
			slices = p.info.SliceCount
			break
		}
	}
	if slices == 0 {
		return partition.ComputeInstance{}, fmt.Errorf("GPU %d: %s: GPU instance has unknown profile %d: %w", d.index, what, giInfo.ProfileId, partition.ErrNotFound)
	}
	cps, err := d.ciProfiles(gi, what)
	if err != nil {
		return partition.ComputeInstance{}, err
	}
	var chosen *ciProfile
	for i := range cps {
		if cps[i].info.SliceCount == slices {
			chosen = &cps[i]
			break
		}
	}
	if chosen == nil {
		return partition.ComputeInstance{}, fmt.Errorf("GPU %d: %s: no compute instance profile with %d slices: %w", d.index, what, slices, partition.ErrNotSupported)
	}
	ci, ret := gi.CreateComputeInstance(&chosen.info)
	if ret != gonvml.SUCCESS {
		return partition.ComputeInstance{}, d.err(ret, "%s (profile %d)", what, chosen.id)
	}
	ciInfo, ret := ci.GetInfo()
	if ret != gonvml.SUCCESS {
		return partition.ComputeInstance{}, d.err(ret, "%s: created, but reading it back failed", what)
	}
	out := partition.ComputeInstance{ID: int(ciInfo.Id), GIID: giID, ComputeSlices: int(chosen.info.SliceCount)}
	uuids, err := d.migUUIDs()
	if err != nil {
		return out, fmt.Errorf("%s: %w", what, err)
	}
	uuid, ok := uuids[migKey{giID, out.ID}]
	if !ok {
		return out, fmt.Errorf("GPU %d: %s: no MIG device for compute instance %d: %w", d.index, what, out.ID, partition.ErrNotFound)
	}
	out.UUID = uuid
	return out, nil
}

// DestroyComputeInstance destroys a compute instance. Refused because it
// is in use, it fails with a *partition.InUseError naming the processes on
// its MIG device.
func (d *device) DestroyComputeInstance(giID, ciID int) error {
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
		return fmt.Errorf("GPU %d: %s: %w", d.index, what, partition.ErrInvalidArgument)
	}
	ci, ret := gi.GetComputeInstanceById(ciID)
	if ret != gonvml.SUCCESS {
		return d.err(ret, "%s: find compute instance", what)
	}
	if ret := ci.Destroy(); ret != gonvml.SUCCESS {
		return d.inUse(d.err(ret, "%s", what), scope{gi: giID, ci: ciID})
	}
	return nil
}

// migKey names a MIG device by its GPU and compute instance.
type migKey struct{ gi, ci int }

// migUUIDs maps each MIG device's GI/CI pair to its UUID.
func (d *device) migUUIDs() (map[migKey]string, error) {
	uuids := map[migKey]string{}
	err := d.eachMIGDevice(func(i int, mig gonvml.Device) error {
		gi, ret := mig.GetGpuInstanceId()
		if ret != gonvml.SUCCESS {
			return d.err(ret, "MIG device %d: GPU instance ID", i)
		}
		ci, ret := mig.GetComputeInstanceId()
		if ret != gonvml.SUCCESS {
			return d.err(ret, "MIG device %d: compute instance ID", i)
		}
		uuid, ret := mig.GetUUID()
		if ret != gonvml.SUCCESS {
			return d.err(ret, "MIG device %d: UUID", i)
		}
		uuids[migKey{gi, ci}] = uuid
		return nil
	})
	return uuids, err
}
