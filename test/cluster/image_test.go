package cluster

// Tests of image building that need neither root nor a cluster.

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"runtime"
	"slices"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// readArchive reads back the image named ref from a docker archive, with
// its config and the headers and contents of its one layer, in order.
func readArchive(t *testing.T, archive []byte, ref string) (*v1.ConfigFile, []*tar.Header, map[string][]byte) {
	t.Helper()
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.Image(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(archive)), nil }, &tag)
	if err != nil {
		t.Fatalf("read the archive as image %s: %v", ref, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %d, err %v; want one", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var hdrs []*tar.Header
	data := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		hdrs, data[h.Name] = append(hdrs, h), b
	}
	return cf, hdrs, data
}

// TestBusyboxArchiveUnchanged pins the bytes of the busybox image archive,
// so that a change to the image code that would give the cached test image
// another digest is noticed.
func TestBusyboxArchiveUnchanged(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the pinned digest is of the amd64 image config")
	}
	archive, err := dockerArchive(busyboxImage([]byte("#!fake busybox"), []string{"sh", "sleep", "cat"}))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(archive)
	const want = "7ac8f040853a0f5dc412a7967bedeaea181b64c6ec89a0ddbbd82e99c6e082d4"
	if got := hex.EncodeToString(sum[:]); got != want {
		t.Errorf("busybox image archive digest %s, want %s", got, want)
	}
}

func TestBusyboxArchive(t *testing.T) {
	archive, err := dockerArchive(busyboxImage([]byte("#!fake busybox"), []string{"sh", "sleep", "cat"}))
	if err != nil {
		t.Fatal(err)
	}
	cf, hdrs, _ := readArchive(t, archive, BusyboxImage)
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH || len(cf.Config.Cmd) == 0 {
		t.Errorf("config: os %q arch %q cmd %q", cf.OS, cf.Architecture, cf.Config.Cmd)
	}
	entries := map[string]*tar.Header{}
	for _, h := range hdrs {
		entries[h.Name] = h
	}
	if h := entries["bin/busybox"]; h == nil || h.Mode&0o111 == 0 {
		t.Errorf("bin/busybox missing or not executable: %+v", h)
	}
	for _, a := range []string{"sh", "sleep", "cat"} {
		if h := entries["bin/"+a]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "busybox" {
			t.Errorf("bin/%s is not a symlink to busybox: %+v", a, h)
		}
	}
	for _, d := range []string{"dev/", "proc/", "sys/", "tmp/", "etc/"} {
		if entries[d] == nil {
			t.Errorf("layer lacks %s", d)
		}
	}
}

func TestImageArchive(t *testing.T) {
	img := Image{
		Name: "carve.dev/x:e2e",
		Files: []ImageFile{
			{Path: "/usr/local/bin/x", Mode: 0o755, Data: []byte("prog")},
			{Path: "/lib/x86_64-linux-gnu/libc.so.6", Data: []byte("libc")},
			{Path: "lib64/ld.so", Link: "/lib/x86_64-linux-gnu/ld.so"},
			{Path: "/tmp/", Dir: true, Mode: 0o1777},
		},
		Entrypoint: []string{"/usr/local/bin/x"},
		Cmd:        []string{"--flag"},
	}
	archive, err := dockerArchive(img)
	if err != nil {
		t.Fatal(err)
	}
	cf, hdrs, data := readArchive(t, archive, img.Name)
	c := cf.Config
	if !slices.Equal(c.Entrypoint, img.Entrypoint) || !slices.Equal(c.Cmd, img.Cmd) ||
		!slices.Equal(c.Env, []string{defaultImagePath}) || c.WorkingDir != "/" {
		t.Errorf("config = %+v", c)
	}
	if len(cf.History) != 1 || cf.History[0].CreatedBy != "carve test/cluster" || !cf.Created.Equal(epoch()) {
		t.Errorf("history = %+v, created %v", cf.History, cf.Created)
	}
	var order []string
	byName := map[string]*tar.Header{}
	for _, h := range hdrs {
		order, byName[h.Name] = append(order, h.Name), h
	}
	want := []string{
		"usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/x",
		"lib/", "lib/x86_64-linux-gnu/", "lib/x86_64-linux-gnu/libc.so.6",
		"lib64/", "lib64/ld.so", "tmp/",
	}
	if !slices.Equal(order, want) {
		t.Fatalf("layer entries\n%q\nwant (parents added once, before their files)\n%q", order, want)
	}
	for name, w := range map[string]struct {
		typ  byte
		mode int64
	}{
		"usr/":                           {tar.TypeDir, 0o755},
		"usr/local/bin/x":                {tar.TypeReg, 0o755},
		"lib/x86_64-linux-gnu/libc.so.6": {tar.TypeReg, 0o644},
		"lib64/ld.so":                    {tar.TypeSymlink, 0o777},
		"tmp/":                           {tar.TypeDir, 0o1777},
	} {
		if h := byName[name]; h.Typeflag != w.typ || h.Mode != w.mode {
			t.Errorf("%s: type %c mode %o, want %c %o", name, h.Typeflag, h.Mode, w.typ, w.mode)
		}
	}
	if string(data["usr/local/bin/x"]) != "prog" || byName["lib64/ld.so"].Linkname != "/lib/x86_64-linux-gnu/ld.so" {
		t.Error("file content or link target lost")
	}

	again, err := dockerArchive(img)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(archive, again) {
		t.Error("the archive is not reproducible")
	}
}

func TestImageArchiveRejects(t *testing.T) {
	for name, img := range map[string]Image{
		"no name":   {Files: []ImageFile{{Path: "a"}}},
		"bad name":  {Name: "UPPER/case:x", Files: []ImageFile{{Path: "a"}}},
		"twice":     {Name: "x", Files: []ImageFile{{Path: "/a/b"}, {Path: "a/b"}}},
		"a dir too": {Name: "x", Files: []ImageFile{{Path: "a/b"}, {Path: "a", Dir: true}}},
		"the root":  {Name: "x", Files: []ImageFile{{Path: "/", Dir: true}}},
	} {
		if _, err := dockerArchive(img); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
