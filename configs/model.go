package configs

import (
	"strings"
	"unicode"
)

// productsWithoutMIG are NVIDIA data-center GPUs that cannot run MIG but
// can be time-sliced: a model filter of an entry without MIG that matches
// one of these (or a MIG-capable model) is not flagged as unknown.
func productsWithoutMIG() []string {
	return []string{
		"L4", "L40", "L40S", "T4", "A10", "A10G", "A16", "A2", "A40", "V100", "P100", "P40", "P4",
		"RTX 6000 Ada Generation", "RTX A6000", "RTX A5000", "RTX A4000", "Quadro RTX 8000",
	}
}

// MatchModel reports whether a profile entry's model filter selects a GPU
// model. Case does not matter, spaces, dashes and underscores are alike, and
// a leading "NVIDIA" is optional. The filter matches when its words appear,
// in order and next to each other, in the model's key ("H100-80GB") or in
// its product name ("NVIDIA H100 80GB HBM3"); so "H100-80GB", "h100",
// "H100 80GB HBM3" and the GPU feature discovery label value
// "NVIDIA-H100-80GB-HBM3" all select the H100-80GB. An empty filter selects
// every model.
func MatchModel(filter string, m GPUModel) bool {
	want := modelWords(filter)
	if len(want) == 0 {
		return true
	}
	return containsRun(modelWords(m.Key), want) || containsRun(modelWords(m.Product), want)
}

// modelWords splits a model name into lower-case words, without a leading
// "nvidia".
func modelWords(s string) []string {
	words := strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return r == '-' || r == '_' || unicode.IsSpace(r)
	})
	if len(words) > 0 && words[0] == "nvidia" {
		words = words[1:]
	}
	return words
}

// normalModel returns the canonical form of a model filter, so that two
// filters that are written differently but mean the same compare equal.
func normalModel(filter string) string {
	return strings.Join(modelWords(filter), "-")
}

// containsRun reports whether want occurs as consecutive elements of have.
func containsRun(have, want []string) bool {
	for i := 0; i+len(want) <= len(have); i++ {
		ok := true
		for j, w := range want {
			if have[i+j] != w {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}
