package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/carve-dev/carve/release/agentimage"
	"github.com/carve-dev/carve/release/debbase"
)

// defaultSources are the archives of a new lock: Debian 12 with its point
// release updates and security updates.
func defaultSources() []string {
	return []string{
		"http://deb.debian.org/debian bookworm main",
		"http://deb.debian.org/debian bookworm-updates main",
		"http://deb.debian.org/debian-security bookworm-security main",
	}
}

// cmdLock rewrites the lock with the newest versions of its roots (libc6
// and its dependencies; the agent embeds time zones with time/tzdata, so
// tzdata is not needed) from its sources, for amd64 and arm64.
func cmdLock(ctx context.Context, args []string, stdout io.Writer) error {
	fset := flag.NewFlagSet("carve-release lock", flag.ContinueOnError)
	source := fset.String("source", ".", "the repository root")
	path := fset.String("lock", "", "the lock file; default: SOURCE/"+agentimage.LockFile)
	if err := fset.Parse(args); err != nil {
		return err
	}
	if *path == "" {
		*path = filepath.Join(*source, agentimage.LockFile)
	}
	sources, roots := defaultSources(), []string{"libc6"}
	old, _, err := debbase.ReadLock(*path)
	switch {
	case err == nil:
		sources, roots = old.Sources, old.Roots
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	l, err := debbase.Resolve(ctx, sources, roots, []string{"amd64", "arm64"})
	if err != nil {
		return err
	}
	data, err := l.Encode()
	if err != nil {
		return err
	}
	if err := os.WriteFile(*path, data, 0o644); err != nil {
		return fmt.Errorf("write lock: %w", err)
	}
	for _, arch := range []string{"amd64", "arm64"} {
		for _, p := range l.Architectures[arch] {
			fmt.Fprintf(stdout, "%s %s\n", p, p.Path)
		}
	}
	fmt.Fprintf(stdout, "wrote %s\n", *path)
	return nil
}
