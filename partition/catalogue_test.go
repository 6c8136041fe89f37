package partition

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

func TestModelKey(t *testing.T) {
	tests := []struct {
		product string
		mem     uint64
		want    string
	}{
		{"NVIDIA A100-SXM4-40GB", 40960, "A100-40GB"},
		{"NVIDIA A100-SXM4-80GB", 81920, "A100-80GB"},
		{"NVIDIA A100 80GB PCIe", 81920, "A100-80GB"},
		{"NVIDIA H100 80GB HBM3", 81559, "H100-80GB"},
		{"NVIDIA H100 NVL", 95830, "H100-94GB"},
		{"NVIDIA H200", 143771, "H200-141GB"},
		{"NVIDIA GH200 144G HBM3e", 146831, "GH200-144GB"},
		{"NVIDIA GH200 480GB", 97871, "GH200-96GB"}, // the catalogue knows it as H100-96GB (IdentifyModel)
		{"NVIDIA B200", 183359, "B200-180GB"},
		{"NVIDIA GB200", 189471, "GB200-186GB"},
		{"NVIDIA B300 SXM6 AC", 275040, "B300-288GB"},
		{"NVIDIA GB300", 284208, "GB300-288GB"},
		{"NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887, "RTX-PRO-6000-96GB"},
		{"NVIDIA RTX PRO 5000 72GB Blackwell", 73000, "RTX-PRO-5000-72GB"},
		{"NVIDIA RTX A6000", 49140, "A6000-48GB"},
		{"NVIDIA A30", 24576, "A30-24GB"},
		{"NVIDIA L4", 23034, "L4-24GB"},
		{"Tesla T4", 15360, "T4-16GB"},
	}
	for _, tt := range tests {
		if got := ModelKey(tt.product, tt.mem); got != tt.want {
			t.Errorf("ModelKey(%q, %d) = %q, want %q", tt.product, tt.mem, got, tt.want)
		}
	}
}

// nvidiaGB is how NVIDIA names the memory of a profile: the whole GPU's
// gigabytes (the name of its largest profile) times the profile's share
// of the memory slices, rounded half up. It is not the profile's MiB: an
// H200's 1g.18gb has 16384 MiB.
func nvidiaGB(fullGB, slices, total int) int {
	return int(math.Floor(float64(fullGB*slices)/float64(total) + 0.5))
}

// gbOf returns the memory part of a profile name ("1g.24gb+gfx": 24).
func gbOf(t *testing.T, name string) int {
	t.Helper()
	size, _ := SplitProfileName(name)
	_, mem, ok := strings.Cut(size, ".")
	gb, err := strconv.Atoi(strings.TrimSuffix(mem, "gb"))
	if !ok || err != nil || !strings.HasSuffix(mem, "gb") {
		t.Fatalf("profile name %q: no memory part", name)
	}
	return gb
}

// TestCatalogueConsistent checks what every model must satisfy, whatever
// its source: it is found again by its key, product names and PCI device
// IDs (which no two models share); its profiles are sorted as
// ModelFromDevice sorts them, named as NVIDIA names them, placed inside the
// GPU, and hold no more memory than the GPU has.
func TestCatalogueConsistent(t *testing.T) {
	cat := Catalogue()
	owner := map[string]string{}
	claim := func(m Model, what string) {
		if o, dup := owner[strings.ToLower(what)]; dup && o != m.Key {
			t.Errorf("%s and %s both claim %s", o, m.Key, what)
		}
		owner[strings.ToLower(what)] = m.Key
	}
	for _, m := range cat {
		claim(m, "key "+m.Key)
		if lm, ok := LookupModel(strings.ToLower(m.Key)); !ok || lm.Key != m.Key {
			t.Errorf("LookupModel(%q) failed", m.Key)
		}
		for _, p := range append([]string{m.Product}, m.OtherProducts...) {
			claim(m, "product "+p)
			if got, ok := ModelForProduct(p, m.MemoryMiB); !ok || got.Key != m.Key {
				t.Errorf("%s: ModelForProduct(%q, %d) = %q, %v", m.Key, p, m.MemoryMiB, got.Key, ok)
			}
		}
		if len(m.PCIDeviceIDs) == 0 {
			t.Errorf("%s: no PCI device IDs", m.Key)
		}
		for _, id := range m.PCIDeviceIDs {
			claim(m, FormatPCIDeviceID(id))
			if id&0xFFFF != 0x10DE {
				t.Errorf("%s: PCI device ID %s is not NVIDIA's (vendor 10DE)", m.Key, FormatPCIDeviceID(id))
			}
			if got, ok := IdentifyModel("some other name", 1, id); !ok || got.Key != m.Key {
				t.Errorf("%s: IdentifyModel by %s = %q, %v", m.Key, FormatPCIDeviceID(id), got.Key, ok)
			}
		}
		if !strings.HasSuffix(m.Key, fmt.Sprintf("-%dGB", marketingGB(m.MemoryMiB))) {
			t.Errorf("%s: %d MiB is sold as %d GB", m.Key, m.MemoryMiB, marketingGB(m.MemoryMiB))
		}
		if !sort.SliceIsSorted(m.Profiles, func(i, j int) bool { return lessProfile(m.Profiles[i], m.Profiles[j]) }) {
			t.Errorf("%s: profiles %v not in ModelFromDevice's order", m.Key, m.ProfileNames())
		}
		full := m.Profiles[len(m.Profiles)-1]
		if full.MemorySlices != m.MemorySlices || full.ComputeSlices != m.ComputeSlices || full.MemoryMiB > m.MemoryMiB {
			t.Errorf("%s: the largest profile %s is not the whole GPU (%d of %d MiB)", m.Key, full.Name, full.MemoryMiB, m.MemoryMiB)
		}
		fullGB := gbOf(t, full.Name)
		names, ids, bySlices := map[string]bool{}, map[int]bool{}, map[int]uint64{}
		for _, p := range m.Profiles {
			if names[p.Name] || ids[p.ID] {
				t.Errorf("%s: profile %s (ID %d) twice", m.Key, p.Name, p.ID)
			}
			names[p.Name], ids[p.ID] = true, true
			if !strings.HasPrefix(p.Name, strconv.Itoa(p.ComputeSlices)+"g.") {
				t.Errorf("%s: %s has %d compute slices", m.Key, p.Name, p.ComputeSlices)
			}
			if want := nvidiaGB(fullGB, p.MemorySlices, m.MemorySlices); gbOf(t, p.Name) != want {
				t.Errorf("%s: %s covers %d of %d memory slices, so NVIDIA names it %dgb", m.Key, p.Name, p.MemorySlices, m.MemorySlices, want)
			}
			_, v := SplitProfileName(p.Name)
			if me := v == VariantMediaExtensions || v == VariantAllMedia; p.MediaExtensions != me {
				t.Errorf("%s: %s media extensions %v", m.Key, p.Name, p.MediaExtensions)
			}
			if p.MediaExtensions && p.MaxCount != 1 {
				t.Errorf("%s: %s takes the media extensions but allows %d instances", m.Key, p.Name, p.MaxCount)
			}
			if p.MaxCount < 1 || p.MaxCount*p.ComputeSlices > m.ComputeSlices || p.MaxCount > len(p.Placements) {
				t.Errorf("%s: %s max count %d with %d placements", m.Key, p.Name, p.MaxCount, len(p.Placements))
			}
			// Instances that fill the GPU fit in its whole-GPU instance:
			// two H200 3g.71gb are not 2 x 72192 MiB on a 143360 MiB GPU.
			if n := uint64(m.MemorySlices / p.MemorySlices); n*p.MemoryMiB > full.MemoryMiB {
				t.Errorf("%s: %d x %s (%d MiB) exceed the whole GPU's %d MiB", m.Key, n, p.Name, p.MemoryMiB, full.MemoryMiB)
			}
			if mem, seen := bySlices[p.MemorySlices]; seen && mem != p.MemoryMiB {
				t.Errorf("%s: %s has %d MiB, other profiles on %d memory slices %d", m.Key, p.Name, p.MemoryMiB, p.MemorySlices, mem)
			}
			bySlices[p.MemorySlices] = p.MemoryMiB
			for i, pl := range p.Placements {
				if pl.Size != p.MemorySlices || pl.Start < 0 || pl.End() > m.MemorySlices || (i > 0 && p.Placements[i-1].Start >= pl.Start) {
					t.Errorf("%s: %s placement %v invalid", m.Key, p.Name, pl)
				}
			}
		}
		// More memory slices, more memory.
		var sizes []int
		for s := range bySlices {
			sizes = append(sizes, s)
		}
		sort.Ints(sizes)
		for i := 1; i < len(sizes); i++ {
			if bySlices[sizes[i]] <= bySlices[sizes[i-1]] {
				t.Errorf("%s: %d memory slices have %d MiB, %d have %d", m.Key, sizes[i], bySlices[sizes[i]], sizes[i-1], bySlices[sizes[i-1]])
			}
		}
	}
}

// eightSliceFact is one model of the 8-slice family as docs/hardware.md
// lists it, written out independently of the catalogue: its names in the
// order 1g, 1g+me, 1g (two slices), 2g, 3g, 4g, 7g, and the memory of an
// instance on 1, 2, 4 and 8 memory slices.
type eightSliceFact struct {
	key, product string
	pci          []uint32
	memMiB       uint64
	names        [7]string
	mem          [4]uint64
}

func eightSliceFacts() []eightSliceFact {
	return []eightSliceFact{
		{"A100-40GB", "NVIDIA A100-SXM4-40GB", []uint32{0x20B010DE, 0x20B110DE, 0x20F110DE, 0x20F610DE}, 40960,
			[7]string{"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"}, [4]uint64{4864, 9984, 20096, 40448}},
		{"A100-80GB", "NVIDIA A100-SXM4-80GB", []uint32{0x20B210DE, 0x20B510DE, 0x20F310DE, 0x20F510DE}, 81920,
			[7]string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}, [4]uint64{9728, 19968, 40192, 81152}},
		{"H100-80GB", "NVIDIA H100 80GB HBM3", []uint32{0x233010DE, 0x233110DE, 0x232210DE, 0x232410DE}, 81559,
			[7]string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}, [4]uint64{9984, 20096, 40448, 81152}},
		{"H100-94GB", "NVIDIA H100 NVL", []uint32{0x232110DE, 0x233A10DE}, 95830,
			[7]string{"1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"}, [4]uint64{11008, 22144, 47488, 95360}},
		{"H100-96GB", "NVIDIA GH200 480GB", []uint32{0x233D10DE, 0x234210DE, 0x232910DE, 0x20B610DE}, 97871,
			[7]string{"1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb"}, [4]uint64{11904, 24064, 48384, 97408}},
		{"H200-141GB", "NVIDIA H200", []uint32{0x233510DE, 0x233B10DE}, 143771,
			[7]string{"1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"}, [4]uint64{16384, 33280, 71424, 143360}},
		{"GH200-144GB", "NVIDIA GH200 144G HBM3e", []uint32{0x234810DE}, 146831,
			[7]string{"1g.18gb", "1g.18gb+me", "1g.36gb", "2g.36gb", "3g.72gb", "4g.72gb", "7g.144gb"}, [4]uint64{18048, 36352, 72960, 146432}},
		{"B200-180GB", "NVIDIA B200", []uint32{0x290110DE}, 183359,
			[7]string{"1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"}, [4]uint64{22528, 45440, 91136, 182912}},
		{"GB200-186GB", "NVIDIA GB200", []uint32{0x294110DE}, 189471,
			[7]string{"1g.23gb", "1g.23gb+me", "1g.47gb", "2g.47gb", "3g.93gb", "4g.93gb", "7g.186gb"}, [4]uint64{23296, 46976, 94208, 189056}},
		{"B300-288GB", "NVIDIA B300 SXM6 AC", []uint32{0x318210DE}, 275040,
			[7]string{"1g.34gb", "1g.34gb+me", "1g.67gb", "2g.67gb", "3g.135gb", "4g.135gb", "7g.269gb"}, [4]uint64{34048, 68352, 136960, 274560}},
		{"GB300-288GB", "NVIDIA GB300", []uint32{0x31C210DE}, 284208,
			[7]string{"1g.35gb", "1g.35gb+me", "1g.70gb", "2g.70gb", "3g.139gb", "4g.139gb", "7g.278gb"}, [4]uint64{35200, 70656, 141568, 283776}},
	}
}

// profileFact is one profile as the documentation lists it.
type profileFact struct {
	name            string
	id              int
	infoID          int // as nvidia-smi mig -lgip lists it
	compute, memory int // slices
	max             int
	starts          []int
	memMiB          uint64
	me              bool
}

func checkProfiles(t *testing.T, m Model, want []profileFact) {
	t.Helper()
	if len(m.Profiles) != len(want) {
		t.Errorf("%s: profiles %v, want %d", m.Key, m.ProfileNames(), len(want))
	}
	for _, w := range want {
		p, ok := m.Profile(w.name)
		if !ok {
			t.Errorf("%s: no profile %s", m.Key, w.name)
			continue
		}
		var starts []int
		for _, pl := range p.Placements {
			starts = append(starts, pl.Start)
			if pl.Size != w.memory {
				t.Errorf("%s: %s placement size %d, want %d", m.Key, w.name, pl.Size, w.memory)
			}
		}
		got := profileFact{p.Name, p.ID, p.InfoID, p.ComputeSlices, p.MemorySlices, p.MaxCount, starts, p.MemoryMiB, p.MediaExtensions}
		if fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("%s: profile\n got %v\nwant %v", m.Key, got, w)
		}
	}
}

func TestEightSliceModelFacts(t *testing.T) {
	facts := eightSliceFacts()
	var keys []string
	for _, f := range facts {
		keys = append(keys, f.key)
		t.Run(f.key, func(t *testing.T) {
			m, ok := LookupModel(f.key)
			if !ok {
				t.Fatalf("no model %s", f.key)
			}
			if m.Product != f.product || m.MemoryMiB != f.memMiB || !slices.Equal(m.PCIDeviceIDs, f.pci) ||
				m.MemorySlices != 8 || m.ComputeSlices != 7 {
				t.Errorf("model %s %q %d MiB %v %d/%d slices", m.Key, m.Product, m.MemoryMiB, m.PCIDeviceIDs, m.MemorySlices, m.ComputeSlices)
			}
			n, mem := f.names, f.mem
			checkProfiles(t, m, []profileFact{
				{n[0], 0, 19, 1, 1, 7, []int{0, 1, 2, 3, 4, 5, 6}, mem[0], false},
				{n[1], 7, 20, 1, 1, 1, []int{0, 1, 2, 3, 4, 5, 6}, mem[0], true},
				{n[2], 9, 15, 1, 2, 4, []int{0, 2, 4, 6}, mem[1], false},
				{n[3], 1, 14, 2, 2, 3, []int{0, 2, 4}, mem[1], false},
				{n[4], 2, 9, 3, 4, 2, []int{0, 4}, mem[2], false},
				{n[5], 3, 5, 4, 4, 1, []int{0}, mem[2], false},
				{n[6], 4, 0, 7, 8, 1, []int{0}, mem[3], false},
			})
		})
	}
	var cat []string
	for _, m := range Catalogue() {
		if m.MemorySlices == 8 {
			cat = append(cat, m.Key)
		}
	}
	if !slices.Equal(cat, keys) {
		t.Errorf("8-slice models %v, the facts cover %v", cat, keys)
	}
}

func TestA30Facts(t *testing.T) {
	m, _ := LookupModel("a30-24gb")
	if m.Product != "NVIDIA A30" || !slices.Equal(m.PCIDeviceIDs, []uint32{0x20B710DE}) || m.MemorySlices != 4 || m.ComputeSlices != 4 {
		t.Errorf("A30 = %+v", m)
	}
	checkProfiles(t, m, []profileFact{
		{"1g.6gb", 0, 14, 1, 1, 4, []int{0, 1, 2, 3}, 5888, false},
		{"1g.6gb+me", 7, 21, 1, 1, 1, []int{0, 1, 2, 3}, 5888, true},
		{"2g.12gb", 1, 5, 2, 2, 2, []int{0, 2}, 12032, false},
		{"2g.12gb+me", 8, 6, 2, 2, 1, []int{0, 2}, 12032, true},
		{"4g.24gb", 3, 0, 4, 4, 1, []int{0}, 24320, false},
	})
}

// The RTX PRO 6000 Blackwell as NVIDIA's MIG user guide and nvidia-smi on
// one list it: quarters at 0, 3, 6, 9 of a 12-unit grid, halves at 0 and 6.
func TestRTXPro6000Facts(t *testing.T) {
	m, ok := LookupModel("rtx-pro-6000-96gb")
	if !ok {
		t.Fatal("no RTX-PRO-6000-96GB")
	}
	if m.Product != "NVIDIA RTX PRO 6000 Blackwell Server Edition" || m.MemoryMiB != 97887 ||
		!slices.Equal(m.PCIDeviceIDs, []uint32{0x2BB510DE, 0x2BB110DE, 0x2BB410DE}) || m.MemorySlices != 12 || m.ComputeSlices != 4 {
		t.Errorf("RTX PRO 6000 = %q %d MiB %v %d/%d slices", m.Product, m.MemoryMiB, m.PCIDeviceIDs, m.MemorySlices, m.ComputeSlices)
	}
	q, h := []int{0, 3, 6, 9}, []int{0, 6}
	checkProfiles(t, m, []profileFact{
		{"1g.24gb", 0, 14, 1, 3, 4, q, 24192, false},
		{"1g.24gb+me", 7, 21, 1, 3, 1, q, 24192, true},
		{"1g.24gb+me.all", 15, 65, 1, 3, 1, q, 24192, true},
		{"1g.24gb-me", 13, 67, 1, 3, 4, q, 24192, false},
		{"1g.24gb+gfx", 10, 47, 1, 3, 4, q, 24192, false},
		{"2g.48gb", 1, 5, 2, 6, 2, h, 48512, false},
		{"2g.48gb+me.all", 16, 64, 2, 6, 1, h, 48512, true},
		{"2g.48gb-me", 14, 66, 2, 6, 2, h, 48512, false},
		{"2g.48gb+gfx", 11, 35, 2, 6, 2, h, 48512, false},
		{"4g.96gb", 3, 0, 4, 12, 1, []int{0}, 97408, false},
		{"4g.96gb+gfx", 12, 32, 4, 12, 1, []int{0}, 97408, false},
	})
}

// TestPlaceVariants checks the rules the variants bring, on the RTX PRO
// 6000: one instance with media extensions (+me or +me.all) per GPU, the
// other variants limited only by their counts and the slices.
func TestPlaceVariants(t *testing.T) {
	m, _ := LookupModel("RTX-PRO-6000-96GB")
	tests := []struct {
		counts map[string]int
		fits   bool
		words  string
	}{
		{map[string]int{"1g.24gb+me.all": 1, "1g.24gb-me": 3}, true, ""},
		{map[string]int{"2g.48gb+me.all": 1, "2g.48gb-me": 1}, true, ""},
		{map[string]int{"1g.24gb+me": 1, "1g.24gb": 3}, true, ""},
		{map[string]int{"1g.24gb+gfx": 4}, true, ""},
		{map[string]int{"2g.48gb+gfx": 1, "1g.24gb+gfx": 1, "1g.24gb-me": 1}, true, ""},
		{map[string]int{"2g.48gb": 1, "2g.48gb+gfx": 1}, true, ""},
		{map[string]int{"4g.96gb+gfx": 1}, true, ""},
		{map[string]int{"1g.24gb+me": 1, "1g.24gb+me.all": 1}, false, "at most one +me instance"},
		{map[string]int{"2g.48gb+me.all": 1, "1g.24gb+me": 1}, false, "at most one +me instance"},
		{map[string]int{"1g.24gb+me.all": 2}, false, "at most 1 fits"},
		{map[string]int{"1g.24gb-me": 5}, false, "at most 4 fit"},
		{map[string]int{"1g.24gb": 2, "1g.24gb-me": 2, "1g.24gb+gfx": 1}, false, "compute slices"},
		{map[string]int{"4g.96gb": 1, "1g.24gb-me": 1}, false, "compute slices"},
		{map[string]int{"2g.48gb": 2, "1g.24gb": 1}, false, "compute slices"},
		{map[string]int{"4g.96gb": 1, "4g.96gb+gfx": 1}, false, "compute slices"},
		{map[string]int{"1g.24gb+gfx": 1, "1g.24gb": 1, "2g.48gb-me": 1}, true, ""},
		{map[string]int{"1g.24gb+me.all": 1, "1g.24gb": 1}, false, "1g.24gb x1 and 1g.24gb+me.all x1 need 5 of 4 video decoders, 5 of 4 video encoders, 5 of 4 JPEG decoders on a GPU"},
		{map[string]int{"2g.48gb+me.all": 1, "1g.24gb+gfx": 1}, false, "need 5 of 4 video decoders"},
		{map[string]int{"1g.24gb+me.all": 1, "2g.48gb": 1}, false, "need 6 of 4 video decoders"},
		{map[string]int{"1g.24gb+me": 1, "1g.24gb": 2, "1g.24gb+gfx": 1}, true, ""},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.counts), func(t *testing.T) {
			slots, err := Place(m, tt.counts)
			if tt.fits {
				if err != nil {
					t.Fatalf("Place: %v", err)
				}
				// Every instance at one of its profile's placements.
				for _, s := range slots {
					p, _ := m.Profile(s.Profile)
					if !slices.Contains(p.Placements, s.Placement) {
						t.Errorf("%s at %v", s.Profile, s.Placement)
					}
				}
				return
			}
			if !errors.Is(err, ErrCannotPlace) || !strings.Contains(err.Error(), tt.words) {
				t.Errorf("Place error %v, want one saying %q", err, tt.words)
			}
		})
	}
}

func TestIdentifyModel(t *testing.T) {
	tests := []struct {
		product string
		mem     uint64
		pci     uint32
		want    string // "" for none
	}{
		{"NVIDIA H100 80GB HBM3", 81559, 0x233010DE, "H100-80GB"},
		{"NVIDIA H800 PCIe", 81559, 0, "H100-80GB"},
		{"NVIDIA H800", 81559, 0x232410DE, "H100-80GB"},
		{"NVIDIA H100 NVL", 95830, 0, "H100-94GB"},
		{"NVIDIA H800 NVL", 95830, 0x233A10DE, "H100-94GB"},
		// A product name with another memory size is not that model: an
		// H100 PCIe with 94 GB is keyed by its memory.
		{"NVIDIA H100 PCIe", 95830, 0, "H100-94GB"},
		{"NVIDIA GH200 480GB", 97871, 0, "H100-96GB"},
		{"NVIDIA GH200 120GB", 97871, 0x234210DE, "H100-96GB"},
		{"nvidia h20", 97871, 0, "H100-96GB"},
		{"NVIDIA H20", 97871, 0x232910DE, "H100-96GB"},
		{"NVIDIA H200 NVL", 143771, 0x233B10DE, "H200-141GB"},
		{"NVIDIA GH200 144G HBM3e", 146831, 0x234810DE, "GH200-144GB"},
		{"NVIDIA B200", 183359, 0, "B200-180GB"},
		{"NVIDIA GB200", 189471, 0x294110DE, "GB200-186GB"},
		{"NVIDIA B300 SXM6 AC", 275040, 0x318210DE, "B300-288GB"},
		{"NVIDIA GB300", 284208, 0, "GB300-288GB"},
		{"NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", 97887, 0, "RTX-PRO-6000-96GB"},
		{"NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 97887, 0x2BB110DE, "RTX-PRO-6000-96GB"},
		{"", 0, 0x2BB510DE, "RTX-PRO-6000-96GB"},
		{"NVIDIA A30", 24576, 0x20B710DE, "A30-24GB"},
		{"NVIDIA L4", 23034, 0x27B810DE, ""},
		{"NVIDIA RTX PRO 5000 Blackwell", 48000, 0x2BB310DE, ""},
		{"", 0, 0, ""},
	}
	for _, tt := range tests {
		m, ok := IdentifyModel(tt.product, tt.mem, tt.pci)
		if ok != (tt.want != "") || m.Key != tt.want {
			t.Errorf("IdentifyModel(%q, %d, %s) = %q, %v; want %q", tt.product, tt.mem, FormatPCIDeviceID(tt.pci), m.Key, ok, tt.want)
		}
		key := IdentifyModelKey(tt.product, tt.mem, tt.pci)
		if want := tt.want; (want != "" && key != want) || (want == "" && key != ModelKey(tt.product, tt.mem)) {
			t.Errorf("IdentifyModelKey(%q, %d, %s) = %q", tt.product, tt.mem, FormatPCIDeviceID(tt.pci), key)
		}
	}
	if _, ok := ModelForPCIDeviceID(0); ok {
		t.Error("ModelForPCIDeviceID(0) found a model")
	}
}

func TestPCIDeviceIDText(t *testing.T) {
	if got := FormatPCIDeviceID(0x2BB510DE); got != "0x2BB510DE" {
		t.Errorf("FormatPCIDeviceID = %q", got)
	}
	for _, s := range []string{"0x2BB510DE", "0x2bb510de", "2BB510DE", " 0X2BB510DE "} {
		if id, err := ParsePCIDeviceID(s); err != nil || id != 0x2BB510DE {
			t.Errorf("ParsePCIDeviceID(%q) = %#x, %v", s, id, err)
		}
	}
	for _, s := range []string{"", "0x2BB5", "0x2BB510DEFF", "0xZZB510DE", "0x-BB510DE"} {
		if _, err := ParsePCIDeviceID(s); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("ParsePCIDeviceID(%q) error %v, want ErrInvalidArgument", s, err)
		}
	}
}

func TestSplitProfileName(t *testing.T) {
	tests := []struct{ name, size, variant string }{
		{"1g.10gb", "1g.10gb", ""},
		{"1g.10gb+me", "1g.10gb", VariantMediaExtensions},
		{"1g.24gb+me.all", "1g.24gb", VariantAllMedia},
		{"2g.48gb-me", "2g.48gb", VariantNoMedia},
		{"4g.96gb+gfx", "4g.96gb", VariantGraphics},
	}
	for _, tt := range tests {
		if size, v := SplitProfileName(tt.name); size != tt.size || v != tt.variant {
			t.Errorf("SplitProfileName(%q) = %q, %q", tt.name, size, v)
		}
	}
}

// lessProfile sorts the variants of one size plain, +me, +me.all, -me, +gfx,
// whatever order NVML lists them in.
func TestLessProfileVariants(t *testing.T) {
	m, _ := LookupModel("RTX-PRO-6000-96GB")
	want := m.ProfileNames()
	ps := slices.Clone(m.Profiles)
	slices.Reverse(ps)
	sort.SliceStable(ps, func(i, j int) bool { return lessProfile(ps[i], ps[j]) })
	var got []string
	for _, p := range ps {
		got = append(got, p.Name)
	}
	if !slices.Equal(got, want) {
		t.Errorf("sorted %v, want %v", got, want)
	}
}

// Every profile of the catalogue carries its SMs and engines, and they
// agree with each other the way NVML's figures do on the GPUs that have
// been listed (docs/hardware.md).
func TestCatalogueEngines(t *testing.T) {
	for _, m := range Catalogue() {
		t.Run(m.Key, func(t *testing.T) {
			var smallest, whole GIProfile
			for _, p := range m.Profiles {
				if smallest.Multiprocessors == 0 || p.Multiprocessors < smallest.Multiprocessors {
					smallest = p
				}
				if p.ComputeSlices == m.ComputeSlices {
					whole = p
				}
			}
			if smallest.ComputeSlices != 1 || whole.Multiprocessors == 0 {
				t.Fatalf("smallest SMs in %s, whole GPU %+v", smallest.Name, whole)
			}
			for _, p := range m.Profiles {
				e := p.Engines
				for name, n := range map[string]int{"SMs": e.Multiprocessors, "copy engines": e.CopyEngines, "decoders": e.Decoders,
					"encoders": e.Encoders, "JPEG decoders": e.JPEGs, "OFAs": e.OFAs} {
					if n < 0 {
						t.Errorf("%s: %d %s", p.Name, n, name)
					}
					if n > 0 && name != "SMs" && name != "copy engines" && n > max(whole.Decoders, whole.Encoders, whole.JPEGs, whole.OFAs) {
						t.Errorf("%s: %d %s, more than the whole GPU's media engines", p.Name, n, name)
					}
				}
				// SMs grow with compute slices: at least the smallest
				// instance's per slice, at most the whole GPU's.
				if e.Multiprocessors < p.ComputeSlices*smallest.Multiprocessors || e.Multiprocessors > whole.Multiprocessors {
					t.Errorf("%s: %d SMs for %d compute slices, want %d..%d", p.Name, e.Multiprocessors, p.ComputeSlices,
						p.ComputeSlices*smallest.Multiprocessors, whole.Multiprocessors)
				}
				if e.CopyEngines < 1 || e.CopyEngines > whole.CopyEngines {
					t.Errorf("%s: %d copy engines, want 1..%d", p.Name, e.CopyEngines, whole.CopyEngines)
				}
				for _, q := range m.Profiles {
					if q.ComputeSlices < p.ComputeSlices && q.Multiprocessors >= e.Multiprocessors {
						t.Errorf("%s (%d SMs) has no more SMs than the smaller %s (%d)", p.Name, e.Multiprocessors, q.Name, q.Multiprocessors)
					}
				}
				size, variant := SplitProfileName(p.Name)
				plain, ok := m.Profile(size)
				if !ok {
					t.Fatalf("%s: no plain %s", p.Name, size)
				}
				if e.Multiprocessors != plain.Multiprocessors || e.CopyEngines != plain.CopyEngines {
					t.Errorf("%s: %d SMs and %d copy engines, unlike %s's %d and %d", p.Name, e.Multiprocessors, e.CopyEngines,
						size, plain.Multiprocessors, plain.CopyEngines)
				}
				media := e.Decoders + e.Encoders + e.JPEGs + e.OFAs
				switch variant {
				case VariantMediaExtensions, VariantAllMedia:
					// The media extensions bring the optical flow
					// accelerator and a JPEG decoder, and keep the
					// decoders and encoders of the plain profile.
					if e.OFAs < 1 || e.JPEGs < 1 || e.Decoders < plain.Decoders || e.Encoders < plain.Encoders {
						t.Errorf("%s: media engines %+v, want an OFA, a JPEG decoder and at least %s's", p.Name, e, size)
					}
				case VariantNoMedia:
					if media != 0 {
						t.Errorf("%s: media engines %+v, want none", p.Name, e)
					}
				case "", VariantGraphics:
					if p.ComputeSlices < m.ComputeSlices && e.OFAs != 0 {
						t.Errorf("%s: %d OFAs; only the media extensions and the whole GPU have one", p.Name, e.OFAs)
					}
					if variant == VariantGraphics && e != plain.Engines {
						t.Errorf("%s: engines %+v, want %s's %+v", p.Name, e, size, plain.Engines)
					}
				}
			}
		})
	}
}
