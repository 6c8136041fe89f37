package configs_test

import (
	"os"
	"strings"
	"testing"

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
