package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"maps"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// fakeAgentImage is an image with the given files (path: shell script) and
// carve-agent as its entrypoint.
func fakeAgentImage(t *testing.T, files map[string]string) v1.Image {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for p, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(p, "/"), Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(body))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.Config(img, v1.Config{Entrypoint: []string{imagePrograms[0]}})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestCheckAgentImage shows that the release image check fails on an image
// that lacks a program or whose carve-agent reports another version.
func TestCheckAgentImage(t *testing.T) {
	script := func(version string) string {
		return "#!/bin/sh\necho 'carve-agent " + version + " (revision e2e, go1.26)'\n"
	}
	whole := map[string]string{imagePrograms[0]: script(agentVersion), imagePrograms[1]: "#!/bin/sh\n", imagePrograms[2]: "#!/bin/sh\n"}
	if err := checkAgentImage(context.Background(), fakeAgentImage(t, whole), t.TempDir()); err != nil {
		t.Fatalf("a good image: %v", err)
	}
	for name, tc := range map[string]struct {
		change func(map[string]string)
		want   string
	}{
		"no carvectl":     {func(f map[string]string) { delete(f, imagePrograms[1]) }, "lacks /usr/local/bin/carvectl"},
		"no carve-probe":  {func(f map[string]string) { delete(f, imagePrograms[2]) }, "lacks /usr/local/bin/carve-probe"},
		"no carve-agent":  {func(f map[string]string) { delete(f, imagePrograms[0]) }, "lacks /usr/local/bin/carve-agent"},
		"another version": {func(f map[string]string) { f[imagePrograms[0]] = script("v9.9.9") }, "want version " + agentVersion},
	} {
		files := maps.Clone(whole)
		tc.change(files)
		err := checkAgentImage(context.Background(), fakeAgentImage(t, files), t.TempDir())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", name, err, tc.want)
		}
	}
}
