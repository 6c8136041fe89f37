package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	ocilayout "github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/carve-dev/carve/release/agentimage"
	"github.com/carve-dev/carve/test/cluster"
	"github.com/carve-dev/carve/test/harness"
)

// imagePrograms are the programs the agent image must hold, at these paths;
// the first is its entrypoint (the DaemonSet gives only args).
var imagePrograms = []string{"/usr/local/bin/carve-agent", "/usr/local/bin/carvectl", "/usr/local/bin/carve-probe"}

// importAgentImage builds the linux/amd64 agent image the way make release
// does (the same Debian base from the lock file, the same stamped binaries,
// the same OCI layout archive), checks it (checkAgentImage) and imports it
// into the cluster as agentImage.
func importAgentImage(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	root, err := harness.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	res, err := agentimage.Build(ctx, agentimage.Options{
		Source:     root,
		Platforms:  []string{"linux/amd64"},
		Version:    agentVersion,
		Revision:   "e2e",
		Repository: agentRepository,
		Out:        filepath.Join(t.TempDir(), "carve-agent.oci.tar"),
		Log:        cluster.TestLog(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Ref != agentImage || len(res.Images) != 1 {
		t.Fatalf("built %s with %d images, want %s with one", res.Ref, len(res.Images), agentImage)
	}
	img, err := archivedImage(ctx, res.Archive, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := checkAgentImage(ctx, img, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if err := c.ImportArchive(ctx, res.Archive, res.Ref); err != nil {
		t.Fatal(err)
	}
}

// archivedImage reads the one image of the OCI layout archive at path, as
// ctr import would, unpacking the archive into dir.
func archivedImage(ctx context.Context, path, dir string) (v1.Image, error) {
	if out, err := exec.CommandContext(ctx, "tar", "-xf", path, "-C", dir).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("unpack %s: %w: %s", path, err, out)
	}
	idx, err := ocilayout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	man, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(man.Manifests) != 1 {
		return nil, fmt.Errorf("read %s: %d entries in index.json, want one image index", path, len(man.Manifests))
	}
	inner, err := idx.ImageIndex(man.Manifests[0].Digest)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	platforms, err := inner.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	for _, m := range platforms.Manifests {
		if m.Platform != nil && m.Platform.OS == "linux" && m.Platform.Architecture == "amd64" {
			return inner.Image(m.Digest)
		}
	}
	return nil, fmt.Errorf("%s has no linux/amd64 image", path)
}

// checkAgentImage fails unless img's entrypoint is carve-agent, it holds
// every one of imagePrograms, and its carve-agent says it is agentVersion.
// carve-agent is run from dir, on this machine (the image is linux/amd64,
// as is every machine that runs the end-to-end tests).
func checkAgentImage(ctx context.Context, img v1.Image, dir string) error {
	cf, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("image config: %w", err)
	}
	if ep := cf.Config.Entrypoint; len(ep) != 1 || ep[0] != imagePrograms[0] {
		return fmt.Errorf("image entrypoint %q, want [%s]", ep, imagePrograms[0])
	}
	files, err := imageFiles(img, imagePrograms)
	if err != nil {
		return err
	}
	for _, p := range imagePrograms {
		if files[p] == nil {
			return fmt.Errorf("the image lacks %s", p)
		}
	}
	agent := filepath.Join(dir, "carve-agent")
	if err := os.WriteFile(agent, files[imagePrograms[0]], 0o755); err != nil {
		return fmt.Errorf("write the image's carve-agent: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, agent, "--version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("the image's carve-agent --version: %w: %s", err, out)
	}
	if !strings.Contains(string(out), " "+agentVersion+" ") {
		return fmt.Errorf("the image's carve-agent --version says %q, want version %s", strings.TrimSpace(string(out)), agentVersion)
	}
	return nil
}

// imageFiles returns the contents of the regular files at paths in img's
// flattened root file system; a path that is not there is left out.
func imageFiles(img v1.Image, paths []string) (map[string][]byte, error) {
	want := map[string]bool{}
	for _, p := range paths {
		want[strings.TrimPrefix(p, "/")] = true
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read the image's file system: %w", err)
		}
		name := strings.TrimPrefix(h.Name, "./")
		if !want[name] || h.Typeflag != tar.TypeReg {
			continue
		}
		var buf bytes.Buffer
		if _, err := io.Copy(&buf, tr); err != nil {
			return nil, fmt.Errorf("read %s from the image: %w", name, err)
		}
		files["/"+name] = buf.Bytes()
	}
}
