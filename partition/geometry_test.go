package partition_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/partition"
)

func TestGeometryModels(t *testing.T) {
	cat := partition.Catalogue()
	// The same model twice, as a node with identical GPUs reports it.
	g := partition.NewGeometry(append(cat, cat[2]))
	var _ configs.Geometry = g
	keys := g.ModelKeys()
	if len(keys) != len(cat) {
		t.Fatalf("%d models, want %d (duplicates counted once)", len(keys), len(cat))
	}
	for i, key := range keys {
		product, profiles := g.ModelInfo(key)
		if key != cat[i].Key || product != cat[i].Product {
			t.Errorf("model %d = %s/%s, want %s/%s", i, key, product, cat[i].Key, cat[i].Product)
		}
		if diff := cmp.Diff(cat[i].ProfileNames(), profiles); diff != "" {
			t.Errorf("%s profiles (-want +got):\n%s", key, diff)
		}
	}
	if product, profiles := g.ModelInfo("V100"); product != "" || profiles != nil {
		t.Errorf("ModelInfo of an unknown model = %q, %v", product, profiles)
	}
	// Changing the caller's slice later does not change the geometry.
	cat[0].Profiles[0].Name = "changed"
	if _, profiles := g.ModelInfo(cat[0].Key); profiles[0] == "changed" {
		t.Errorf("geometry shares the caller's profiles")
	}
}

func TestGeometryFit(t *testing.T) {
	g := partition.NewGeometry(partition.Catalogue())
	tests := []struct {
		name    string
		model   string
		counts  map[string]int
		wantErr error
		words   string
	}{
		{name: "fits", model: "H100-80GB", counts: map[string]int{"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}},
		{name: "model key ignores case", model: "h100-80gb", counts: map[string]int{"7g.80gb": 1}},
		{name: "empty fits", model: "A30-24GB", counts: nil},
		{name: "too many", model: "H100-80GB", counts: map[string]int{"1g.10gb": 8}, wantErr: partition.ErrCannotPlace, words: "1g.10gb x8: at most 7 fit on H100-80GB"},
		{name: "memory", model: "A100-40GB", counts: map[string]int{"3g.20gb": 2, "1g.5gb": 1}, wantErr: partition.ErrCannotPlace, words: "3g.20gb x2 cover all 8 memory slices"},
		{name: "unknown model", model: "X300-180GB", counts: map[string]int{"1g.23gb": 1}, wantErr: partition.ErrUnknownModel, words: `unknown GPU model "X300-180GB" (known: A100-40GB, A100-80GB, H100-80GB, H100-94GB, H100-96GB, H200-141GB, GH200-144GB, B200-180GB, GB200-186GB, B300-288GB, GB300-288GB, A30-24GB, RTX-PRO-6000-96GB)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := g.Fit(tc.model, tc.counts)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("Fit: %v", err)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Fit error %v, want one wrapping %v", err, tc.wantErr)
			}
			if tc.words != "" && !strings.Contains(err.Error(), tc.words) {
				t.Errorf("Fit error %q lacks %q", err, tc.words)
			}
		})
	}
	if err := partition.NewGeometry(nil).Fit("H100-80GB", nil); !errors.Is(err, partition.ErrUnknownModel) || !strings.Contains(err.Error(), "known: none") {
		t.Errorf("empty geometry: %v", err)
	}
}
