package partition

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
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
	// OtherProducts are further names NVML reports for boards of the same
	// model ("NVIDIA H100 PCIe", "NVIDIA H800"), matched like Product.
	OtherProducts []string `json:"otherProducts,omitempty"`
	// PCIDeviceIDs are the PCI device IDs of the model's boards, each the
	// device ID in the upper and the vendor ID in the lower 16 bits
	// (0x233010DE), as NVML's pciDeviceId and NVIDIA's MIG configurations
	// write them. The simulator reports the first.
	PCIDeviceIDs []uint32 `json:"pciDeviceIDs,omitempty"`
	// MemoryMiB is the GPU's total memory.
	MemoryMiB uint64 `json:"memoryMiB"`
	// MemorySlices and ComputeSlices are the GPU's MIG slices. MemorySlices
	// counts the units NVML gives placements in: 8 on the A100, H100, H200
	// and B200, 4 on the A30, 12 on the RTX PRO 6000 Blackwell (where a
	// quarter of the GPU is 3 units).
	MemorySlices  int `json:"memorySlices"`
	ComputeSlices int `json:"computeSlices"`
	// Profiles are the GPU instance profiles, smallest first (lessProfile).
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

// HasPCIDeviceID reports whether id is one of the model's PCI device IDs.
func (m *Model) HasPCIDeviceID(id uint32) bool {
	return slices.Contains(m.PCIDeviceIDs, id)
}

// MediaEngines returns the media engines the whole GPU has: for each kind
// (video decoders, encoders, JPEG decoders, optical flow accelerators) the
// most any one profile holds, which is the whole-GPU profile's. The
// instances on a GPU share these; a "+me.all" instance takes them all.
func (m *Model) MediaEngines() Engines {
	var total Engines
	for _, p := range m.Profiles {
		total.Decoders = max(total.Decoders, p.Decoders)
		total.Encoders = max(total.Encoders, p.Encoders)
		total.JPEGs = max(total.JPEGs, p.JPEGs)
		total.OFAs = max(total.OFAs, p.OFAs)
	}
	return total
}

// hasProduct reports whether NVML's product name is one of the model's,
// ignoring case and surrounding space.
func (m *Model) hasProduct(product string) bool {
	product = strings.TrimSpace(product)
	if product == "" {
		return false
	}
	if strings.EqualFold(m.Product, product) {
		return true
	}
	for _, p := range m.OtherProducts {
		if strings.EqualFold(p, product) {
			return true
		}
	}
	return false
}

// Variants of a MIG profile, as NVIDIA's profile names end: "1g.24gb+me.all"
// is the 1g.24gb profile with all media engines.
const (
	// VariantMediaExtensions ("+me") adds the GPU's media extensions (the
	// optical flow accelerator, and on older GPUs the video and JPEG
	// decoders); one instance per GPU at most, together with
	// VariantAllMedia.
	VariantMediaExtensions = "+me"
	// VariantAllMedia ("+me.all") takes every media engine of the GPU; one
	// instance per GPU at most, together with VariantMediaExtensions.
	VariantAllMedia = "+me.all"
	// VariantNoMedia ("-me") has no media engines at all.
	VariantNoMedia = "-me"
	// VariantGraphics ("+gfx") also runs graphics APIs (RTX PRO Blackwell).
	VariantGraphics = "+gfx"
)

// SplitProfileName splits a MIG profile name into its size and its variant:
// "1g.24gb+me.all" is "1g.24gb" and "+me.all", "1g.10gb" is "1g.10gb" and "".
func SplitProfileName(name string) (size, variant string) {
	if i := strings.IndexAny(name, "+-"); i >= 0 {
		return name[:i], name[i:]
	}
	return name, ""
}

// variantRank orders a size's variants: plain, +me, +me.all, -me, +gfx,
// then anything else.
func variantRank(name string) int {
	_, v := SplitProfileName(name)
	for i, x := range []string{"", VariantMediaExtensions, VariantAllMedia, VariantNoMedia, VariantGraphics} {
		if v == x {
			return i
		}
	}
	return 5
}

// FormatPCIDeviceID writes a PCI device ID the way NVIDIA's MIG
// configurations filter on it: "0x233010DE".
func FormatPCIDeviceID(id uint32) string { return fmt.Sprintf("0x%08X", id) }

// ParsePCIDeviceID reads a PCI device ID written as FormatPCIDeviceID
// writes it, in either case and with or without the "0x".
func ParsePCIDeviceID(s string) (uint32, error) {
	t := strings.TrimSpace(s)
	t = strings.TrimPrefix(strings.TrimPrefix(t, "0x"), "0X")
	if len(t) != 8 {
		return 0, fmt.Errorf("PCI device ID %q: want 8 hex digits, e.g. 0x233010DE: %w", s, ErrInvalidArgument)
	}
	id, err := strconv.ParseUint(t, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("PCI device ID %q: want 8 hex digits, e.g. 0x233010DE: %w", s, ErrInvalidArgument)
	}
	return uint32(id), nil
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

// ModelForPCIDeviceID returns the catalogue model whose boards carry that
// PCI device ID (0x233010DE), or false when the catalogue lacks it.
func ModelForPCIDeviceID(id uint32) (Model, bool) {
	if id == 0 {
		return Model{}, false
	}
	for _, m := range Catalogue() {
		if m.HasPCIDeviceID(id) {
			return m, true
		}
	}
	return Model{}, false
}

// ModelForProduct returns the catalogue model for a product name and memory
// size as NVML reports them, or false when the catalogue lacks it: the
// model that lists the product name (with memory of the same marketing
// size), else the one whose key the name and memory make (ModelKey).
func ModelForProduct(product string, memMiB uint64) (Model, bool) {
	return IdentifyModel(product, memMiB, 0)
}

// IdentifyModel returns the catalogue model of a GPU from what NVML
// reports of it: by its PCI device ID first (0 when unknown), then by its
// product name, then by the key the name and memory make (ModelKey). Names
// differ between boards and drivers (an H20 and a GH200 are both the
// "H100-96GB" model), the PCI device ID does not.
func IdentifyModel(product string, memMiB uint64, pciDeviceID uint32) (Model, bool) {
	if m, ok := ModelForPCIDeviceID(pciDeviceID); ok {
		return m, true
	}
	cat := Catalogue()
	for _, m := range cat {
		if m.hasProduct(product) && (memMiB == 0 || marketingGB(memMiB) == marketingGB(m.MemoryMiB)) {
			return m, true
		}
	}
	key := ModelKey(product, memMiB)
	for _, m := range cat {
		if m.Key == key {
			return m, true
		}
	}
	return Model{}, false
}

// IdentifyModelKey returns the model key of a GPU: its catalogue model's
// (IdentifyModel), else the one its product name and memory make
// (ModelKey), so a GPU the catalogue lacks still gets one.
func IdentifyModelKey(product string, memMiB uint64, pciDeviceID uint32) string {
	if m, ok := IdentifyModel(product, memMiB, pciDeviceID); ok {
		return m.Key
	}
	return ModelKey(product, memMiB)
}

var (
	familyRE = regexp.MustCompile(`\b([A-Z]+[0-9]+[A-Z]?)\b`)
	rtxProRE = regexp.MustCompile(`^RTX PRO ([0-9]+)\b`)
)

// ModelKey derives carve's short model key (family and memory, e.g.
// "H100-80GB", "RTX-PRO-6000-96GB") from a product name and memory size.
func ModelKey(product string, memMiB uint64) string {
	p := strings.ToUpper(strings.TrimPrefix(strings.TrimSpace(product), "NVIDIA "))
	family := p
	if m := rtxProRE.FindStringSubmatch(p); m != nil {
		family = "RTX-PRO-" + m[1]
	} else if m := familyRE.FindStringSubmatch(strings.NewReplacer("-", " ").Replace(p)); m != nil {
		family = m[1]
	}
	return fmt.Sprintf("%s-%dGB", family, marketingGB(memMiB))
}

// memoryGB rounds MiB up to whole GiB.
func memoryGB(mib uint64) uint64 { return (mib + 1023) / 1024 }

// marketingGB names a GPU's memory in the GB it is sold with. NVML reports
// somewhat less (81559 MiB for an 80GB H100, 23034 MiB for a 24GB L4,
// 275040 MiB for a 288GB B300), so a size within 8% below a marketing size
// is named after it.
func marketingGB(memMiB uint64) uint64 {
	sizes := [...]uint64{6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 80, 94, 96, 141, 144, 180, 186, 192, 288}
	gb := memoryGB(memMiB)
	for _, m := range sizes {
		if gb <= m && float64(memMiB) >= 0.92*float64(m*1024) {
			return m
		}
	}
	return gb
}

// ProfileName builds a MIG profile name from compute slices and memory
// ("1g.10gb"); mediaExtensions appends "+me". NVIDIA's own names come from
// the GPU's marketing memory and can differ (an H200's 1g.18gb has 16384
// MiB), so this is only a fallback where NVML gives no name.
func ProfileName(computeSlices int, memMiB uint64, mediaExtensions bool) string {
	n := fmt.Sprintf("%dg.%dgb", computeSlices, memoryGB(memMiB))
	if mediaExtensions {
		n += VariantMediaExtensions
	}
	return n
}

// ModelFromDevice reads a model's geometry from a device in MIG mode: the
// profiles NVML reports with their placements. The result's Product comes
// from the device, its Key from the catalogue model the device is
// (IdentifyModelKey), so a GH200 480GB is "H100-96GB" as in the catalogue.
func ModelFromDevice(d Device) (Model, error) {
	product, err := d.Name()
	if err != nil {
		return Model{}, fmt.Errorf("GPU %d: name: %w", d.Index(), err)
	}
	mem, err := d.MemoryMiB()
	if err != nil {
		return Model{}, fmt.Errorf("GPU %d: memory: %w", d.Index(), err)
	}
	pciID, err := devicePCIID(d)
	if err != nil {
		return Model{}, err
	}
	profiles, err := d.GPUInstanceProfiles()
	if err != nil {
		return Model{}, fmt.Errorf("GPU %d: GPU instance profiles: %w", d.Index(), err)
	}
	m := Model{Key: IdentifyModelKey(product, mem, pciID), Product: product, MemoryMiB: mem, Profiles: profiles}
	if pciID != 0 {
		m.PCIDeviceIDs = []uint32{pciID}
	}
	for _, p := range profiles {
		for _, pl := range p.Placements {
			m.MemorySlices = max(m.MemorySlices, pl.End())
		}
		m.ComputeSlices = max(m.ComputeSlices, p.ComputeSlices)
	}
	sort.SliceStable(m.Profiles, func(i, j int) bool { return lessProfile(m.Profiles[i], m.Profiles[j]) })
	return m, nil
}

// devicePCIID reads a device's PCI device ID; a device that cannot say
// (ErrNotSupported), or none at all, has 0, which identifies no model.
func devicePCIID(d Device) (uint32, error) {
	if d == nil {
		return 0, nil
	}
	id, err := d.PCIDeviceID()
	switch {
	case err == nil:
		return id, nil
	case errors.Is(err, ErrNotSupported):
		return 0, nil
	default:
		return 0, fmt.Errorf("GPU %d: PCI device ID: %w", d.Index(), err)
	}
}

// lessProfile orders profiles smallest first: by compute slices, then
// memory slices, then variant (plain, +me, +me.all, -me, +gfx).
func lessProfile(a, b GIProfile) bool {
	if a.ComputeSlices != b.ComputeSlices {
		return a.ComputeSlices < b.ComputeSlices
	}
	if a.MemorySlices != b.MemorySlices {
		return a.MemorySlices < b.MemorySlices
	}
	if ra, rb := variantRank(a.Name), variantRank(b.Name); ra != rb {
		return ra < rb
	}
	return !a.MediaExtensions && b.MediaExtensions
}
