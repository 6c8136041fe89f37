package partition

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Model describes a MIG-capable GPU model: its geometry and the GPU instance
// profiles it supports. The built-in catalogue (Catalogue) holds the models
// of docs/hardware.md; on real GPUs the same facts are read from the
// device (ModelFromDevice), so models not listed here work too.
type Model struct {
	// Key is carve's short name, e.g. "H100-80GB"; profiles' `model:`
	// filters match it.
	Key string `json:"key"`
	// Product is the name NVML reports, e.g. "NVIDIA H100 80GB HBM3".
	Product string `json:"product"`
	// MemoryMiB is the GPU's total memory.
	MemoryMiB uint64 `json:"memoryMiB"`
	// MemorySlices and ComputeSlices are the GPU's MIG slices.
	MemorySlices  int `json:"memorySlices"`
	ComputeSlices int `json:"computeSlices"`
	// Profiles are the GPU instance profiles, smallest first.
	Profiles []GIProfile `json:"profiles"`
}

// Profile returns the profile of that name.
func (m *Model) Profile(name string) (GIProfile, bool) {
	for _, p := range m.Profiles {
		if p.Name == name {
			return p, true
		}
	}
	return GIProfile{}, false
}

// ProfileByID returns the profile with that NVML profile ID.
func (m *Model) ProfileByID(id int) (GIProfile, bool) {
	for _, p := range m.Profiles {
		if p.ID == id {
			return p, true
		}
	}
	return GIProfile{}, false
}

// ProfileNames returns the names of the model's profiles, smallest first.
func (m *Model) ProfileNames() []string {
	names := make([]string, len(m.Profiles))
	for i, p := range m.Profiles {
		names[i] = p.Name
	}
	return names
}

// memoryGB rounds MiB to the marketing gigabytes NVIDIA names use.
func memoryGB(mib uint64) uint64 { return (mib + 1023) / 1024 }

// NVML GPU instance profile IDs (nvml.GPU_INSTANCE_PROFILE_*), repeated here
// so the catalogue does not need cgo.
const (
	profile1Slice     = 0
	profile2Slice     = 1
	profile3Slice     = 2
	profile4Slice     = 3
	profile7Slice     = 4
	profile1SliceRev1 = 7 // 1g with media extensions (+me)
	profile2SliceRev1 = 8 // 2g with media extensions (+me)
	profile1SliceRev2 = 9 // 1g with two memory slices
)

func placements(size int, starts ...int) []Placement {
	ps := make([]Placement, len(starts))
	for i, s := range starts {
		ps[i] = Placement{Start: s, Size: size}
	}
	return ps
}

// eightSliceModel builds a model of the A100/H100/H200 family: 8 memory
// slices and 7 compute slices. mem holds the memory of an instance covering
// 1, 2, 4 and 8 memory slices, as NVML reports it (not a multiple of one
// slice), and gb the memory part of each profile name in the order 1g,
// 1g (two slices), 2g, 3g, 4g, 7g.
func eightSliceModel(key, product string, memMiB uint64, mem [4]uint64, gb [6]int) Model {
	name := func(c, g int) string { return fmt.Sprintf("%dg.%dgb", c, g) }
	return Model{
		Key: key, Product: product, MemoryMiB: memMiB, MemorySlices: 8, ComputeSlices: 7,
		Profiles: []GIProfile{
			{ID: profile1Slice, Name: name(1, gb[0]), ComputeSlices: 1, MemorySlices: 1, MemoryMiB: mem[0], MaxCount: 7, Placements: placements(1, 0, 1, 2, 3, 4, 5, 6)},
			{ID: profile1SliceRev1, Name: name(1, gb[0]) + "+me", ComputeSlices: 1, MemorySlices: 1, MemoryMiB: mem[0], MaxCount: 1, MediaExtensions: true, Placements: placements(1, 0, 1, 2, 3, 4, 5, 6)},
			{ID: profile1SliceRev2, Name: name(1, gb[1]), ComputeSlices: 1, MemorySlices: 2, MemoryMiB: mem[1], MaxCount: 4, Placements: placements(2, 0, 2, 4, 6)},
			{ID: profile2Slice, Name: name(2, gb[2]), ComputeSlices: 2, MemorySlices: 2, MemoryMiB: mem[1], MaxCount: 3, Placements: placements(2, 0, 2, 4)},
			{ID: profile3Slice, Name: name(3, gb[3]), ComputeSlices: 3, MemorySlices: 4, MemoryMiB: mem[2], MaxCount: 2, Placements: placements(4, 0, 4)},
			{ID: profile4Slice, Name: name(4, gb[4]), ComputeSlices: 4, MemorySlices: 4, MemoryMiB: mem[2], MaxCount: 1, Placements: placements(4, 0)},
			{ID: profile7Slice, Name: name(7, gb[5]), ComputeSlices: 7, MemorySlices: 8, MemoryMiB: mem[3], MaxCount: 1, Placements: placements(8, 0)},
		},
	}
}

// Catalogue returns the built-in models of docs/hardware.md, in a
// fixed order. Each call returns a fresh copy the caller may change.
func Catalogue() []Model {
	return []Model{
		// H100 sizes are what NVML reported on a real H100 80GB HBM3; the
		// others follow the same pattern and are unverified on hardware.
		eightSliceModel("A100-40GB", "NVIDIA A100-SXM4-40GB", 40960, [4]uint64{4864, 9984, 20096, 40448}, [6]int{5, 10, 10, 20, 20, 40}),
		eightSliceModel("A100-80GB", "NVIDIA A100-SXM4-80GB", 81920, [4]uint64{9728, 19968, 40192, 81152}, [6]int{10, 20, 20, 40, 40, 80}),
		eightSliceModel("H100-80GB", "NVIDIA H100 80GB HBM3", 81559, [4]uint64{9984, 20096, 40448, 81152}, [6]int{10, 20, 20, 40, 40, 80}),
		eightSliceModel("H200-141GB", "NVIDIA H200", 143771, [4]uint64{17920, 35584, 72192, 143616}, [6]int{18, 35, 35, 71, 71, 141}),
		{
			Key: "A30-24GB", Product: "NVIDIA A30", MemoryMiB: 24576, MemorySlices: 4, ComputeSlices: 4,
			Profiles: []GIProfile{
				{ID: profile1Slice, Name: "1g.6gb", ComputeSlices: 1, MemorySlices: 1, MemoryMiB: 5888, MaxCount: 4, Placements: placements(1, 0, 1, 2, 3)},
				{ID: profile1SliceRev1, Name: "1g.6gb+me", ComputeSlices: 1, MemorySlices: 1, MemoryMiB: 5888, MaxCount: 1, MediaExtensions: true, Placements: placements(1, 0, 1, 2, 3)},
				{ID: profile2Slice, Name: "2g.12gb", ComputeSlices: 2, MemorySlices: 2, MemoryMiB: 12032, MaxCount: 2, Placements: placements(2, 0, 2)},
				{ID: profile2SliceRev1, Name: "2g.12gb+me", ComputeSlices: 2, MemorySlices: 2, MemoryMiB: 12032, MaxCount: 1, MediaExtensions: true, Placements: placements(2, 0, 2)},
				{ID: profile4Slice, Name: "4g.24gb", ComputeSlices: 4, MemorySlices: 4, MemoryMiB: 24320, MaxCount: 1, Placements: placements(4, 0)},
			},
		},
	}
}

// LookupModel returns the catalogue model with that key ("H100-80GB"),
// ignoring case.
func LookupModel(key string) (Model, bool) {
	for _, m := range Catalogue() {
		if strings.EqualFold(m.Key, strings.TrimSpace(key)) {
			return m, true
		}
	}
	return Model{}, false
}

// ModelForProduct returns the catalogue model for a product name and memory
// size as NVML reports them, or false when the catalogue lacks it.
func ModelForProduct(product string, memMiB uint64) (Model, bool) {
	key := ModelKey(product, memMiB)
	for _, m := range Catalogue() {
		if m.Key == key {
			return m, true
		}
	}
	return Model{}, false
}

var familyRE = regexp.MustCompile(`\b([A-Z]+[0-9]+[A-Z]?)\b`)

// ModelKey derives carve's short model key (family and memory, e.g.
// "H100-80GB") from a product name and memory size.
func ModelKey(product string, memMiB uint64) string {
	p := strings.ToUpper(strings.TrimPrefix(strings.TrimSpace(product), "NVIDIA "))
	family := p
	if m := familyRE.FindStringSubmatch(strings.NewReplacer("-", " ").Replace(p)); m != nil {
		family = m[1]
	}
	return fmt.Sprintf("%s-%dGB", family, marketingGB(memMiB))
}

// marketingGB names a GPU's memory in the GB it is sold with. NVML reports
// somewhat less (81559 MiB for an 80GB H100, 23034 MiB for a 24GB L4), so a
// size within 8% below a marketing size is named after it.
func marketingGB(memMiB uint64) uint64 {
	sizes := [...]uint64{6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 80, 94, 96, 141, 180, 192, 288}
	gb := memoryGB(memMiB)
	for _, m := range sizes {
		if gb <= m && float64(memMiB) >= 0.92*float64(m*1024) {
			return m
		}
	}
	return gb
}

// ProfileName builds a MIG profile name from compute slices and memory, as
// NVIDIA names them ("1g.10gb"); mediaExtensions appends "+me".
func ProfileName(computeSlices int, memMiB uint64, mediaExtensions bool) string {
	n := fmt.Sprintf("%dg.%dgb", computeSlices, memoryGB(memMiB))
	if mediaExtensions {
		n += "+me"
	}
	return n
}

// ModelFromDevice reads a model's geometry from a device in MIG mode: the
// profiles NVML reports with their placements. The result's Key and Product
// come from the device.
func ModelFromDevice(d Device) (Model, error) {
	product, err := d.Name()
	if err != nil {
		return Model{}, fmt.Errorf("GPU %d: name: %w", d.Index(), err)
	}
	mem, err := d.MemoryMiB()
	if err != nil {
		return Model{}, fmt.Errorf("GPU %d: memory: %w", d.Index(), err)
	}
	profiles, err := d.GPUInstanceProfiles()
	if err != nil {
		return Model{}, fmt.Errorf("GPU %d: GPU instance profiles: %w", d.Index(), err)
	}
	m := Model{Key: ModelKey(product, mem), Product: product, MemoryMiB: mem, Profiles: profiles}
	for _, p := range profiles {
		for _, pl := range p.Placements {
			m.MemorySlices = max(m.MemorySlices, pl.End())
		}
		m.ComputeSlices = max(m.ComputeSlices, p.ComputeSlices)
	}
	sort.SliceStable(m.Profiles, func(i, j int) bool { return lessProfile(m.Profiles[i], m.Profiles[j]) })
	return m, nil
}

func lessProfile(a, b GIProfile) bool {
	if a.ComputeSlices != b.ComputeSlices {
		return a.ComputeSlices < b.ComputeSlices
	}
	if a.MemorySlices != b.MemorySlices {
		return a.MemorySlices < b.MemorySlices
	}
	return !a.MediaExtensions && b.MediaExtensions
}
