package dra

import (
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/carve-dev/carve/partition"
)

// DriverName is the DRA driver carve publishes its devices as.
const DriverName = "gpu.carve.dev"

// Device types, the value of the AttrType attribute.
const (
	TypeGPU = "gpu"
	TypeMIG = "mig"
)

// Attribute names, within DriverName's domain (a claim's CEL selector reads
// them as device.attributes["gpu.carve.dev"].NAME).
const (
	AttrType         = "type"
	AttrUUID         = "uuid"
	AttrIndex        = "index"
	AttrProductName  = "productName"
	AttrProfile      = "profile"
	AttrParentUUID   = "parentUUID"
	AttrMIGPlacement = "migPlacement"
)

// Capacity names.
const (
	CapMemory          = "memory"
	CapMultiprocessors = "multiprocessors"
)

// mib is a mebibyte in bytes: NVML reports memory in MiB, DRA capacities
// are quantities in bytes.
const mib = 1 << 20

// Devices describes gpus as DRA devices: each GPU whose MIG mode in force
// is off as a whole GPU, and each complete MIG device (one compute instance
// filling its GPU instance, as carve makes them) of the others. Incomplete
// instances, and GPUs in MIG mode, are left out: no claim may be given
// them. The names follow NVIDIA's DRA driver with the GPU's index: gpu-0,
// and gpu-0-mig-1g10gb-19-2 (profile without dots, the GPU instance
// profile ID nvidia-smi lists, first memory slice), so a name says the
// same geometry on every node of a model. An instance of a profile the GPU
// does not list has no known ID, and its name leaves it out.
func Devices(gpus []partition.GPU) ([]resourceapi.Device, error) {
	var out []resourceapi.Device
	for _, g := range gpus {
		if g.MIGMode != partition.MIGEnabled {
			out = append(out, wholeGPU(g))
			continue
		}
		for _, in := range g.Instances {
			if !in.Complete() {
				continue
			}
			d, err := migDevice(g, in)
			if err != nil {
				return nil, err
			}
			out = append(out, d)
		}
	}
	seen := make(map[string]bool, len(out))
	for _, d := range out {
		if seen[d.Name] {
			return nil, fmt.Errorf("two devices named %s", d.Name)
		}
		seen[d.Name] = true
	}
	return out, nil
}

// wholeGPU describes a GPU outside MIG mode. Its multiprocessors are not
// in the inventory, so it has no such capacity.
func wholeGPU(g partition.GPU) resourceapi.Device {
	return resourceapi.Device{
		Name: fmt.Sprintf("gpu-%d", g.Index),
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			AttrType:        {StringValue: new(TypeGPU)},
			AttrUUID:        {StringValue: new(g.UUID)},
			AttrIndex:       {IntValue: new(int64(g.Index))},
			AttrProductName: {StringValue: new(g.Product)},
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			CapMemory: {Value: *resource.NewQuantity(int64(g.MemoryMiB)*mib, resource.BinarySI)},
		},
	}
}

// migDevice describes a complete MIG device of GPU g.
func migDevice(g partition.GPU, in partition.Instance) (resourceapi.Device, error) {
	name := fmt.Sprintf("gpu-%d-mig-%s-%d-%d", g.Index, nameOfProfile(in.Profile), in.InfoID, in.Placement.Start)
	if in.InfoID == partition.UnknownInfoID {
		name = fmt.Sprintf("gpu-%d-mig-%s-%d", g.Index, nameOfProfile(in.Profile), in.Placement.Start)
	}
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return resourceapi.Device{}, fmt.Errorf("GPU %d: MIG device %s at %d:%d: no device name: %q %s",
			g.Index, in.Profile, in.Placement.Start, in.Placement.Size, name, strings.Join(errs, "; "))
	}
	d := resourceapi.Device{
		Name: name,
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			AttrType:         {StringValue: new(TypeMIG)},
			AttrUUID:         {StringValue: new(in.UUID())},
			AttrIndex:        {IntValue: new(int64(g.Index))},
			AttrProductName:  {StringValue: new(g.Product)},
			AttrProfile:      {StringValue: new(in.Profile)},
			AttrParentUUID:   {StringValue: new(g.UUID)},
			AttrMIGPlacement: {StringValue: new(fmt.Sprintf("%d:%d", in.Placement.Start, in.Placement.Size))},
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			CapMemory: {Value: *resource.NewQuantity(int64(in.MemoryMiB)*mib, resource.BinarySI)},
		},
	}
	if in.Multiprocessors > 0 {
		d.Capacity[CapMultiprocessors] = resourceapi.DeviceCapacity{Value: *resource.NewQuantity(int64(in.Multiprocessors), resource.DecimalSI)}
	}
	return d, nil
}

// nameOfProfile is a MIG profile's name as part of a device name: lower
// case, dots dropped, any other character that a DNS label cannot hold a
// dash (1g.10gb+me gives 1g10gb-me).
func nameOfProfile(profile string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(profile) {
		switch {
		case r == '.':
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	return strings.Trim(b.String(), "-")
}
