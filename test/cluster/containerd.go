package cluster

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"strings"
)

// ContainerdVersion is the containerd release the cluster runs. It is built
// once from its Go module (github.com/containerd/containerd/v2) in a module
// generated under the cache directory, not taken from the host: the
// distributions' containerd 1.x ignores CDI device names, which DRA drivers
// and device plugins (carve-agent --cdi) answer with. It runs with the
// host's runc.
const ContainerdVersion = "v2.4.2"

// containerdModule is containerd's Go module.
const containerdModule = "github.com/containerd/containerd/v2"

// containerdRecipe changes whenever the way containerd is built changes, so
// that binaries built by an older recipe are rebuilt.
const containerdRecipe = "1"

// containerdBuildTags leave out the snapshotters the cluster does not use,
// which need C libraries (btrfs) or host set-up (devmapper, zfs), as
// containerd's own build does where those are missing.
const containerdBuildTags = "no_btrfs no_devmapper no_zfs"

// The containerd programs besides the daemon (compContainerd).
const (
	// shimBinary is the runc shim containerd starts for each pod; its name
	// is what containerd looks up for the runtime io.containerd.runc.v2.
	shimBinary = "containerd-shim-runc-v2"
	// ctrBinary is containerd's CLI, which imports images.
	ctrBinary = "ctr"
)

// containerdBinaries are the programs built from containerd's module.
func containerdBinaries() []string { return []string{compContainerd, shimBinary, ctrBinary} }

// ContainerdBinaries are the paths of the containerd programs the cluster
// runs, all in Dir.
type ContainerdBinaries struct {
	// Dir comes first in containerd's PATH, so that it starts this
	// release's shim, not one the host may have installed.
	Dir        string
	Containerd string // the daemon
	Shim       string // containerd-shim-runc-v2
	Ctr        string // the CLI, used to import images
}

// EnsureContainerd returns the containerd programs of ContainerdVersion,
// building them first unless cacheDir already holds them (under
// containerd-<version>/bin). The build downloads the module and its
// dependencies through the module proxy and takes about 4 to 5 minutes on
// a 2-core machine with cold Go caches; it is done once per version, and
// concurrent callers wait for one build.
func EnsureContainerd(ctx context.Context, log io.Writer, cacheDir string) (ContainerdBinaries, error) {
	dir := filepath.Join(cacheDir, "containerd-"+ContainerdVersion)
	binDir := filepath.Join(dir, "bin")
	bins := ContainerdBinaries{
		Dir:        binDir,
		Containerd: filepath.Join(binDir, compContainerd),
		Shim:       filepath.Join(binDir, shimBinary),
		Ctr:        filepath.Join(binDir, ctrBinary),
	}
	err := ensureBuilt(ctx, log, cachedBuild{
		what:  "containerd " + ContainerdVersion,
		dir:   dir,
		stamp: containerdStamp(),
		bins:  containerdBinaries(),
		build: func(ctx context.Context, outDir string) error {
			return buildContainerd(ctx, log, filepath.Join(dir, "src"), outDir)
		},
	})
	return bins, err
}

// containerdStamp identifies what the cached containerd programs were built
// from.
func containerdStamp() string {
	return fmt.Sprintf("containerd=%s recipe=%s tags=%s goos=%s goarch=%s\n",
		ContainerdVersion, containerdRecipe, containerdBuildTags, runtime.GOOS, runtime.GOARCH)
}

// buildContainerd builds the containerd programs into outDir from a module
// generated in srcDir (see containerdGoMod).
func buildContainerd(ctx context.Context, log io.Writer, srcDir, outDir string) error {
	goTool, err := findGo()
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "building containerd %s (%s) in %s; the first build takes a few minutes\n",
		ContainerdVersion, strings.Join(containerdBinaries(), ", "), srcDir)
	upstream, err := downloadGoMod(ctx, goTool, containerdModule+"@"+ContainerdVersion)
	if err != nil {
		return err
	}
	mod, err := containerdGoMod(upstream)
	if err != nil {
		return err
	}
	if err := writeGeneratedModule(ctx, goTool, srcDir, mod); err != nil {
		return fmt.Errorf("prepare a module to build containerd %s: %w", ContainerdVersion, err)
	}
	mains := map[string]string{}
	for _, b := range containerdBinaries() {
		mains[containerdModule+"/cmd/"+b] = b
	}
	return runGoBuild(ctx, log, goTool, goBuild{
		what:    "containerd " + ContainerdVersion,
		dir:     srcDir,
		mains:   mains,
		tags:    containerdBuildTags,
		ldflags: containerdLDFlags(),
	}, outDir, buildHeartbeat)
}

// containerdLDFlags strip symbols and stamp the version the programs
// report, as containerd's Makefile does.
func containerdLDFlags() string {
	return "-s -w -X " + containerdModule + "/version.Version=" + ContainerdVersion
}

// containerdGoMod is the go.mod of the module that builds containerd
// ContainerdVersion, from containerd's own go.mod (upstream): it keeps upstream's go
// and godebug lines and its replace directives (which apply only to the
// main module, so a module that depends on containerd must repeat them),
// requires containerd and lists its programs as tools. A replace directive
// that points into containerd's source tree cannot be repeated and is an
// error.
func containerdGoMod(upstream []byte) ([]byte, error) {
	version := ContainerdVersion
	var goLine, godebug string
	var replaces []string
	inReplace := false
	sc := bufio.NewScanner(bytes.NewReader(upstream))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "//")
		line = strings.TrimSpace(line)
		switch {
		case inReplace && line == ")":
			inReplace = false
		case line == "replace (":
			inReplace = true
		case inReplace || strings.HasPrefix(line, "replace "):
			if r := strings.TrimSpace(strings.TrimPrefix(line, "replace ")); r != "" {
				replaces = append(replaces, r)
			}
		case strings.HasPrefix(line, "go "):
			goLine = line
		case strings.HasPrefix(line, "godebug "):
			godebug = line
		}
	}
	if goLine == "" {
		return nil, fmt.Errorf("the go.mod of %s %s has no go directive", containerdModule, version)
	}
	for _, r := range replaces {
		if _, target, _ := strings.Cut(r, "=>"); isLocalPath(strings.TrimSpace(target)) {
			return nil, fmt.Errorf("the go.mod of %s %s replaces a module with a directory (%s), which a module that depends on it cannot", containerdModule, version, r)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "// Generated by carve's test/cluster to build containerd %s.\nmodule carve.dev/containerd-build\n\n%s\n", version, goLine)
	if godebug != "" {
		fmt.Fprintf(&b, "\n%s\n", godebug)
	}
	b.WriteString("\ntool (\n")
	for _, bin := range containerdBinaries() {
		fmt.Fprintf(&b, "\t%s/cmd/%s\n", containerdModule, bin)
	}
	fmt.Fprintf(&b, ")\n\nrequire %s %s\n", containerdModule, version)
	if len(replaces) > 0 {
		b.WriteString("\nreplace (\n")
		for _, r := range replaces {
			fmt.Fprintf(&b, "\t%s\n", r)
		}
		b.WriteString(")\n")
	}
	return []byte(b.String()), nil
}

// isLocalPath reports whether a replace directive's target is a directory
// rather than a module.
func isLocalPath(target string) bool {
	return strings.HasPrefix(target, "./") || strings.HasPrefix(target, "../") || strings.HasPrefix(target, "/")
}
