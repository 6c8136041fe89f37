package configs_test

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/partition"
)

// installedFiles are the profile files carve installs by default: the
// kustomize ConfigMap's and the chart's, one the copy of the other.
var installedFiles = []string{"deploy/profiles/profiles.yaml", "../charts/carve/files/profiles.yaml"}

// TestInstalledProfilesSelectNoNode: what configs/deploy and the chart
// install by default selects no node whatever its labels, at any time, so
// that installing carve adopts every node's GPU layout and changes
// nothing; it holds the example's profiles (so a carve.dev/profile label
// naming one works) and is valid on the machine they are written for.
func TestInstalledProfilesSelectNoNode(t *testing.T) {
	first, err := os.ReadFile(installedFiles[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range installedFiles[1:] {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data, first) {
			t.Errorf("%s differs from %s; the chart and configs/deploy must install the same file", path, installedFiles[0])
		}
	}
	f, err := configs.Parse(first)
	if err != nil {
		t.Fatalf("%s: %v", installedFiles[0], err)
	}
	if f.DefaultProfile != "" || len(f.Rules) > 0 || len(f.Windows) > 0 {
		t.Errorf("%s selects nodes: defaultProfile %q, %d rules, %d windows; it must select none", installedFiles[0], f.DefaultProfile, len(f.Rules), len(f.Windows))
	}
	labels := []map[string]string{
		nil,
		{"pool": "research", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.present": "true"},
		{"pool": "inference", "kubernetes.io/os": "linux", "nvidia.com/mig.config": "all-balanced"},
	}
	for _, l := range labels {
		for _, at := range []time.Time{time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC), time.Date(2026, 3, 2, 22, 0, 0, 0, time.UTC)} {
			sel, err := f.Select(l, at)
			if err != nil || sel.Source != configs.SourceNone {
				t.Errorf("labels %v at %s: selected %+v (%v); want nothing", l, at, sel, err)
			}
		}
	}
	if err := f.Validate(partition.NewGeometry(partition.Catalogue()), dgx(t, "H100-80GB", 8)); err != nil {
		t.Errorf("Validate(dgx-h100): %v", err)
	}
	example, err := os.ReadFile("examples/profiles.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ex, err := configs.Parse(example)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ex.Profiles, f.Profiles); diff != "" {
		t.Errorf("the installed file's profiles differ from configs/examples/profiles.yaml's (-example +installed):\n%s", diff)
	}
}
