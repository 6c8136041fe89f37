package partition

import "fmt"

// NVML GPU instance profile IDs (nvml.GPU_INSTANCE_PROFILE_*), repeated here
// so the catalogue does not need cgo; partition/nvml's tests check them
// against go-nvml.
const (
	profile1Slice      = 0
	profile2Slice      = 1
	profile3Slice      = 2
	profile4Slice      = 3
	profile7Slice      = 4
	profile1SliceRev1  = 7  // 1g with media extensions (+me)
	profile2SliceRev1  = 8  // 2g with media extensions (+me)
	profile1SliceRev2  = 9  // 1g with two memory slices
	profile1SliceGfx   = 10 // 1g with graphics (+gfx)
	profile2SliceGfx   = 11 // 2g with graphics (+gfx)
	profile4SliceGfx   = 12 // 4g with graphics (+gfx)
	profile1SliceNoME  = 13 // 1g without media engines (-me)
	profile2SliceNoME  = 14 // 2g without media engines (-me)
	profile1SliceAllME = 15 // 1g with all media engines (+me.all)
	profile2SliceAllME = 16 // 2g with all media engines (+me.all)
)

// placements returns placements of one size at the given starts.
func placements(size int, starts ...int) []Placement {
	ps := make([]Placement, len(starts))
	for i, s := range starts {
		ps[i] = Placement{Start: s, Size: size}
	}
	return ps
}

// eightSlice describes a model of the A100/H100/H200/B200 family: 8 memory
// slices and 7 compute slices, with the same seven profiles.
type eightSlice struct {
	key, product string
	others       []string
	pci          []uint32
	memMiB       uint64
	// mem holds the memory of an instance covering 1, 2, 4 and 8 memory
	// slices, as NVML reports it (or as docs/hardware.md derives it).
	mem [4]uint64
	// gb holds the memory part of each profile name in the order 1g,
	// 1g (two slices), 2g, 3g, 4g, 7g.
	gb [6]int
	// eng holds the multiprocessors and engines of each profile in the
	// order 1g, 1g+me, 1g (two slices), 2g, 3g, 4g, 7g.
	eng *[7]Engines
}

// eng builds an Engines from the columns of nvidia-smi mig -lgip, in
// this order: SM, CE, DEC, ENC, JPEG, OFA.
func eng(sm, ce, dec, enc, jpeg, ofa int) Engines {
	return Engines{Multiprocessors: sm, CopyEngines: ce, Decoders: dec, Encoders: enc, JPEGs: jpeg, OFAs: ofa}
}

// Multiprocessors and engines per eight-slice profile, by GPU family, in
// the order of eightSlice.eng. docs/hardware.md says where each figure
// comes from and which are derived.
var (
	// ampereEngines: the A100 (40 and 80 GB).
	ampereEngines = [7]Engines{
		eng(14, 1, 0, 0, 0, 0), eng(14, 1, 1, 0, 1, 1), eng(14, 1, 1, 0, 0, 0),
		eng(28, 2, 1, 0, 0, 0), eng(42, 3, 2, 0, 0, 0), eng(56, 4, 2, 0, 0, 0), eng(98, 7, 5, 0, 1, 1),
	}
	// hopperEngines: the GH100 with 132 SMs (H100 SXM and NVL, GH200,
	// H200).
	hopperEngines = [7]Engines{
		eng(16, 1, 1, 0, 1, 0), eng(16, 1, 1, 0, 1, 1), eng(26, 1, 1, 0, 1, 0),
		eng(32, 2, 2, 0, 2, 0), eng(60, 3, 3, 0, 3, 0), eng(64, 4, 4, 0, 4, 0), eng(132, 8, 7, 0, 7, 1),
	}
	// b200Engines: the B200, and the B300 (derived from it).
	b200Engines = [7]Engines{
		eng(18, 2, 1, 0, 1, 0), eng(18, 2, 1, 0, 1, 1), eng(30, 2, 1, 0, 1, 0),
		eng(36, 4, 2, 0, 2, 0), eng(66, 6, 3, 0, 3, 0), eng(72, 8, 4, 0, 4, 0), eng(148, 16, 7, 0, 7, 1),
	}
	// gb200Engines: the GB200, and the GB300 (derived from it).
	gb200Engines = [7]Engines{
		eng(18, 2, 1, 0, 1, 0), eng(18, 2, 1, 0, 1, 1), eng(32, 2, 1, 0, 1, 0),
		eng(38, 4, 2, 0, 2, 0), eng(70, 6, 3, 0, 3, 0), eng(76, 8, 4, 0, 4, 0), eng(156, 16, 7, 0, 7, 1),
	}
)

// model builds the model's catalogue entry. The InfoIDs are those
// nvidia-smi mig -lgip lists on the A100 and the H100; the profile ID
// follows a profile's shape (its share of memory, its compute slices, its
// variant), so the other eight-slice models, of the same shape, share them.
func (s eightSlice) model() Model {
	name := func(c, g int) string { return fmt.Sprintf("%dg.%dgb", c, g) }
	var e [7]Engines
	if s.eng != nil {
		e = *s.eng
	}
	return Model{
		Key: s.key, Product: s.product, OtherProducts: s.others, PCIDeviceIDs: s.pci,
		MemoryMiB: s.memMiB, MemorySlices: 8, ComputeSlices: 7,
		Profiles: []GIProfile{
			{ID: profile1Slice, InfoID: 19, Name: name(1, s.gb[0]), ComputeSlices: 1, MemorySlices: 1, MemoryMiB: s.mem[0], MaxCount: 7, Engines: e[0], Placements: placements(1, 0, 1, 2, 3, 4, 5, 6)},
			{ID: profile1SliceRev1, InfoID: 20, Name: name(1, s.gb[0]) + VariantMediaExtensions, ComputeSlices: 1, MemorySlices: 1, MemoryMiB: s.mem[0], MaxCount: 1, MediaExtensions: true, Engines: e[1], Placements: placements(1, 0, 1, 2, 3, 4, 5, 6)},
			{ID: profile1SliceRev2, InfoID: 15, Name: name(1, s.gb[1]), ComputeSlices: 1, MemorySlices: 2, MemoryMiB: s.mem[1], MaxCount: 4, Engines: e[2], Placements: placements(2, 0, 2, 4, 6)},
			{ID: profile2Slice, InfoID: 14, Name: name(2, s.gb[2]), ComputeSlices: 2, MemorySlices: 2, MemoryMiB: s.mem[1], MaxCount: 3, Engines: e[3], Placements: placements(2, 0, 2, 4)},
			{ID: profile3Slice, InfoID: 9, Name: name(3, s.gb[3]), ComputeSlices: 3, MemorySlices: 4, MemoryMiB: s.mem[2], MaxCount: 2, Engines: e[4], Placements: placements(4, 0, 4)},
			{ID: profile4Slice, InfoID: 5, Name: name(4, s.gb[4]), ComputeSlices: 4, MemorySlices: 4, MemoryMiB: s.mem[2], MaxCount: 1, Engines: e[5], Placements: placements(4, 0)},
			{ID: profile7Slice, InfoID: 0, Name: name(7, s.gb[5]), ComputeSlices: 7, MemorySlices: 8, MemoryMiB: s.mem[3], MaxCount: 1, Engines: e[6], Placements: placements(8, 0)},
		},
	}
}

// eightSliceModels are the 8-slice models, oldest first. docs/hardware.md
// says for each where its figures come from and which are derived.
func eightSliceModels() []eightSlice {
	return []eightSlice{
		{key: "A100-40GB", product: "NVIDIA A100-SXM4-40GB", others: []string{"NVIDIA A100-PCIE-40GB"},
			pci: []uint32{0x20B010DE, 0x20B110DE, 0x20F110DE, 0x20F610DE}, memMiB: 40960,
			mem: [4]uint64{4864, 9984, 20096, 40448}, gb: [6]int{5, 10, 10, 20, 20, 40}, eng: &ampereEngines},
		{key: "A100-80GB", product: "NVIDIA A100-SXM4-80GB", others: []string{"NVIDIA A100 80GB PCIe"},
			pci: []uint32{0x20B210DE, 0x20B510DE, 0x20F310DE, 0x20F510DE}, memMiB: 81920,
			mem: [4]uint64{9728, 19968, 40192, 81152}, gb: [6]int{10, 20, 20, 40, 40, 80}, eng: &ampereEngines},
		// Measured through NVML on an H100 80GB HBM3.
		{key: "H100-80GB", product: "NVIDIA H100 80GB HBM3", others: []string{"NVIDIA H100 PCIe", "NVIDIA H800", "NVIDIA H800 PCIe"},
			pci: []uint32{0x233010DE, 0x233110DE, 0x232210DE, 0x232410DE}, memMiB: 81559,
			mem: [4]uint64{9984, 20096, 40448, 81152}, gb: [6]int{10, 20, 20, 40, 40, 80}, eng: &hopperEngines},
		{key: "H100-94GB", product: "NVIDIA H100 NVL", others: []string{"NVIDIA H800 NVL"},
			pci: []uint32{0x232110DE, 0x233A10DE}, memMiB: 95830,
			mem: [4]uint64{11008, 22144, 47488, 95360}, gb: [6]int{12, 24, 24, 47, 47, 94}, eng: &hopperEngines},
		{key: "H100-96GB", product: "NVIDIA GH200 480GB", others: []string{"NVIDIA GH200 120GB", "NVIDIA H20"},
			pci: []uint32{0x233D10DE, 0x234210DE, 0x232910DE, 0x20B610DE}, memMiB: 97871,
			mem: [4]uint64{11904, 24064, 48384, 97408}, gb: [6]int{12, 24, 24, 48, 48, 96}, eng: &hopperEngines},
		{key: "H200-141GB", product: "NVIDIA H200", others: []string{"NVIDIA H200 NVL"},
			pci: []uint32{0x233510DE, 0x233B10DE}, memMiB: 143771,
			mem: [4]uint64{16384, 33280, 71424, 143360}, gb: [6]int{18, 35, 35, 71, 71, 141}, eng: &hopperEngines},
		{key: "GH200-144GB", product: "NVIDIA GH200 144G HBM3e",
			pci: []uint32{0x234810DE}, memMiB: 146831,
			mem: [4]uint64{18048, 36352, 72960, 146432}, gb: [6]int{18, 36, 36, 72, 72, 144}, eng: &hopperEngines},
		{key: "B200-180GB", product: "NVIDIA B200",
			pci: []uint32{0x290110DE}, memMiB: 183359,
			mem: [4]uint64{22528, 45440, 91136, 182912}, gb: [6]int{23, 45, 45, 90, 90, 180}, eng: &b200Engines},
		{key: "GB200-186GB", product: "NVIDIA GB200",
			pci: []uint32{0x294110DE}, memMiB: 189471,
			mem: [4]uint64{23296, 46976, 94208, 189056}, gb: [6]int{23, 47, 47, 93, 93, 186}, eng: &gb200Engines},
		{key: "B300-288GB", product: "NVIDIA B300 SXM6 AC",
			pci: []uint32{0x318210DE}, memMiB: 275040,
			mem: [4]uint64{34048, 68352, 136960, 274560}, gb: [6]int{34, 67, 67, 135, 135, 269}, eng: &b200Engines},
		{key: "GB300-288GB", product: "NVIDIA GB300",
			pci: []uint32{0x31C210DE}, memMiB: 284208,
			mem: [4]uint64{35200, 70656, 141568, 283776}, gb: [6]int{35, 70, 70, 139, 139, 278}, eng: &gb200Engines},
	}
}

// a30 is the A30: 4 memory and 4 compute slices, +me on 1g and 2g.
func a30() Model {
	return Model{
		Key: "A30-24GB", Product: "NVIDIA A30", PCIDeviceIDs: []uint32{0x20B710DE},
		MemoryMiB: 24576, MemorySlices: 4, ComputeSlices: 4,
		Profiles: []GIProfile{
			{ID: profile1Slice, InfoID: 14, Name: "1g.6gb", ComputeSlices: 1, MemorySlices: 1, MemoryMiB: 5888, MaxCount: 4, Engines: eng(14, 1, 0, 0, 0, 0), Placements: placements(1, 0, 1, 2, 3)},
			{ID: profile1SliceRev1, InfoID: 21, Name: "1g.6gb+me", ComputeSlices: 1, MemorySlices: 1, MemoryMiB: 5888, MaxCount: 1, MediaExtensions: true, Engines: eng(14, 1, 1, 0, 1, 1), Placements: placements(1, 0, 1, 2, 3)},
			{ID: profile2Slice, InfoID: 5, Name: "2g.12gb", ComputeSlices: 2, MemorySlices: 2, MemoryMiB: 12032, MaxCount: 2, Engines: eng(28, 2, 2, 0, 0, 0), Placements: placements(2, 0, 2)},
			{ID: profile2SliceRev1, InfoID: 6, Name: "2g.12gb+me", ComputeSlices: 2, MemorySlices: 2, MemoryMiB: 12032, MaxCount: 1, MediaExtensions: true, Engines: eng(28, 2, 2, 0, 1, 1), Placements: placements(2, 0, 2)},
			{ID: profile4Slice, InfoID: 0, Name: "4g.24gb", ComputeSlices: 4, MemorySlices: 4, MemoryMiB: 24320, MaxCount: 1, Engines: eng(56, 4, 4, 0, 1, 1), Placements: placements(4, 0)},
		},
	}
}

// rtxPro6000 is the RTX PRO 6000 Blackwell (all three editions): 4 compute
// slices over a placement grid of 12 units (a quarter of the GPU is 3
// units), and the variants +me, +me.all, -me and +gfx. Memory sizes are the
// ones NVML reports (1g: 24192 MiB; 2g and 4g from nvidia-smi's GiB).
// The InfoIDs are those nvidia-smi mig -lgip lists on a Server Edition.
func rtxPro6000() Model {
	const mem1, mem2, mem4 = 24192, 48512, 97408
	// media gives a variant its share of the media engines: n decoders,
	// encoders and JPEG decoders, an OFA with the media extensions, all
	// four of each with +me.all, none with -me.
	media := func(e Engines, variant string, n int) Engines {
		switch variant {
		case VariantNoMedia:
			n = 0
		case VariantAllMedia:
			n, e.OFAs = 4, 1
		case VariantMediaExtensions:
			e.OFAs = 1
		}
		e.Decoders, e.Encoders, e.JPEGs = n, n, n
		return e
	}
	quarter := func(id, infoID int, variant string, maxCount int) GIProfile {
		return GIProfile{ID: id, InfoID: infoID, Name: "1g.24gb" + variant, ComputeSlices: 1, MemorySlices: 3, MemoryMiB: mem1, MaxCount: maxCount,
			MediaExtensions: variant == VariantMediaExtensions || variant == VariantAllMedia,
			Engines:         media(Engines{Multiprocessors: 46, CopyEngines: 1}, variant, 1), Placements: placements(3, 0, 3, 6, 9)}
	}
	half := func(id, infoID int, variant string, maxCount int) GIProfile {
		return GIProfile{ID: id, InfoID: infoID, Name: "2g.48gb" + variant, ComputeSlices: 2, MemorySlices: 6, MemoryMiB: mem2, MaxCount: maxCount,
			MediaExtensions: variant == VariantAllMedia,
			Engines:         media(Engines{Multiprocessors: 94, CopyEngines: 2}, variant, 2), Placements: placements(6, 0, 6)}
	}
	whole := func(id, infoID int, variant string) GIProfile {
		return GIProfile{ID: id, InfoID: infoID, Name: "4g.96gb" + variant, ComputeSlices: 4, MemorySlices: 12, MemoryMiB: mem4, MaxCount: 1,
			Engines: eng(188, 4, 4, 4, 4, 1), Placements: placements(12, 0)}
	}
	return Model{
		Key: "RTX-PRO-6000-96GB", Product: "NVIDIA RTX PRO 6000 Blackwell Server Edition",
		OtherProducts: []string{"NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"},
		PCIDeviceIDs:  []uint32{0x2BB510DE, 0x2BB110DE, 0x2BB410DE},
		MemoryMiB:     97887, MemorySlices: 12, ComputeSlices: 4,
		Profiles: []GIProfile{
			quarter(profile1Slice, 14, "", 4),
			quarter(profile1SliceRev1, 21, VariantMediaExtensions, 1),
			quarter(profile1SliceAllME, 65, VariantAllMedia, 1),
			quarter(profile1SliceNoME, 67, VariantNoMedia, 4),
			quarter(profile1SliceGfx, 47, VariantGraphics, 4),
			half(profile2Slice, 5, "", 2),
			half(profile2SliceAllME, 64, VariantAllMedia, 1),
			half(profile2SliceNoME, 66, VariantNoMedia, 2),
			half(profile2SliceGfx, 35, VariantGraphics, 2),
			whole(profile4Slice, 0, ""),
			whole(profile4SliceGfx, 32, VariantGraphics),
		},
	}
}

// Catalogue returns the built-in models of docs/hardware.md, in a
// fixed order: the 8-slice models oldest first, then the A30 and the RTX
// PRO 6000. Each call returns a fresh copy the caller may change.
func Catalogue() []Model {
	var out []Model
	for _, s := range eightSliceModels() {
		out = append(out, s.model())
	}
	return append(out, a30(), rtxPro6000())
}
