package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/carve-dev/carve/release/pipeline"
	"github.com/carve-dev/carve/release/sums"
)

// cmdCheck builds the quick release into --dist, then again from a copy of
// the source at another path (so -trimpath is exercised), with a base built
// anew, into a temporary directory, and fails unless both SHA256SUMS are
// the same.
func cmdCheck(ctx context.Context, args []string, stdout io.Writer) error {
	_, c, err := parseBuildFlags(ctx, "check", false, args, stdout)
	if err != nil {
		return err
	}
	start := time.Now()
	res, err := pipeline.Run(ctx, c)
	if err != nil {
		return err
	}
	_ = res.Close()
	summary(stdout, c, res, time.Since(start))

	tmp, err := os.MkdirTemp("", "carve-release-check-")
	if err != nil {
		return fmt.Errorf("second build: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	second := c
	// The second build also makes its base anew, from the same verified
	// packages, so that mmdebstrap's output is compared too.
	second.Source, second.Dist, second.BaseDir = filepath.Join(tmp, "src"), filepath.Join(tmp, "dist"), filepath.Join(tmp, "base")
	if err := copySource(ctx, c.Source, second.Source); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nsecond build, from a copy of the source in %s\n", second.Source)
	second.Log = io.Discard
	res2, err := pipeline.Run(ctx, second)
	if err != nil {
		return fmt.Errorf("second build: %w", err)
	}
	_ = res2.Close()
	diff, err := sums.Compare(c.Dist, second.Dist)
	if err != nil {
		return err
	}
	if len(diff) > 0 {
		return fmt.Errorf("the two builds differ (SHA256SUMS of %s, then of the second):\n%s", c.Dist, strings.Join(diff, "\n"))
	}
	fmt.Fprintf(stdout, "reproducible: both builds have the same SHA256SUMS (image %s)\n", res2.Image.Digest)
	return nil
}

// copySource copies the files git tracks or would track (not ignored) from
// src to dst.
func copySource(ctx context.Context, src, dst string) error {
	cmd := exec.CommandContext(ctx, "git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = src
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("copy source: git ls-files: %w", err)
	}
	for name := range bytes.SplitSeq(bytes.TrimSuffix(out, []byte{0}), []byte{0}) {
		from := filepath.Join(src, string(name))
		info, err := os.Lstat(from)
		if err != nil || !info.Mode().IsRegular() {
			continue // deleted in the work tree, or a link
		}
		data, err := os.ReadFile(from)
		if err != nil {
			return fmt.Errorf("copy source: %w", err)
		}
		to := filepath.Join(dst, string(name))
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return fmt.Errorf("copy source: %w", err)
		}
		if err := os.WriteFile(to, data, info.Mode().Perm()); err != nil {
			return fmt.Errorf("copy source: %w", err)
		}
	}
	return nil
}
