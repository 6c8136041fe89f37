// Package pipeline is `make release`: it builds every artifact into the dist
// directory (agent image archive, carvectl archives, chart, SBOMs) and
// writes SHA256SUMS over them.
package pipeline

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/carve-dev/carve/release/agentimage"
	"github.com/carve-dev/carve/release/chart"
	"github.com/carve-dev/carve/release/gobuild"
	"github.com/carve-dev/carve/release/sbom"
	"github.com/carve-dev/carve/release/sums"
	"github.com/carve-dev/carve/release/tarball"
)

// Config says what to build and where.
type Config struct {
	// Source is the repository root, Dist the output directory (emptied).
	Source, Dist      string
	Version, Revision string
	// Epoch is SOURCE_DATE_EPOCH.
	Epoch int64
	// ImagePlatforms are the image's platforms; CLIPlatforms those of the
	// carvectl archives (linux ones reuse the image's carvectl).
	ImagePlatforms, CLIPlatforms []string
	// Lock and CacheDir as in agentimage.Options.
	Lock, CacheDir string
	// BaseDir as in agentimage.Options: where built bases are kept, ""
	// for CacheDir.
	BaseDir string
	// Tool names carve-release in the SBOMs.
	Tool sbom.Tool
	Log  io.Writer
}

// Result is what Run built.
type Result struct {
	Image *agentimage.Result
	// Binaries maps "OS/ARCH" to the directory of its binaries (in the
	// work directory, valid until Close).
	Binaries map[string]string
	work     string
}

// Close removes the work directory with the loose binaries.
func (r *Result) Close() error { return os.RemoveAll(r.work) }

// Run builds the release into c.Dist.
func Run(ctx context.Context, c Config) (res *Result, err error) {
	if err := os.RemoveAll(c.Dist); err != nil {
		return nil, fmt.Errorf("empty %s: %w", c.Dist, err)
	}
	if err := os.MkdirAll(c.Dist, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", c.Dist, err)
	}
	work, err := os.MkdirTemp("", "carve-release-")
	if err != nil {
		return nil, fmt.Errorf("work directory: %w", err)
	}
	res = &Result{Binaries: map[string]string{}, work: work}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(work)
		}
	}()
	if err := c.buildBinaries(ctx, res); err != nil {
		return nil, err
	}
	if res.Image, err = agentimage.Build(ctx, agentimage.Options{
		Source: c.Source, Platforms: c.ImagePlatforms, Binaries: res.Binaries,
		Version: c.Version, Revision: c.Revision, Created: c.created(),
		Lock: c.Lock, CacheDir: c.CacheDir, BaseDir: c.BaseDir, Out: filepath.Join(c.Dist, "carve-agent_"+c.Version+".oci.tar"), Log: c.Log,
	}); err != nil {
		return nil, err
	}
	steps := []func(context.Context, *Result) error{c.cliArchives, c.binarySBOMs, c.imageSBOMs, c.chart}
	for _, step := range steps {
		if err := step(ctx, res); err != nil {
			return nil, err
		}
	}
	if err := sums.Write(c.Dist); err != nil {
		return nil, err
	}
	return res, nil
}

func (c Config) created() time.Time { return time.Unix(c.Epoch, 0).UTC() }

// buildBinaries builds the image's programs for each image platform and
// carvectl for the CLI platforms the image does not cover.
func (c Config) buildBinaries(ctx context.Context, res *Result) error {
	build := func(plat string, programs []string) error {
		goos, goarch, err := gobuild.Platform(plat)
		if err != nil {
			return err
		}
		dir := filepath.Join(res.work, goos+"_"+goarch)
		fmt.Fprintf(c.Log, "go build %s: %s\n", plat, strings.Join(programs, " "))
		_, err = gobuild.Build(ctx, gobuild.Options{Source: c.Source, OS: goos, Arch: goarch,
			Version: c.Version, Revision: c.Revision, Programs: programs, Out: dir})
		res.Binaries[plat] = dir
		return err
	}
	for _, p := range c.ImagePlatforms {
		if err := build(p, gobuild.ImagePrograms()); err != nil {
			return err
		}
	}
	for _, p := range c.CLIPlatforms {
		if _, ok := res.Binaries[p]; !ok {
			if err := build(p, []string{"carvectl"}); err != nil {
				return err
			}
		}
	}
	return nil
}

// cliArchives writes carvectl_VERSION_OS_ARCH.tar.gz with carvectl and
// kubectl-carve (the same program; kubectl runs it as `kubectl carve`).
func (c Config) cliArchives(ctx context.Context, res *Result) error {
	for _, plat := range c.CLIPlatforms {
		stage := filepath.Join(res.work, "cli-"+strings.ReplaceAll(plat, "/", "_"))
		if err := os.MkdirAll(stage, 0o755); err != nil {
			return fmt.Errorf("carvectl archive %s: %w", plat, err)
		}
		data, err := os.ReadFile(filepath.Join(res.Binaries[plat], "carvectl"))
		if err != nil {
			return fmt.Errorf("carvectl archive %s: %w", plat, err)
		}
		for _, name := range []string{"carvectl", "kubectl-carve"} {
			if err := os.WriteFile(filepath.Join(stage, name), data, 0o755); err != nil {
				return fmt.Errorf("carvectl archive %s: %w", plat, err)
			}
		}
		out := filepath.Join(c.Dist, c.artifact("carvectl", plat)+".tar.gz")
		if err := tarball.Create(ctx, out, stage, []string{"carvectl", "kubectl-carve"}, c.Epoch, true); err != nil {
			return fmt.Errorf("carvectl archive %s: %w", plat, err)
		}
	}
	return nil
}

// artifact is NAME_VERSION_OS_ARCH.
func (c Config) artifact(name, plat string) string {
	return name + "_" + c.Version + "_" + strings.ReplaceAll(plat, "/", "_")
}

// binarySBOMs writes NAME_VERSION_OS_ARCH.cdx.json for every binary built.
func (c Config) binarySBOMs(_ context.Context, res *Result) error {
	for plat, dir := range res.Binaries {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("binary sboms: %w", err)
		}
		for _, e := range entries {
			data, err := sbom.Binary(filepath.Join(dir, e.Name()), e.Name(), c.Version, c.created(), c.Tool)
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(c.Dist, c.artifact(e.Name(), plat)+".cdx.json"), data, 0o644); err != nil {
				return fmt.Errorf("binary sbom: %w", err)
			}
		}
	}
	return nil
}

// imageSBOMs writes carve-agent_VERSION_OS_ARCH.image.cdx.json per platform.
func (c Config) imageSBOMs(_ context.Context, res *Result) error {
	for _, pi := range res.Image.Images {
		goos, goarch, _ := gobuild.Platform(pi.Platform)
		var bins []sbom.ImageBinary
		for _, p := range gobuild.ImagePrograms() {
			bins = append(bins, sbom.ImageBinary{Path: "/usr/local/bin/" + p,
				File: filepath.Join(res.Binaries[pi.Platform], p), SBOM: c.artifact(p, pi.Platform) + ".cdx.json"})
		}
		data, err := sbom.Image(sbom.ImageInput{
			Repository: agentimage.Repository, Version: c.Version, Digest: pi.Digest.String(),
			OS: goos, Arch: goarch, Lock: res.Image.Lock, Binaries: bins, Created: c.created(), Tool: c.Tool,
		})
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(c.Dist, c.artifact("carve-agent", pi.Platform)+".image.cdx.json"), data, 0o644); err != nil {
			return fmt.Errorf("image sbom: %w", err)
		}
	}
	return nil
}

func (c Config) chart(_ context.Context, _ *Result) error {
	path, err := chart.Package(filepath.Join(c.Source, "charts", "carve"), c.Dist, c.Version, c.created())
	if err != nil {
		return err
	}
	fmt.Fprintf(c.Log, "chart: %s\n", path)
	return nil
}
