// Package gobuild compiles carve's programs for a release: stamped with the
// version and revision, -trimpath, no VCS stamp, cgo on for linux (go-nvml
// needs glibc and dlopen; arm64 is cross-compiled with aarch64-linux-gnu-gcc)
// and off for darwin, so that the same commit gives the same binaries.
package gobuild

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// BuildinfoPackage holds the variables -X stamps.
const BuildinfoPackage = "github.com/carve-dev/carve/internal/buildinfo"

// ImagePrograms are the main packages the agent image holds, by binary name.
func ImagePrograms() []string { return []string{"carve-agent", "carvectl", "carve-probe"} }

// Options says what to build.
type Options struct {
	// Source is the main module's root directory.
	Source string
	// OS and Arch are GOOS and GOARCH.
	OS, Arch string
	// Version and Revision are stamped into internal/buildinfo.
	Version, Revision string
	// Programs are the binaries to build, each from Source/cmd/NAME.
	Programs []string
	// Out is the directory the binaries go to.
	Out string
}

// Build compiles o.Programs into o.Out and returns their paths, in order.
func Build(ctx context.Context, o Options) ([]string, error) {
	src, err := filepath.Abs(o.Source)
	if err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	out, err := filepath.Abs(o.Out)
	if err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	env, err := Env(o.OS, o.Arch)
	if err != nil {
		return nil, err
	}
	args := []string{"build", "-trimpath", "-buildvcs=false", "-mod=readonly",
		"-ldflags", LDFlags(o.Version, o.Revision), "-o", out + "/"}
	var paths []string
	for _, p := range o.Programs {
		args = append(args, "./cmd/"+p)
		paths = append(paths, filepath.Join(out, p))
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), env...)
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go build %s/%s: %w:\n%s", o.OS, o.Arch, err, output.String())
	}
	return paths, nil
}

// LDFlags strips the symbol table and DWARF and stamps version and revision.
func LDFlags(version, revision string) string {
	return fmt.Sprintf("-s -w -X %s.version=%s -X %s.revision=%s", BuildinfoPackage, version, BuildinfoPackage, revision)
}

// Env is the environment of a release build for goos/goarch, on top of the
// caller's: every setting that changes the output is fixed here, and
// GOFLAGS is cleared so that a developer's flags do not leak in.
func Env(goos, goarch string) ([]string, error) {
	env := []string{"GOOS=" + goos, "GOARCH=" + goarch, "GOFLAGS=", "GOAMD64=v1", "GOARM64=v8.0", "GOEXPERIMENT="}
	switch {
	case goos == "darwin":
		return append(env, "CGO_ENABLED=0"), nil
	case goos != "linux":
		return nil, fmt.Errorf("build: no release build for %s/%s", goos, goarch)
	}
	env = append(env, "CGO_ENABLED=1", "CGO_CFLAGS=-O2 -g -Wno-deprecated-declarations", "CGO_LDFLAGS=")
	if goarch == runtime.GOARCH && runtime.GOOS == "linux" {
		return append(env, "CC=gcc"), nil
	}
	cc, ok := map[string]string{"amd64": "x86_64-linux-gnu-gcc", "arm64": "aarch64-linux-gnu-gcc"}[goarch]
	if !ok {
		return nil, fmt.Errorf("build: no C cross compiler known for linux/%s", goarch)
	}
	return append(env, "CC="+cc), nil
}

// Platform splits "os/arch".
func Platform(p string) (goos, goarch string, err error) {
	goos, goarch, ok := strings.Cut(p, "/")
	if !ok || goos == "" || goarch == "" || strings.Contains(goarch, "/") {
		return "", "", fmt.Errorf("platform %q is not OS/ARCH", p)
	}
	return goos, goarch, nil
}
