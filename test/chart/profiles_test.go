package chart

import (
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/desired"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/test/harness"
)

// installedProfiles is the profile file the chart's ConfigMap holds by
// default: the one configs/deploy installs (a copy of it is the chart's
// files/profiles.yaml), which selects no node.
const installedProfiles = "../../configs/deploy/profiles/profiles.yaml"

// TestDefaultProfilesAreTheInstalledFile: with default values, on an install
// into a namespace without the ConfigMap, the chart's ConfigMap holds configs/deploy/profiles/profiles.yaml byte for byte under the key
// profiles.yaml and nothing else, and the file passes what `carvectl
// validate` checks, against every model carve knows and against a
// simulated DGX H100 (`--gpus sim:dgx-h100`).
func TestDefaultProfilesAreTheInstalledFile(t *testing.T) {
	want, err := os.ReadFile(installedProfiles)
	if err != nil {
		t.Fatal(err)
	}
	objs := mustRender(t, loadChart(t), nil)
	cm := harness.FindObject(objs, "ConfigMap", "carve-profiles")
	if cm == nil {
		t.Fatal("no ConfigMap carve-profiles rendered")
	}
	if cm.GetNamespace() != namespace {
		t.Errorf("ConfigMap in %q, want %q", cm.GetNamespace(), namespace)
	}
	data, found, err := unstructured.NestedStringMap(cm.Object, "data")
	if err != nil || !found {
		t.Fatalf("ConfigMap data: found %v, %v", found, err)
	}
	if len(data) != 1 || data["profiles.yaml"] != string(want) {
		t.Fatalf("ConfigMap data has keys %d, profiles.yaml equal to %s: %v; charts/carve/files/profiles.yaml must be a copy of that file",
			len(data), installedProfiles, data["profiles.yaml"] == string(want))
	}

	f, err := configs.Parse([]byte(data["profiles.yaml"]))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if _, err := f.Check(partition.NewGeometry(partition.Catalogue()), nil); err != nil {
		t.Errorf("check against carve's catalogue: %v", err)
	}
	_, node := simNode(t, "dgx-h100")
	unverified, err := f.Check(node.Geometry(), desired.ConfigGPUs(node))
	if err != nil {
		t.Errorf("check against sim:dgx-h100: %v", err)
	}
	if len(unverified) > 0 {
		t.Errorf("unverified on sim:dgx-h100: %v", unverified)
	}
}

// simNode starts a simulated machine, shut down when the test ends, and
// reads its node.
func simNode(t *testing.T, machine string) (*sim.Machine, partition.Node) {
	t.Helper()
	lib, err := sim.New(machine)
	if err != nil {
		t.Fatal(err)
	}
	if err := lib.Init(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lib.Shutdown() })
	node, err := partition.ReadNode(lib)
	if err != nil {
		t.Fatal(err)
	}
	return lib, node
}
