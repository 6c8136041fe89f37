package configs

// GPU is what selection and validation need to know of one GPU on a node.
type GPU struct {
	// Index is the GPU's NVML index.
	Index int
	// Model is carve's model key, e.g. "H100-80GB".
	Model string
	// Product is the product name NVML reports, e.g. "NVIDIA H100 80GB HBM3".
	Product string
	// MIGCapable is false for GPUs that cannot be partitioned.
	MIGCapable bool
}

// GPUModel describes a GPU model a Geometry knows.
type GPUModel struct {
	// Key is carve's model key, e.g. "H100-80GB".
	Key string
	// Product is the product name NVML reports.
	Product string
	// Profiles are the MIG profile names the model supports, e.g. "1g.10gb".
	Profiles []string
}

// Geometry answers the hardware questions validation asks. The partition
// package implements it (partition.NewGeometry) from its catalogue or from
// the GPUs of a node, so that this package needs no knowledge of MIG
// placements. Its methods use plain types only, so that an implementation
// need not import this package.
type Geometry interface {
	// ModelKeys returns the keys of the GPU models the geometry knows.
	ModelKeys() []string
	// ModelInfo returns the product name and the MIG profile names of the
	// model with that key.
	ModelInfo(key string) (product string, profiles []string)
	// Fit returns nil when one GPU of the model can hold all these MIG
	// instances at once (profile name -> count), else an error that says
	// why not, e.g. "3g.40gb x2 cover all 8 memory slices".
	Fit(model string, counts map[string]int) error
}

// knownModels lists the models g knows.
func knownModels(g Geometry) []GPUModel {
	keys := g.ModelKeys()
	out := make([]GPUModel, len(keys))
	for i, k := range keys {
		product, profiles := g.ModelInfo(k)
		out[i] = GPUModel{Key: k, Product: product, Profiles: profiles}
	}
	return out
}
