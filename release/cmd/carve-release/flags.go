package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/carve-dev/carve/release/agentimage"
	"github.com/carve-dev/carve/release/pipeline"
	"github.com/carve-dev/carve/release/sbom"
)

// version is carve-release's own version, for the SBOMs' tools; the
// Makefile stamps the release version.
var version = "devel"

// buildFlags are the flags of build and check.
type buildFlags struct {
	source, dist, version, revision, epoch, lock, cache string
	full                                                bool
}

func (f *buildFlags) register(fs *flag.FlagSet, full bool) {
	fs.StringVar(&f.source, "source", ".", "the repository root")
	fs.StringVar(&f.dist, "dist", "dist", "the output directory (emptied first)")
	fs.StringVar(&f.version, "version", "", "the release version; default: git describe --tags --always --dirty")
	fs.StringVar(&f.revision, "revision", "", "the commit; default: git rev-parse HEAD")
	fs.StringVar(&f.epoch, "source-date-epoch", "", "SOURCE_DATE_EPOCH; default: HEAD's commit time")
	fs.StringVar(&f.lock, "lock", "", "the base lock file; default: SOURCE/"+agentimage.LockFile)
	fs.StringVar(&f.cache, "cache", "", "cache of .debs and bases; default: $CARVE_RELEASE_CACHE or ~/.cache/carve-release")
	if full {
		fs.BoolVar(&f.full, "full", false, "both architectures, carvectl for linux and darwin, arm64 run under qemu")
	}
}

// parseBuildFlags parses the flags of carve-release's command name (build,
// with --full when full, or check) and resolves them into a pipeline config
// that logs to stdout.
func parseBuildFlags(ctx context.Context, name string, full bool, args []string, stdout io.Writer) (buildFlags, pipeline.Config, error) {
	fs := flag.NewFlagSet("carve-release "+name, flag.ContinueOnError)
	var f buildFlags
	f.register(fs, full)
	if err := fs.Parse(args); err != nil {
		return f, pipeline.Config{}, err
	}
	c, err := f.config(ctx)
	c.Log = stdout
	return f, c, err
}

// config resolves the flags' defaults from git into a pipeline config.
func (f *buildFlags) config(ctx context.Context) (pipeline.Config, error) {
	var err error
	git := func(dst *string, args ...string) {
		if *dst != "" || err != nil {
			return
		}
		var out []byte
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = f.source
		if out, err = cmd.Output(); err != nil {
			err = fmt.Errorf("git %s (or pass the flag): %w", strings.Join(args, " "), err)
		}
		*dst = strings.TrimSpace(string(out))
	}
	git(&f.version, "describe", "--tags", "--always", "--dirty")
	git(&f.revision, "rev-parse", "HEAD")
	git(&f.epoch, "log", "-1", "--format=%ct")
	if err != nil {
		return pipeline.Config{}, err
	}
	epoch, err := strconv.ParseInt(f.epoch, 10, 64)
	if err != nil {
		return pipeline.Config{}, fmt.Errorf("--source-date-epoch %q: %w", f.epoch, err)
	}
	c := pipeline.Config{
		Source: f.source, Dist: f.dist, Version: f.version, Revision: f.revision, Epoch: epoch,
		ImagePlatforms: []string{"linux/amd64"}, CLIPlatforms: []string{"linux/amd64"},
		Lock: f.lock, CacheDir: f.cache, Tool: sbom.Tool{Name: "carve-release", Version: version},
	}
	if f.full {
		c.ImagePlatforms = []string{"linux/amd64", "linux/arm64"}
		c.CLIPlatforms = []string{"darwin/amd64", "darwin/arm64", "linux/amd64", "linux/arm64"}
	}
	if c.CacheDir == "" {
		if c.CacheDir, err = agentimage.DefaultCacheDir(); err != nil {
			return pipeline.Config{}, err
		}
	}
	if c.Lock == "" {
		c.Lock = filepath.Join(f.source, agentimage.LockFile)
	}
	return c, nil
}
