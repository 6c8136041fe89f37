package cluster

// Tests of image building that need neither root nor a cluster.

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// archiveManifest is one entry of a docker archive's manifest.json.
type archiveManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// readManifest decodes manifest.json of an archive's files.
func readManifest(t *testing.T, files map[string][]byte) []archiveManifest {
	t.Helper()
	var m []archiveManifest
	if err := json.Unmarshal(files["manifest.json"], &m); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	return m
}

// readTar returns the headers and contents of a tar archive by name, and
// the names in order.
func readTar(t *testing.T, data []byte) (map[string]*tar.Header, map[string][]byte, []string) {
	t.Helper()
	hdrs, files := map[string]*tar.Header{}, map[string][]byte{}
	var order []string
	tr := tar.NewReader(bytes.NewReader(data))
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
		hdrs[h.Name], files[h.Name] = h, b
		order = append(order, h.Name)
	}
	return hdrs, files, order
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
	const want = "c3ca9d45785a6f4434777766a89e06370253e32e7df3fe9f70b81d23e669b808"
	if got := hex.EncodeToString(sum[:]); got != want {
		t.Errorf("busybox image archive digest %s, want %s", got, want)
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
	_, files, _ := readTar(t, archive)
	manifest := readManifest(t, files)
	if len(manifest) != 1 || !slices.Equal(manifest[0].RepoTags, []string{img.Name}) || len(manifest[0].Layers) != 1 {
		t.Fatalf("manifest = %+v", manifest)
	}
	var config struct {
		Config struct {
			Env, Entrypoint, Cmd []string
			WorkingDir           string
		}
		History []struct {
			CreatedBy string `json:"created_by"`
		}
	}
	if err := json.Unmarshal(files[manifest[0].Config], &config); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(config.Config.Entrypoint, img.Entrypoint) || !slices.Equal(config.Config.Cmd, img.Cmd) ||
		!slices.Equal(config.Config.Env, []string{defaultImagePath}) || config.Config.WorkingDir != "/" {
		t.Errorf("config = %+v", config.Config)
	}
	if len(config.History) != 1 || config.History[0].CreatedBy != "carve test/cluster" {
		t.Errorf("history = %+v", config.History)
	}

	hdrs, data, order := readTar(t, files[manifest[0].Layers[0]])
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
		if h := hdrs[name]; h.Typeflag != w.typ || h.Mode != w.mode {
			t.Errorf("%s: type %c mode %o, want %c %o", name, h.Typeflag, h.Mode, w.typ, w.mode)
		}
	}
	if string(data["usr/local/bin/x"]) != "prog" || hdrs["lib64/ld.so"].Linkname != "/lib/x86_64-linux-gnu/ld.so" {
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
		"twice":     {Name: "x", Files: []ImageFile{{Path: "/a/b"}, {Path: "a/b"}}},
		"a dir too": {Name: "x", Files: []ImageFile{{Path: "a/b"}, {Path: "a", Dir: true}}},
		"the root":  {Name: "x", Files: []ImageFile{{Path: "/", Dir: true}}},
	} {
		if _, err := dockerArchive(img); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestParseLdd(t *testing.T) {
	out := `	linux-vdso.so.1 (0x00007ffd0b5f5000)
	libresolv.so.2 => /lib/x86_64-linux-gnu/libresolv.so.2 (0x00007f0c1d2a0000)
	libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f0c1d0bf000)
	/lib64/ld-linux-x86-64.so.2 (0x00007f0c1d2c7000)
	libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f0c1d0bf000)
`
	got, err := parseLdd(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/lib/x86_64-linux-gnu/libresolv.so.2", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"}
	if !slices.Equal(got, want) {
		t.Errorf("parseLdd = %q, want %q", got, want)
	}
	if _, err := parseLdd("\tlibnvidia-ml.so.1 => not found\n"); err == nil || !strings.Contains(err.Error(), "libnvidia-ml.so.1") {
		t.Errorf("a missing library: err %v", err)
	}
}

// TestExecutableFiles runs ldd on this machine's /bin/sh: the image gets
// the program where asked and the ELF interpreter the program names.
func TestExecutableFiles(t *testing.T) {
	if _, err := exec.LookPath("ldd"); err != nil {
		t.Skip("no ldd here")
	}
	f, err := elf.Open("/bin/sh")
	if err != nil {
		t.Skipf("no ELF /bin/sh: %v", err)
	}
	interp := ""
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(p.Open())
			if err != nil {
				t.Fatal(err)
			}
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	f.Close()
	if interp == "" {
		t.Skip("/bin/sh is statically linked")
	}
	files, err := ExecutableFiles(context.Background(), "/bin/sh", "/usr/local/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	sh, err := os.ReadFile("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	if files[0].Path != "/usr/local/bin/sh" || files[0].Mode != 0o755 || !bytes.Equal(files[0].Data, sh) {
		t.Errorf("first file %s mode %o, want the program at /usr/local/bin/sh", files[0].Path, files[0].Mode)
	}
	var paths []string
	for _, f := range files[1:] {
		paths = append(paths, f.Path)
		if len(f.Data) == 0 {
			t.Errorf("%s is empty", f.Path)
		}
	}
	if !slices.Contains(paths, interp) {
		t.Errorf("files %q lack the interpreter %s", paths, interp)
	}
	if _, err := dockerArchive(Image{Name: "sh", Files: files}); err != nil {
		t.Fatal(err)
	}
}
