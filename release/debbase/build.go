package debbase

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// baseEpoch is SOURCE_DATE_EPOCH for mmdebstrap: every file of the base gets
// this modification time, so that the base depends on the lock alone and a
// cached base serves every release.
const baseEpoch = "0"

// cleanup is the shell mmdebstrap runs as an extract hook in the extracted
// root file system ($1) (its extract variant runs no customize hooks). It
// drops what apt, dpkg and mmdebstrap leave there, including the host's
// /etc/hostname and /etc/resolv.conf (a container runtime mounts its own),
// glibc's iconv modules (gconv; Go programs do not use iconv) and the
// packages' documentation but their copyright files, and adds the few
// files a container expects: root's account, /etc/ld.so.conf (so that the
// NVIDIA container toolkit's ldconfig finds the libraries it injects) and a
// sticky /tmp.
const cleanup = `#!/bin/sh
set -e
cd "$1"
rm -rf etc/apt etc/dpkg etc/fstab etc/hostname etc/resolv.conf var usr/share/lintian usr/share/man usr/share/info usr/lib/*-linux-gnu/gconv
find usr/share/doc -type f ! -name copyright -delete
mkdir -p etc tmp root
chmod 1777 tmp
chmod 0700 root
printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' >etc/passwd
printf 'root:x:0:\nnogroup:x:65534:\n' >etc/group
printf 'hosts: files dns\n' >etc/nsswitch.conf
printf 'include /etc/ld.so.conf.d/*.conf\n' >etc/ld.so.conf
`

// BaseOptions says which base to build and where to keep it.
type BaseOptions struct {
	// Lock is the parsed lock file and LockData its bytes (their hash keys
	// the cache).
	Lock     *Lock
	LockData []byte
	// Arch is the Debian architecture, e.g. arm64.
	Arch string
	// CacheDir holds downloaded .debs and built bases.
	CacheDir string
	// BaseDir, when set, holds the built base instead of CacheDir's base/:
	// an empty directory makes Base build it anew from the cached, verified
	// .debs (the reproducibility check's second build).
	BaseDir string
	// Log gets progress lines and mmdebstrap's output; nil: discarded.
	Log io.Writer
}

// Base returns the path of the base root file system of o.Arch, an
// uncompressed tar, building it with mmdebstrap when the cache has none for
// this lock and architecture.
func Base(ctx context.Context, o BaseOptions) (string, error) {
	log := o.Log
	if log == nil {
		log = io.Discard
	}
	pkgs, err := o.Lock.Packages(o.Arch)
	if err != nil {
		return "", err
	}
	path := filepath.Join(cmp.Or(o.BaseDir, filepath.Join(o.CacheDir, "base")), fmt.Sprintf("%s-%s.tar", Hash(o.LockData)[:16], o.Arch))
	if _, err := os.Stat(path); err == nil {
		fmt.Fprintf(log, "base %s: cached %s\n", o.Arch, path)
		return path, nil
	}
	repo, err := os.MkdirTemp("", "carve-release-repo-")
	if err != nil {
		return "", fmt.Errorf("base %s: %w", o.Arch, err)
	}
	defer func() { _ = os.RemoveAll(repo) }()
	if err := localRepo(ctx, pkgs, o.CacheDir, repo); err != nil {
		return "", fmt.Errorf("base %s: %w", o.Arch, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", fmt.Errorf("base cache: %w", err)
	}
	tmp := fmt.Sprintf("%s.tmp-%d", path, os.Getpid())
	defer func() { _ = os.Remove(tmp) }()
	fmt.Fprintf(log, "base %s: mmdebstrap --variant=extract of %d pinned packages\n", o.Arch, len(pkgs))
	if err := mmdebstrap(ctx, pkgs, o.Arch, repo, tmp, log); err != nil {
		return "", fmt.Errorf("base %s: %w", o.Arch, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("base cache: %w", err)
	}
	return path, nil
}

// localRepo fetches and verifies pkgs and makes dir a flat apt repository
// of exactly them (apt-ftparchive's Packages index).
func localRepo(ctx context.Context, pkgs []Package, cacheDir, dir string) error {
	for _, p := range pkgs {
		deb, err := Fetch(ctx, p, cacheDir)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(deb)
		if err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(p.Path)), data, 0o644); err != nil {
			return fmt.Errorf("local repository: %w", err)
		}
	}
	cmd := exec.CommandContext(ctx, "apt-ftparchive", "packages", ".")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	index, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("apt-ftparchive packages: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	if err := os.WriteFile(filepath.Join(dir, "Packages"), index, 0o644); err != nil {
		return fmt.Errorf("local repository: %w", err)
	}
	return nil
}

// mmdebstrap extracts pkgs from the flat repository repo into the tar out.
func mmdebstrap(ctx context.Context, pkgs []Package, arch, repo, out string, log io.Writer) error {
	var names []string
	for _, p := range pkgs {
		names = append(names, p.Name)
	}
	hook := filepath.Join(filepath.Dir(out), "cleanup-hook.sh")
	if err := os.WriteFile(hook, []byte(cleanup), 0o755); err != nil {
		return fmt.Errorf("mmdebstrap hook: %w", err)
	}
	defer func() { _ = os.Remove(hook) }()
	args := []string{
		"--variant=extract", "--architectures=" + arch,
		"--include=" + strings.Join(names, ","),
		"--format=tar", "--quiet",
		// The hook removes apt's state, which mmdebstrap's own cleanup
		// would use; /dev is the container runtime's.
		"--skip=output/dev,cleanup/apt,cleanup/mmdebstrap",
		"--extract-hook=" + hook,
		"bookworm", out,
		// copy:// (not file://): mmdebstrap copies the packages into the
		// chroot's apt cache, which a file:// mirror outside it is not.
		"deb [trusted=yes] copy://" + repo + " ./",
	}
	cmd := exec.CommandContext(ctx, "mmdebstrap", args...)
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+baseEpoch, "LC_ALL=C")
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("mmdebstrap: %w:\n%s", err, output.String())
	}
	_, _ = log.Write(output.Bytes())
	return nil
}
