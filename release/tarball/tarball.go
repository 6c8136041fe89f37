// Package tarball writes reproducible tar archives with GNU tar: entries
// sorted by name, owned by 0:0, modified at SOURCE_DATE_EPOCH, modes fixed,
// no access or change times, and gzip without a name or time stamp.
package tarball

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// Flags are GNU tar's options for a reproducible archive modified at epoch.
func Flags(epoch int64) []string {
	return []string{
		"--sort=name", "--mtime=@" + strconv.FormatInt(epoch, 10),
		"--owner=0", "--group=0", "--numeric-owner", "--format=pax",
		// Modes independent of the umask: 0755 for directories and
		// executables, 0644 for the rest.
		"--mode=u+rwX,go=rX",
		"--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime",
	}
}

// Create archives the paths (relative to dir) into out, gzipped (gzip -n)
// when gz is true.
func Create(ctx context.Context, out, dir string, paths []string, epoch int64, gz bool) error {
	f, err := os.Create(out)
	if err != nil {
		return fmt.Errorf("create %s: %w", out, err)
	}
	defer f.Close()
	args := append(Flags(epoch), "-cf", "-", "-C", dir, "--")
	tarCmd := exec.CommandContext(ctx, "tar", append(args, paths...)...)
	var tarErr, gzErr bytes.Buffer
	tarCmd.Stderr = &tarErr
	if !gz {
		tarCmd.Stdout = f
		if err := tarCmd.Run(); err != nil {
			return fmt.Errorf("tar %s: %w: %s", out, err, strings.TrimSpace(tarErr.String()))
		}
		return f.Close()
	}
	gzCmd := exec.CommandContext(ctx, "gzip", "-n", "-9")
	gzCmd.Stdout, gzCmd.Stderr = f, &gzErr
	pipe, err := tarCmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("tar %s: %w", out, err)
	}
	gzCmd.Stdin = pipe
	if err := tarCmd.Start(); err != nil {
		return fmt.Errorf("tar %s: %w", out, err)
	}
	if err := gzCmd.Run(); err != nil {
		_ = tarCmd.Wait()
		return fmt.Errorf("gzip %s: %w: %s", out, err, strings.TrimSpace(gzErr.String()))
	}
	if err := tarCmd.Wait(); err != nil {
		return fmt.Errorf("tar %s: %w: %s", out, err, strings.TrimSpace(tarErr.String()))
	}
	return f.Close()
}
