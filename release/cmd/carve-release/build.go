package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/carve-dev/carve/release/gobuild"
	"github.com/carve-dev/carve/release/pipeline"
	"github.com/carve-dev/carve/release/smoke"
)

func cmdBuild(ctx context.Context, args []string, stdout io.Writer) error {
	f, c, err := parseBuildFlags(ctx, "build", true, args, stdout)
	if err != nil {
		return err
	}
	start := time.Now()
	res, err := pipeline.Run(ctx, c)
	if err != nil {
		return err
	}
	defer res.Close()
	if f.full {
		if err := smokeTest(ctx, c, res, stdout); err != nil {
			return err
		}
	}
	summary(stdout, c, res, time.Since(start))
	return nil
}

// smokeTest runs the arm64 image's programs under qemu and checks the
// darwin binaries' build information.
func smokeTest(ctx context.Context, c pipeline.Config, res *pipeline.Result, log io.Writer) error {
	for _, pi := range res.Image.Images {
		if pi.Platform == "linux/arm64" {
			if err := smokeArm64(ctx, c, res.Image.Archive, log); err != nil {
				return err
			}
		}
	}
	for _, plat := range c.CLIPlatforms {
		goos, goarch, _ := gobuild.Platform(plat)
		if goos != "darwin" {
			continue
		}
		if err := smoke.GoBinary(ctx, filepath.Join(res.Binaries[plat], "carvectl"), goos, goarch, c.Version, c.Revision); err != nil {
			return err
		}
		fmt.Fprintf(log, "smoke %s: carvectl: GOOS, GOARCH, version and revision stamped\n", plat)
	}
	return nil
}

// smokeArm64 unpacks the arm64 image from the release archive and runs its
// programs under qemu.
func smokeArm64(ctx context.Context, c pipeline.Config, archive string, log io.Writer) error {
	scratch, err := os.MkdirTemp("", "carve-release-smoke-")
	if err != nil {
		return fmt.Errorf("smoke: %w", err)
	}
	defer func() { _ = os.RemoveAll(scratch) }()
	root := filepath.Join(scratch, "rootfs")
	if err := os.Mkdir(root, 0o755); err != nil {
		return fmt.Errorf("smoke: %w", err)
	}
	if err := smoke.RootfsFromArchive(ctx, archive, "linux/arm64", scratch, root); err != nil {
		return err
	}
	return smoke.RunArm64(ctx, root, c.Source, smoke.Checks(c.Version), log)
}

func summary(w io.Writer, c pipeline.Config, res *pipeline.Result, took time.Duration) {
	fmt.Fprintf(w, "\n%s: %s in %s\n", c.Dist, res.Image.Ref, took.Round(time.Second))
	fmt.Fprintf(w, "  image index digest %s\n", res.Image.Digest)
	for _, pi := range res.Image.Images {
		fmt.Fprintf(w, "  %-12s %s  %s compressed, %s unpacked\n", pi.Platform, pi.Digest,
			mib(pi.Size.Compressed), mib(pi.Size.Uncompressed))
	}
	entries, _ := os.ReadDir(c.Dist)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	fmt.Fprintf(w, "  files: %s\n", strings.Join(names, " "))
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
