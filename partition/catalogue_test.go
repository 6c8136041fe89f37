package partition

import "testing"

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

// The catalogue's names must be what ProfileName derives from its memory
// sizes, since real GPUs are named that way (ModelFromDevice), and each
// catalogue model must be found again from its product and memory.
func TestCatalogueConsistent(t *testing.T) {
	for _, m := range Catalogue() {
		if got, ok := ModelForProduct(m.Product, m.MemoryMiB); !ok || got.Key != m.Key {
			t.Errorf("%s: ModelForProduct(%q, %d) = %q, %v", m.Key, m.Product, m.MemoryMiB, got.Key, ok)
		}
		if lm, ok := LookupModel(m.Key); !ok || lm.Key != m.Key {
			t.Errorf("LookupModel(%q) failed", m.Key)
		}
		for _, p := range m.Profiles {
			if got := ProfileName(p.ComputeSlices, p.MemoryMiB, p.MediaExtensions); got != p.Name {
				t.Errorf("%s: profile %s: memory %d MiB names it %s", m.Key, p.Name, p.MemoryMiB, got)
			}
			for _, pl := range p.Placements {
				if pl.Size != p.MemorySlices || pl.End() > m.MemorySlices {
					t.Errorf("%s: %s placement %+v invalid", m.Key, p.Name, pl)
				}
			}
		}
	}
}
