package cluster

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// process is one component of the cluster: a child started in its own process
// group whose stdout and stderr go to a log file under the cluster root.
type process struct {
	name    string
	path    string
	args    []string
	dir     string
	env     []string
	logPath string

	cmd  *exec.Cmd
	done chan struct{}
	err  error // exit status; valid once done is closed
}

// start launches the process. The log file is opened in append mode so that a
// restarted component keeps its earlier output, separated by a header line.
func (p *process) start() error {
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open log of %s: %w", p.name, err)
	}
	defer logf.Close() // the child holds its own descriptor
	fmt.Fprintf(logf, "==== carve-cluster: %s starting %s %s\n",
		time.Now().Format(time.RFC3339Nano), p.path, strings.Join(p.args, " "))

	// Not CommandContext: a component runs until stop, not until the
	// context of whoever started it ends.
	cmd := exec.Command(p.path, p.args...) //nolint:noctx // see above
	cmd.Dir = p.dir
	cmd.Env = p.env
	cmd.Stdin = nil
	cmd.Stdout = logf
	cmd.Stderr = logf
	// Own process group: signals sent to the test's terminal do not reach
	// the components directly, and stop can signal the whole group.
	// Pdeathsig: if the test process dies without cleaning up, the kernel
	// kills the components instead of leaving them running.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s (%s): %w", p.name, p.path, err)
	}
	p.cmd = cmd
	p.done = make(chan struct{})
	p.err = nil
	go func(done chan struct{}) {
		p.err = cmd.Wait()
		close(done)
	}(p.done)
	return nil
}

// pid returns the process id, or 0 when the process was never started.
func (p *process) pid() int {
	if p == nil || p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// running reports whether the process was started and has not exited.
func (p *process) running() bool {
	if p == nil || p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM to the process group, waits up to grace, then SIGKILLs
// the group. Only the group this process leads is signalled, and only while
// its leader has not been reaped, so the id cannot refer to someone else.
func (p *process) stop(grace time.Duration) error {
	if !p.running() {
		return nil
	}
	pgid := p.cmd.Process.Pid
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %s (pgid %d): %w", p.name, pgid, err)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
	}
	if p.running() {
		if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("kill %s (pgid %d): %w", p.name, pgid, err)
		}
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, pgid)
	}
}

// exitDescription describes how an exited process ended.
func (p *process) exitDescription() string {
	if p.err == nil {
		return "exited with status 0"
	}
	return p.err.Error()
}

// tailFile returns the last n lines of the file at path, or a note saying why
// it could not be read.
func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	defer f.Close()
	// Logs can be large; only the end matters.
	const maxTail = 256 << 10
	if st, err := f.Stat(); err == nil && st.Size() > maxTail {
		if _, err := f.Seek(st.Size()-maxTail, io.SeekStart); err != nil {
			return fmt.Sprintf("(cannot read %s: %v)", path, err)
		}
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// procStartTime returns the start time of pid in clock ticks since boot
// (field 22 of /proc/<pid>/stat). Together with the pid it identifies a
// process across pid reuse.
func procStartTime(pid int) (uint64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("read stat of pid %d: %w", pid, err)
	}
	// The command name (field 2) may contain spaces; fields after it start
	// after the last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse stat of pid %d: no command name", pid)
	}
	fields := strings.Fields(string(data[i+1:]))
	// fields[0] is field 3 (state); start time is field 22.
	const idx = 22 - 3
	if len(fields) <= idx {
		return 0, fmt.Errorf("parse stat of pid %d: %d fields", pid, len(fields))
	}
	v, err := strconv.ParseUint(fields[idx], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse start time of pid %d: %w", pid, err)
	}
	return v, nil
}

// sameProcess reports whether pid is alive (not a zombie) and still the
// process that had the given start time.
func sameProcess(pid int, start uint64) bool {
	if pid <= 0 || !processRunning(pid) {
		return false
	}
	st, err := procStartTime(pid)
	return err == nil && st == start
}
