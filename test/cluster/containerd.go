package cluster

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"strings"
)

// ContainerdVersion is the containerd release the cluster runs. It is built
// once from its Go module (github.com/containerd/containerd/v2), which the
// test module requires at this version and lists its programs as tools,
// not taken from the host: the distributions' containerd 1.x ignores CDI
// device names, which DRA drivers and device plugins (carve-agent --cdi)
// answer with. It runs with the host's runc. Built in the test module,
// containerd shares the versions, and so Go's build cache, of the packages
// Kubernetes also uses (grpc, protobuf, apimachinery, ...).
const ContainerdVersion = "v2.4.2"

// containerdModule is containerd's Go module.
const containerdModule = "github.com/containerd/containerd/v2"

// containerdRecipe changes whenever the way containerd is built changes, so
// that binaries built by an older recipe are rebuilt.
const containerdRecipe = "2"

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
// containerd-<version>/bin). srcDir is the test module's directory; when
// empty it is searched for (see FindSourceDir). The build takes a few
// minutes on a 2-core machine with cold Go caches, less after Kubernetes'
// build; it is done once per version, and concurrent callers wait for one
// build.
func EnsureContainerd(ctx context.Context, log io.Writer, cacheDir, srcDir string) (ContainerdBinaries, error) {
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
			return buildContainerd(ctx, log, srcDir, outDir)
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

// buildContainerd builds the containerd programs into outDir from the test
// module at srcDir (found when empty).
func buildContainerd(ctx context.Context, log io.Writer, srcDir, outDir string) error {
	goTool, err := findGo()
	if err != nil {
		return err
	}
	if srcDir == "" {
		if srcDir, err = FindSourceDir(); err != nil {
			return err
		}
	}
	fmt.Fprintf(log, "building containerd %s (%s) in %s; the first build takes a few minutes\n",
		ContainerdVersion, strings.Join(containerdBinaries(), ", "), srcDir)
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
