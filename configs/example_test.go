package configs_test

import (
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/partition"
)

// dgx returns the GPUs of a node with n GPUs of a catalogue model.
func dgx(t *testing.T, key string, n int) []configs.GPU {
	t.Helper()
	m, ok := partition.LookupModel(key)
	if !ok {
		t.Fatalf("catalogue lacks %s", key)
	}
	gpus := make([]configs.GPU, n)
	for i := range gpus {
		gpus[i] = configs.GPU{Index: i, Model: m.Key, Product: m.Product, MIGCapable: true}
	}
	return gpus
}

// The shipped example must be valid on the machine it is written for, and
// on every catalogue model its entries can apply to.
func TestExampleValidatesAgainstCatalogue(t *testing.T) {
	data, err := os.ReadFile("examples/profiles.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f, err := configs.Parse(data)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	g := partition.NewGeometry(partition.Catalogue())
	if err := f.Validate(g, nil); err != nil {
		t.Errorf("Validate(catalogue): %v", err)
	}
	node := dgx(t, "H100-80GB", 8)
	if err := f.Validate(g, node); err != nil {
		t.Errorf("Validate(dgx-h100): %v", err)
	}
	for name := range f.Profiles {
		as, err := f.Resolve(name, node)
		if err != nil || len(as) != len(node) {
			t.Errorf("Resolve(%s) = %d assignments, %v", name, len(as), err)
		}
	}
}

// The hybrid example is valid on the machine it is written for, and its
// GPUs 4-7 (all of them in all-dynamic) resolve dynamic: MIG on, no
// instances of the profile's own.
func TestHybridExample(t *testing.T) {
	data, err := os.ReadFile("examples/hybrid.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f, err := configs.Parse(data)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	g := partition.NewGeometry(partition.Catalogue())
	node := dgx(t, "H100-80GB", 8)
	for _, gpus := range [][]configs.GPU{nil, node} {
		if err := f.Validate(g, gpus); err != nil {
			t.Errorf("Validate(%d GPUs): %v", len(gpus), err)
		}
	}
	for name, firstDynamic := range map[string]int{"hybrid": 4, "all-dynamic": 0} {
		as, err := f.Resolve(name, node)
		if err != nil {
			t.Fatalf("Resolve(%s): %v", name, err)
		}
		var dynamic []int
		for _, a := range as {
			if a.Dynamic != nil {
				dynamic = append(dynamic, a.GPU)
				if a.MIG == nil || len(a.MIG) != 0 {
					t.Errorf("%s: dynamic GPU %d has MIG %v, want on with no instances", name, a.GPU, a.MIG)
				}
			}
		}
		want := []int{}
		for i := firstDynamic; i < 8; i++ {
			want = append(want, i)
		}
		if diff := cmp.Diff(want, dynamic, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: dynamic GPUs (-want +got):\n%s", name, diff)
		}
	}
}

func TestImpossibleGeometryWithCatalogue(t *testing.T) {
	f, err := configs.Parse([]byte(`version: v1
profiles:
  p:
    - gpus: all
      model: H100-80GB
      mig: {3g.40gb: 2, 1g.10gb: 1}
  q:
    - gpus: all
      model: A100-40GB
      mig: {4g.20gb: 2}
`))
	if err != nil {
		t.Fatal(err)
	}
	err = f.Validate(partition.NewGeometry(partition.Catalogue()), nil)
	if err == nil {
		t.Fatal("impossible geometries validated")
	}
	for _, want := range []string{
		"profiles.p[0].mig: 3g.40gb x2 + 1g.10gb cannot be placed on H100-80GB: ",
		"profiles.q[0].mig: 4g.20gb x2 cannot be placed on A100-40GB: ",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// TestExampleSelectsAsItsCommentsSay: the shipped example's rule, windows
// and default select what its comments say, for nodes of each pool at the
// times they name (2026-11-25 is a Wednesday, 11-28 a Saturday).
func TestExampleSelectsAsItsCommentsSay(t *testing.T) {
	data, err := os.ReadFile("examples/profiles.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f, err := configs.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	at := func(day, hour int) time.Time { return time.Date(2026, 11, day, hour, 30, 0, 0, berlin) }
	h100 := map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
	with := func(pool string) map[string]string {
		l := maps.Clone(h100)
		l["pool"] = pool
		return l
	}
	tests := []struct {
		name   string
		labels map[string]string
		now    time.Time
		want   configs.Selection
	}{
		{"research pool: the MIG mix, day and night", with("research"), at(25, 22), configs.Selection{Profile: "balanced", Source: configs.SourceRule, Rule: 0}},
		{"inference pool by day: time-sliced", with("inference"), at(25, 8), configs.Selection{Profile: "shared-4", Source: configs.SourceWindow, Window: "daytime-inference", Rule: -1}},
		{"inference pool at night: whole GPUs", with("inference"), at(25, 20), configs.Selection{Profile: "full", Source: configs.SourceWindow, Window: "nightly-training", Rule: -1}},
		{"inference pool, Friday's night into Saturday", with("inference"), at(28, 7), configs.Selection{Profile: "full", Source: configs.SourceWindow, Window: "nightly-training", Rule: -1}},
		{"inference pool at the weekend: the default", with("inference"), at(28, 12), configs.Selection{Profile: "full", Source: configs.SourceDefault, Rule: -1}},
		{"no pool: the default", h100, at(25, 12), configs.Selection{Profile: "full", Source: configs.SourceDefault, Rule: -1}},
	}
	for _, tt := range tests {
		got, err := f.Select(tt.labels, tt.now)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
}
