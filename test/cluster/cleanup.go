package cluster

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// markerFile marks a directory as a cluster root made by this package; only
// such directories are ever emptied or removed.
const markerFile = ".carve-cluster"

// mountPoint is one line of /proc/self/mountinfo.
type mountPoint struct {
	path    string
	fsType  string
	options []string // super options, e.g. the cgroup controllers
}

// readMounts parses /proc/self/mountinfo in order of mounting.
func readMounts() ([]mountPoint, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	var mounts []mountPoint
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if len(fields) < 5 || sep < 0 || len(fields) < sep+4 {
			continue
		}
		mounts = append(mounts, mountPoint{
			path:    unescapeMountPath(fields[4]),
			fsType:  fields[sep+1],
			options: strings.Split(fields[sep+3], ","),
		})
	}
	return mounts, nil
}

// unescapeMountPath undoes the octal escapes (\040 for space and so on) of
// the mount table.
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// within reports whether path is root or lies below it.
func within(path, root string) bool {
	return path == root || strings.HasPrefix(path, strings.TrimSuffix(root, "/")+"/")
}

// mountsUnder returns the mount points at or below root, most recent first,
// which is a safe order to unmount them in.
func mountsUnder(root string) ([]string, error) {
	mounts, err := readMounts()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range slices.Backward(mounts) {
		if within(m.path, root) && !slices.Contains(out, m.path) {
			out = append(out, m.path)
		}
	}
	return out, nil
}

// unmountAll unmounts everything mounted at or below root (what the kubelet
// and containerd mounted: the kubelet's own bind mount of its root, pod
// volumes, container root file systems, sandbox shm). A mount that stays busy
// is detached lazily.
func unmountAll(root string) error {
	for range 5 {
		mps, err := mountsUnder(root)
		if err != nil {
			return err
		}
		if len(mps) == 0 {
			return nil
		}
		for _, mp := range mps {
			if err := syscall.Unmount(mp, 0); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				// Busy: detach it now, the kernel finishes when it is free.
				_ = syscall.Unmount(mp, syscall.MNT_DETACH)
			}
		}
	}
	mps, err := mountsUnder(root)
	if err != nil {
		return err
	}
	if len(mps) > 0 {
		return fmt.Errorf("still mounted under %s: %s", root, strings.Join(mps, ", "))
	}
	return nil
}

// removeTree deletes a cluster root after unmounting what is mounted inside.
// It refuses directories without the marker file and never descends into a
// mount point, so a failed unmount cannot make it delete foreign files.
func removeTree(root string) error {
	if _, err := os.Lstat(filepath.Join(root, markerFile)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if _, err := os.Lstat(root); errors.Is(err, fs.ErrNotExist) {
				return nil
			}
		}
		return fmt.Errorf("refusing to remove %s: not a carve-cluster directory (%w)", root, err)
	}
	if err := unmountAll(root); err != nil {
		return fmt.Errorf("remove %s: %w", root, err)
	}
	if mps, err := mountsUnder(root); err != nil || len(mps) > 0 {
		return fmt.Errorf("remove %s: mounts remain (%v): %w", root, mps, err)
	}
	if err := os.RemoveAll(root); err != nil {
		return fmt.Errorf("remove %s: %w", root, err)
	}
	return nil
}

// cgroupDirs returns the directories of the cgroup named name (a path like
// "/carve-ab12") in every mounted cgroup hierarchy.
func cgroupDirs(name string) ([]string, error) {
	mounts, err := readMounts()
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, m := range mounts {
		if (m.fsType == "cgroup" || m.fsType == "cgroup2") && within(m.path, "/sys/fs/cgroup") {
			d := filepath.Join(m.path, name)
			if !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
	}
	return dirs, nil
}

// createCgroupRoot creates the cgroup the kubelet puts all pods under, in
// every hierarchy; the kubelet requires it to exist.
func createCgroupRoot(name string) error {
	mounts, err := readMounts()
	if err != nil {
		return err
	}
	for _, m := range mounts {
		if (m.fsType != "cgroup" && m.fsType != "cgroup2") || !within(m.path, "/sys/fs/cgroup") {
			continue
		}
		d := filepath.Join(m.path, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create cgroup %s: %w", d, err)
		}
		if slices.Contains(m.options, "cpuset") {
			// A new cpuset is empty; no task can join until it has CPUs
			// and memory nodes.
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(m.path, f))
				if err != nil {
					return fmt.Errorf("read %s: %w", f, err)
				}
				if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
					return fmt.Errorf("set %s of %s: %w", f, d, err)
				}
			}
		}
		if m.fsType == "cgroup2" && m.path == "/sys/fs/cgroup" {
			// Unified hierarchy: let the kubelet use the controllers below.
			ctrl, err := os.ReadFile(filepath.Join(d, "cgroup.controllers"))
			if err == nil && len(bytes.TrimSpace(ctrl)) > 0 {
				var enable []string
				for c := range strings.FieldsSeq(string(ctrl)) {
					enable = append(enable, "+"+c)
				}
				if err := os.WriteFile(filepath.Join(d, "cgroup.subtree_control"), []byte(strings.Join(enable, " ")), 0o644); err != nil {
					return fmt.Errorf("enable controllers in %s: %w", d, err)
				}
			}
		}
	}
	return nil
}

// killCgroup SIGKILLs every process in the named cgroup and its children in
// all hierarchies, then removes the cgroups, deepest first. Every process in
// there was started for this cluster's pods.
func killCgroup(name string) error {
	if name == "" || name == "/" {
		return fmt.Errorf("refusing to kill cgroup %q", name)
	}
	dirs, err := cgroupDirs(name)
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range dirs {
		if _, err := os.Stat(d); err != nil {
			continue
		}
		var tree []string
		_ = filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				tree = append(tree, p)
			}
			return nil
		})
		deadline := time.Now().Add(10 * time.Second)
		for {
			pids := cgroupPids(tree)
			if len(pids) == 0 {
				break
			}
			if time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("processes %v in %s survive SIGKILL", pids, d))
				break
			}
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			time.Sleep(100 * time.Millisecond)
		}
		// Deepest first: a cgroup can only be removed once it has no children.
		slices.SortFunc(tree, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
		for _, p := range tree {
			var rmErr error
			for range 20 {
				if rmErr = syscall.Rmdir(p); rmErr == nil || errors.Is(rmErr, syscall.ENOENT) {
					rmErr = nil
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if rmErr != nil {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", p, rmErr))
			}
		}
	}
	return errors.Join(errs...)
}

// waitGone waits until none of pids runs any more (exited, or a zombie
// waiting for init to reap it) and returns those still running at timeout.
func waitGone(pids []int, timeout time.Duration) []int {
	deadline := time.Now().Add(timeout)
	for {
		var left []int
		for _, pid := range pids {
			if processRunning(pid) {
				left = append(left, pid)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// processRunning reports whether pid exists and is not a zombie.
func processRunning(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(data, ')')
	return i >= 0 && i+2 < len(data) && data[i+2] != 'Z'
}

// cgroupPids lists the processes in the given cgroup directories.
func cgroupPids(dirs []string) []int {
	var pids []int
	for _, d := range dirs {
		data, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			continue
		}
		for f := range strings.FieldsSeq(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 && !slices.Contains(pids, pid) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// killShims SIGKILLs containerd shims serving the containerd at socket. A
// shim leaves containerd's process group and outlives it, but it is started
// with "-address <socket>", and that socket path is unique to one cluster.
func killShims(socket string) error {
	pids, err := shimsOf(socket)
	if err != nil {
		return err
	}
	var errs []error
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("kill shim %d: %w", pid, err))
		}
	}
	if left := waitGone(pids, 5*time.Second); len(left) > 0 {
		errs = append(errs, fmt.Errorf("containerd shims %v survive SIGKILL", left))
	}
	return errors.Join(errs...)
}

// shimsOf lists the containerd shims (containerd-shim-runc-v2 and the
// like) started with "-address <socket>".
func shimsOf(socket string) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if len(args) == 0 || !strings.Contains(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-address" && args[i+1] == socket {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids, nil
}
