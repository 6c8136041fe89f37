package chart

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"sigs.k8s.io/yaml"

	"github.com/carve-dev/carve/release/agentimage"
)

const chartDir = "../../charts/carve"

// TestImageDefaultsAgree: the chart's image.repository default and the
// kustomization's image are the release repository, and the
// kustomization's tag is the chart's appVersion (the chart's tag default).
func TestImageDefaultsAgree(t *testing.T) {
	var chartYAML struct {
		AppVersion string `json:"appVersion"`
	}
	var values struct {
		Image struct{ Repository, Tag string } `json:"image"`
	}
	var kustomization struct {
		Images []struct{ Name, NewName, NewTag string } `json:"images"`
	}
	readYAML(t, filepath.Join(chartDir, "Chart.yaml"), &chartYAML)
	readYAML(t, filepath.Join(chartDir, "values.yaml"), &values)
	readYAML(t, "../../configs/deploy/base/kustomization.yaml", &kustomization)
	type image struct{ Name, NewName, NewTag string }
	var got []image
	for _, i := range kustomization.Images {
		got = append(got, image(i))
	}
	want := []image{{Name: "carve-agent", NewName: agentimage.Repository, NewTag: chartYAML.AppVersion}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("configs/deploy/base/kustomization.yaml images (-want +got):\n%s", diff)
	}
	if values.Image.Repository != agentimage.Repository || values.Image.Tag != "" {
		t.Errorf("values.yaml image.repository %q tag %q, want %q and \"\" (the appVersion)", values.Image.Repository, values.Image.Tag, agentimage.Repository)
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestPackage: the packaged chart carries the release version, keeps
// values.yaml's comments, and is the same bytes when packaged again.
func TestPackage(t *testing.T) {
	created := time.Unix(1700000000, 0)
	a, err := Package(chartDir, t.TempDir(), "v1.2.3", created)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Package(chartDir, t.TempDir(), "v1.2.3", created)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(a) != "carve-1.2.3.tgz" {
		t.Errorf("package %s, want carve-1.2.3.tgz", a)
	}
	da, _ := os.ReadFile(a)
	db, _ := os.ReadFile(b)
	if !bytes.Equal(da, db) {
		t.Errorf("two packages of the same chart differ")
	}
	c, err := loader.Load(a)
	if err != nil {
		t.Fatal(err)
	}
	if c.Metadata.AppVersion != "v1.2.3" || c.Metadata.Version != "1.2.3" {
		t.Errorf("appVersion %q version %q", c.Metadata.AppVersion, c.Metadata.Version)
	}
	if tag := c.Values["image"].(map[string]any)["tag"]; tag != "v1.2.3" {
		t.Errorf("image.tag %v, want v1.2.3", tag)
	}
	for _, f := range c.Raw {
		if f.Name == "values.yaml" && (!strings.Contains(string(f.Data), "\n  tag: \"v1.2.3\"\n") || !strings.Contains(string(f.Data), "# Image tag;")) {
			t.Errorf("values.yaml's image block:\n%s", string(f.Data)[:600])
		}
	}
}

func TestVersion(t *testing.T) {
	for in, want := range map[string]string{
		"v0.1.0":                "0.1.0",
		"v0.1.0-3-gabc1234":     "0.1.0-3-gabc1234",
		"v1.0.0-rc.1-dirty":     "1.0.0-rc.1-dirty",
		"abc1234":               "0.0.0-gabc1234",
		"0123456-dirty":         "0.0.0-g0123456-dirty",
		"devel":                 "0.0.0-gdevel",
		"v0.1.0-3-gabc1234+x/y": "0.0.0-g0.1.0-3-gabc1234-x-y",
	} {
		if got := Version(in); got != want {
			t.Errorf("Version(%q) = %q, want %q", in, got, want)
		}
	}
}
