package ociimage

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/carve-dev/carve/release/tarball"
)

// testLayer archives one file into a layer tar.
func testLayer(t *testing.T, name, data string) Layer {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "layer.tar")
	if err := tarball.Create(t.Context(), out, dir, []string{name}, 0, false); err != nil {
		t.Fatal(err)
	}
	return Layer{Tar: out, CreatedBy: "test " + name}
}

func testIndex(t *testing.T) v1.ImageIndex {
	t.Helper()
	meta := Meta{Version: "v1.2.3", Revision: "abc", Created: time.Unix(1700000000, 0)}
	var imgs []PlatformImage
	for _, arch := range []string{"amd64", "arm64"} {
		p := Platform("linux", arch)
		img, err := Image(p, []Layer{testLayer(t, "base", "base "+arch), testLayer(t, "carve-agent", "agent "+arch)}, meta)
		if err != nil {
			t.Fatal(err)
		}
		imgs = append(imgs, PlatformImage{Platform: p, Image: img})
	}
	idx, err := Index(imgs, meta)
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

// TestImage: the configuration, annotations and platforms, and the same
// digest when built again.
func TestImage(t *testing.T) {
	idx := testIndex(t)
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 2 || m.Manifests[1].Platform.Variant != "v8" || m.Annotations["org.opencontainers.image.version"] != "v1.2.3" {
		t.Fatalf("index %+v", m)
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	got := []any{cfg.Config.Entrypoint, cfg.Config.User, cfg.Config.Env, cfg.Config.ExposedPorts, cfg.Config.Labels["org.opencontainers.image.created"], len(cfg.History), cfg.Architecture}
	want := []any{[]string{Entrypoint}, "0:0", []string{Path}, map[string]struct{}{"9465/tcp": {}}, "2023-11-14T22:13:20Z", 2, "amd64"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	d1, _ := idx.Digest()
	d2, _ := testIndex(t).Digest()
	if d1 != d2 {
		t.Errorf("the same image built twice: %s, %s", d1, d2)
	}
}

// TestWriteArchive: index.json names the image for ctr and podman.
func TestWriteArchive(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "img.oci.tar")
	if err := WriteArchive(t.Context(), testIndex(t), "ghcr.io/carve-dev/carve-agent", "v1.2.3", out, 1700000000); err != nil {
		t.Fatal(err)
	}
	x := t.TempDir()
	if err := tarballExtract(t, out, x); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(x, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var index v1.IndexManifest
	if err := json.Unmarshal(data, &index); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{RefName: "v1.2.3", ContainerdName: "ghcr.io/carve-dev/carve-agent:v1.2.3"}
	if len(index.Manifests) != 1 {
		t.Fatalf("index.json has %d manifests", len(index.Manifests))
	}
	if diff := cmp.Diff(want, index.Manifests[0].Annotations); diff != "" {
		t.Errorf("index.json annotations (-want +got):\n%s", diff)
	}
}
func tarballExtract(t *testing.T, archive, dir string) error {
	t.Helper()
	return exec.CommandContext(t.Context(), "tar", "-xf", archive, "-C", dir).Run()
}
