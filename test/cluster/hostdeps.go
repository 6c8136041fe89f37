package cluster

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// HostTools are the programs from the host that a cluster runs, found (and
// installed when missing) by EnsureHostTools. containerd is not one of
// them: it is built from its Go module (see EnsureContainerd).
type HostTools struct {
	Etcd      string // etcd server binary
	Runc      string // OCI runtime the containerd shim calls
	CNIBinDir string // directory holding the CNI "loopback" plugin
	Busybox   string // a statically linked busybox, copied into the test image
}

// HostPackages returns the Debian packages that provide HostTools, in the
// order they are installed.
func HostPackages() []string {
	return []string{"etcd-server", "runc", "containernetworking-plugins", "busybox-static"}
}

// cniBinDirs are searched, in order, for the CNI loopback plugin.
func cniBinDirs() []string { return []string{"/usr/lib/cni", "/opt/cni/bin"} }

// busyboxPaths are searched, in order, for a static busybox.
func busyboxPaths() []string { return []string{"/bin/busybox", "/usr/bin/busybox"} }

// EnsureHostTools finds the host programs a cluster needs. Whatever is missing
// is installed with apt-get (after an apt-get update), which needs root and a
// reachable Debian mirror; nothing is installed when all is present.
func EnsureHostTools(ctx context.Context, log io.Writer) (HostTools, error) {
	tools, missing := findHostTools()
	if len(missing) == 0 {
		return tools, nil
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return tools, fmt.Errorf("missing host packages %s and no apt-get to install them: install them by hand", strings.Join(missing, " "))
	}
	if os.Geteuid() != 0 {
		return tools, fmt.Errorf("missing host packages %s; installing them needs root", strings.Join(missing, " "))
	}
	fmt.Fprintf(log, "installing host packages: %s\n", strings.Join(missing, " "))
	start := time.Now()
	if err := aptGet(ctx, log, "update"); err != nil {
		return tools, err
	}
	args := append([]string{"install", "-y", "--no-install-recommends"}, missing...)
	if err := aptGet(ctx, log, args...); err != nil {
		return tools, err
	}
	fmt.Fprintf(log, "installed %s in %s\n", strings.Join(missing, " "), time.Since(start).Round(time.Second))
	tools, missing = findHostTools()
	if len(missing) > 0 {
		return tools, fmt.Errorf("packages %s installed but their programs are still missing", strings.Join(missing, " "))
	}
	return tools, nil
}

// findHostTools looks for every host tool and returns the packages that
// would provide the missing ones.
func findHostTools() (HostTools, []string) {
	var t HostTools
	var missing []string
	need := func(pkg string) {
		if !slices.Contains(missing, pkg) {
			missing = append(missing, pkg)
		}
	}
	look := func(name, pkg string) string {
		p, err := lookPathSbin(name)
		if err != nil {
			need(pkg)
		}
		return p
	}
	t.Etcd = look("etcd", "etcd-server")
	t.Runc = look("runc", "runc")
	for _, d := range cniBinDirs() {
		if isExecutable(filepath.Join(d, "loopback")) {
			t.CNIBinDir = d
			break
		}
	}
	if t.CNIBinDir == "" {
		need("containernetworking-plugins")
	}
	for _, p := range busyboxPaths() {
		if isExecutable(p) && isStatic(p) {
			t.Busybox = p
			break
		}
	}
	if t.Busybox == "" {
		need("busybox-static")
	}
	// Keep apt's order stable and predictable in logs.
	slices.SortFunc(missing, func(a, b string) int {
		return slices.Index(HostPackages(), a) - slices.Index(HostPackages(), b)
	})
	return t, missing
}

// lookPathSbin is exec.LookPath that also searches the sbin directories,
// which a non-login PATH may lack.
func lookPathSbin(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"} {
		p := filepath.Join(d, name)
		if isExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in PATH or the system directories", name)
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}

// isStatic reports whether the ELF file at path has no program interpreter,
// i.e. runs without the host's dynamic loader and libraries.
func isStatic(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}

// aptGet runs apt-get non-interactively, retrying while another apt or dpkg
// holds the package system's locks (other engineers' installs, say).
func aptGet(ctx context.Context, log io.Writer, args ...string) error {
	full := append([]string{"-q", "-o", "DPkg::Lock::Timeout=300", "-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold"}, args...)
	var lastErr error
	for attempt := 1; attempt <= 5; attempt++ {
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, "apt-get", full...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout = io.MultiWriter(&out, log)
		cmd.Stderr = io.MultiWriter(&out, log)
		err := cmd.Run()
		if err == nil {
			return nil
		}
		lastErr = fmt.Errorf("apt-get %s: %w\n%s", strings.Join(args, " "), err, lastLines(out.String(), 20))
		if ctx.Err() != nil || !strings.Contains(out.String(), "lock") {
			return lastErr
		}
		fmt.Fprintf(log, "apt-get is locked by another process; retrying (%d/5)\n", attempt)
		select {
		case <-ctx.Done():
			return errors.Join(lastErr, ctx.Err())
		case <-time.After(time.Duration(attempt) * 5 * time.Second):
		}
	}
	return lastErr
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
