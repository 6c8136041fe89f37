// Package smoke proves release binaries it cannot run natively: it unpacks
// a linux/arm64 image's root file system and runs its programs under
// qemu-aarch64-static against the image's own glibc, and reads darwin
// binaries' build information with `go version -m`.
package smoke

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// RootfsFromArchive unpacks the image of platform (e.g. linux/arm64) from
// the OCI layout archive into rootfs, with scratch as a work directory.
func RootfsFromArchive(ctx context.Context, archive, platform, scratch, rootfs string) error {
	layoutDir := filepath.Join(scratch, "layout")
	if err := os.MkdirAll(layoutDir, 0o755); err != nil {
		return fmt.Errorf("unpack %s: %w", archive, err)
	}
	if out, err := exec.CommandContext(ctx, "tar", "-xf", archive, "-C", layoutDir).CombinedOutput(); err != nil {
		return fmt.Errorf("unpack %s: %w: %s", archive, err, out)
	}
	outer, err := layout.ImageIndexFromPath(layoutDir)
	if err != nil {
		return fmt.Errorf("read %s: %w", archive, err)
	}
	m, err := outer.IndexManifest()
	if err != nil {
		return fmt.Errorf("read %s: %w", archive, err)
	}
	if len(m.Manifests) != 1 {
		return fmt.Errorf("read %s: index.json names %d entries, want one image index", archive, len(m.Manifests))
	}
	idx, err := outer.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		return fmt.Errorf("read %s: %w", archive, err)
	}
	want, err := v1.ParsePlatform(platform)
	if err != nil {
		return fmt.Errorf("platform %s: %w", platform, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return fmt.Errorf("read %s: %w", archive, err)
	}
	for _, d := range im.Manifests {
		if d.Platform != nil && d.Platform.OS == want.OS && d.Platform.Architecture == want.Architecture {
			img, err := idx.Image(d.Digest)
			if err != nil {
				return fmt.Errorf("read %s %s: %w", archive, platform, err)
			}
			return Rootfs(ctx, img, rootfs)
		}
	}
	return fmt.Errorf("%s has no %s image", archive, platform)
}

// Rootfs unpacks img's flattened layers into dir with GNU tar.
func Rootfs(ctx context.Context, img v1.Image, dir string) error {
	rc := mutate.Extract(img)
	defer rc.Close()
	cmd := exec.CommandContext(ctx, "tar", "-x", "--no-same-owner", "--no-same-permissions", "-C", dir, "-f", "-")
	cmd.Stdin = rc
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("unpack image root file system: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// Check is one program run in the image.
type Check struct {
	// Args are the program (a name in /usr/local/bin) and its arguments.
	Args []string
	// Want must appear in the output.
	Want string
}

// Checks are the runs that prove the arm64 image: every program's
// --version, carvectl validate on the example profile files, and a plan on
// a simulated GB200 machine. Paths are relative to the repository root.
func Checks(version string) []Check {
	return []Check{
		{Args: []string{"carve-agent", "--version"}, Want: version},
		{Args: []string{"carvectl", "--version"}, Want: version},
		{Args: []string{"carve-probe", "--version"}, Want: version},
		{Args: []string{"carvectl", "validate", "-f", "configs/examples/profiles.yaml"}},
		{Args: []string{"carvectl", "validate", "-f", "charts/carve/files/profiles.yaml"}},
		{Args: []string{"carvectl", "plan", "-f", "configs/examples/profiles.yaml", "--profile", "shared-4", "--gpus", "sim:gb200-nvl4"}},
	}
}

// RunArm64 runs checks with qemu-aarch64-static in rootfs, from source (the
// repository root), logging each command and its output.
func RunArm64(ctx context.Context, rootfs, source string, checks []Check, log io.Writer) error {
	for _, c := range checks {
		out, err := qemu(ctx, rootfs, source, c.Args)
		fmt.Fprintf(log, "smoke arm64: %s\n%s", strings.Join(c.Args, " "), indent(out))
		if err != nil {
			return fmt.Errorf("arm64 %s: %w", strings.Join(c.Args, " "), err)
		}
		if !strings.Contains(out, c.Want) {
			return fmt.Errorf("arm64 %s: output lacks %q", strings.Join(c.Args, " "), c.Want)
		}
	}
	return nil
}

func qemu(ctx context.Context, rootfs, source string, args []string) (string, error) {
	prog := filepath.Join(rootfs, "usr", "local", "bin", args[0])
	cmd := exec.CommandContext(ctx, "qemu-aarch64-static", append([]string{"-L", rootfs, prog}, args[1:]...)...)
	cmd.Dir = source
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func indent(s string) string {
	var b strings.Builder
	for l := range strings.Lines(s) {
		b.WriteString("    " + l)
	}
	if s != "" && !strings.HasSuffix(s, "\n") {
		b.WriteString("\n")
	}
	return b.String()
}

// GoBinary checks a binary it cannot run: `go version -m` says it was built
// for goos/goarch, and the version and revision strings are in it. The
// build information does not record -ldflags of a -trimpath build, so the
// -X values are looked for in the binary's bytes.
func GoBinary(ctx context.Context, path, goos, goarch, version, revision string) error {
	out, err := exec.CommandContext(ctx, "go", "version", "-m", path).CombinedOutput()
	if err != nil {
		return fmt.Errorf("go version -m %s: %w: %s", path, err, out)
	}
	for _, want := range []string{"build\tGOOS=" + goos + "\n", "build\tGOARCH=" + goarch + "\n", "build\t-trimpath=true\n"} {
		if !strings.Contains(string(out), want) {
			return fmt.Errorf("go version -m %s: no %q in\n%s", path, strings.TrimSpace(want), out)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	for _, want := range []string{version, revision} {
		if !bytes.Contains(data, []byte(want)) {
			return fmt.Errorf("%s: %q is not stamped in it", path, want)
		}
	}
	return nil
}
