package v1

import "strings"

const (
	// vendorPrefix starts every resource name and GPU label key.
	vendorPrefix = "nvidia.com/"
	// GPUResource is the resource name of whole GPUs.
	GPUResource = vendorPrefix + "gpu"
	// MIGResourcePrefix starts the resource names of MIG devices.
	MIGResourcePrefix = vendorPrefix + "mig-"
	// SharedSuffix ends the names of shared resources renamed by
	// timeSlicing.renameShared.
	SharedSuffix = ".shared"
	// MaxReplicas bounds the time-slicing replicas of one device.
	MaxReplicas = 1024
)

// MIGName is the name a MIG profile goes by in resource names and label
// keys: "mig-" and the profile, with "+" written "." since resource names
// may not hold it, as NVIDIA's device plugin writes them: "1g.10gb+me" is
// "mig-1g.10gb.me", "1g.24gb+me.all" "mig-1g.24gb.me.all", "4g.96gb+gfx"
// "mig-4g.96gb.gfx", and "1g.24gb-me" stays "mig-1g.24gb-me".
func MIGName(profile string) string {
	return "mig-" + strings.ReplaceAll(profile, "+", ".")
}

// ResourceName returns the resource a device is advertised under: a whole
// GPU (profile "") as nvidia.com/gpu, a MIG device as
// nvidia.com/<MIGName>; shared resources get SharedSuffix when renamed.
func ResourceName(migProfile string, renameShared bool) string {
	name := GPUResource
	if migProfile != "" {
		name = vendorPrefix + MIGName(migProfile)
	}
	if renameShared {
		name += SharedSuffix
	}
	return name
}
