package memory

import (
	"bufio"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Mem is one reading of a process's resident memory, from /proc.
type Mem struct {
	// RSS is VmRSS and Peak is VmHWM (the most RSS the process ever had)
	// of /proc/PID/status.
	RSS, Peak uint64
	// Anon and File split the RSS of /proc/PID/smaps_rollup: anonymous
	// pages (Go heap, stacks, runtime metadata, C allocations) and pages
	// backed by a file (the binary's text and data, shared libraries),
	// shared memory included.
	Anon, File uint64
	// Binary is the RSS of the mappings of the program's own executable
	// (its text, read-only data and data), from /proc/PID/smaps; Libs that
	// of the other files mapped (libc, the dynamic loader).
	Binary, Libs uint64
	// BinaryMapped is the size of the program's loadable segments as in
	// the file (text, read-only data with the function tables, data):
	// the most of the binary that can be resident.
	BinaryMapped uint64
	// Threads is the number of threads (Threads of /proc/PID/status).
	Threads int
}

// ReadMem reads the resident memory of process pid.
func ReadMem(pid int) (Mem, error) {
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	var m Mem
	status, err := readKB(filepath.Join(dir, "status"), "VmRSS", "VmHWM")
	if err != nil {
		return m, err
	}
	m.RSS, m.Peak = status["VmRSS"], status["VmHWM"]
	if m.Threads, err = readThreads(filepath.Join(dir, "status")); err != nil {
		return m, err
	}
	rollup, err := readKB(filepath.Join(dir, "smaps_rollup"), "Rss", "Anonymous")
	if err != nil {
		return m, err
	}
	m.Anon = rollup["Anonymous"]
	m.File = rollup["Rss"] - min(rollup["Anonymous"], rollup["Rss"])
	exe, err := os.Readlink(filepath.Join(dir, "exe"))
	if err != nil {
		return m, fmt.Errorf("executable of process %d: %w", pid, err)
	}
	if m.BinaryMapped, err = loadableSize(filepath.Join(dir, "exe")); err != nil {
		return m, fmt.Errorf("executable of process %d: %w", pid, err)
	}
	f, err := os.Open(filepath.Join(dir, "smaps"))
	if err != nil {
		return m, fmt.Errorf("memory of process %d: %w", pid, err)
	}
	defer f.Close()
	byPath, err := parseSmaps(f)
	if err != nil {
		return m, fmt.Errorf("memory of process %d: %w", pid, err)
	}
	for path, rss := range byPath {
		switch {
		case path == exe:
			m.Binary += rss
		case strings.HasPrefix(path, "/"):
			m.Libs += rss
		}
	}
	return m, nil
}

// loadableSize sums the file sizes of an ELF file's loadable segments.
func loadableSize(path string) (uint64, error) {
	f, err := elf.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var n uint64
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			n += p.Filesz
		}
	}
	return n, nil
}

// readKB reads the "Name: N kB" lines of a /proc file for the names asked,
// in bytes; every name must be there.
func readKB(path string, names ...string) (map[string]uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	out := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, kb, ok := kbLine(sc.Text())
		if ok {
			out[name] = kb << 10
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	for _, n := range names {
		if _, ok := out[n]; !ok {
			return nil, fmt.Errorf("read %s: no %s", path, n)
		}
	}
	return out, nil
}

// readThreads reads the "Threads: N" line of /proc/PID/status.
func readThreads(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return 0, fmt.Errorf("read %s: threads: %w", path, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("read %s: no Threads", path)
}

// kbLine parses "Name:   1234 kB".
func kbLine(line string) (name string, kb uint64, ok bool) {
	name, rest, found := strings.Cut(line, ":")
	fields := strings.Fields(rest)
	if !found || len(fields) != 2 || fields[1] != "kB" {
		return "", 0, false
	}
	kb, err := strconv.ParseUint(fields[0], 10, 64)
	return name, kb, err == nil
}

// parseSmaps sums the Rss of /proc/PID/smaps by the path mapped: a
// mapping's header line ("start-end perms offset dev inode [path]") is
// followed by its "Field: N kB" lines. Anonymous mappings count under "",
// the kernel's own under their bracketed names ("[heap]", "[stack]").
func parseSmaps(r io.Reader) (map[string]uint64, error) {
	out := map[string]uint64{}
	path := ""
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if name, kb, ok := kbLine(line); ok {
			if name == "Rss" {
				out[path] += kb << 10
			}
			continue
		}
		fields := strings.Fields(line)
		if len(fields) >= 5 && strings.Contains(fields[0], "-") {
			path = ""
			if len(fields) >= 6 {
				path = strings.Join(fields[5:], " ")
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
