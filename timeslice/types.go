package timeslice

import "reflect"

// Device is one device advertised to the kubelet.
type Device struct {
	// ID is the device-plugin device ID: the physical UUID, or
	// "<uuid>::<n>" for replica n (0-based) of a time-sliced device.
	ID string `json:"id"`
	// UUID is the physical device behind the ID: a GPU UUID ("GPU-...") or
	// a MIG device UUID ("MIG-..."). NVIDIA_VISIBLE_DEVICES lists these.
	UUID string `json:"uuid"`
	// GPU is the NVML index of the physical GPU the device lives on.
	GPU int `json:"gpu"`
	// GPUUUID is the UUID of that GPU (equal to UUID for whole GPUs).
	GPUUUID string `json:"gpuUUID"`
	// Replica is n for "<uuid>::<n>", or -1 for an unshared device.
	Replica int `json:"replica"`
	// Replicas is how many replicas share the physical device (1 if none).
	Replicas int `json:"replicas"`
	// MIGProfile is the MIG profile name ("1g.10gb") of a MIG device, "" for
	// a whole GPU.
	MIGProfile string `json:"migProfile,omitempty"`
	// MemoryMiB is the memory of the physical device.
	MemoryMiB uint64 `json:"memoryMiB"`
	// FailRequestsGreaterThanOne marks a replica whose profile entry asks
	// the plugin to refuse a container more than one device of the shared
	// resource (it would get one GPU's time slices twice, no more compute).
	FailRequestsGreaterThanOne bool `json:"failRequestsGreaterThanOne,omitempty"`
}

// Resources maps a resource name ("nvidia.com/mig-1g.10gb") to its devices,
// sorted by GPU index, then ID.
type Resources map[string][]Device

// Sharing is how one GPU's devices are shared.
type Sharing struct {
	// Replicas replicates every device of the GPU (whole GPU or each MIG
	// device); 0 or 1 means not shared.
	Replicas int
	// MIGReplicas replicates the MIG devices of the named profiles and
	// takes precedence over Replicas for them.
	MIGReplicas map[string]int
	// RenameShared advertises shared devices under "<name>.shared".
	RenameShared bool
	// FailRequestsGreaterThanOne marks the GPU's replicas so that the
	// plugin refuses requests for more than one of them.
	FailRequestsGreaterThanOne bool
}

// Equal reports whether two settings share devices the same way. A map
// with no entries equals a nil one.
func (s Sharing) Equal(o Sharing) bool {
	// Every field is compared, so that one added later cannot be missed.
	if len(s.MIGReplicas) == 0 {
		s.MIGReplicas = nil
	}
	if len(o.MIGReplicas) == 0 {
		o.MIGReplicas = nil
	}
	return reflect.DeepEqual(s, o)
}
