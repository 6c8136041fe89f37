package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// RepoRoot finds the carve repository root (the directory whose go.mod is
// the module github.com/carve-dev/carve) from dir upwards.
func RepoRoot(dir string) (string, error) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && isCarveModule(b) {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("no carve repository above %s", dir)
		}
		d = parent
	}
}

func isCarveModule(gomod []byte) bool {
	return slices.Contains(strings.Split(string(gomod), "\n"), "module github.com/carve-dev/carve")
}

// TestHooksTag is the build tag that compiles carve-agent's test hooks
// (cmd/carve-agent/testhooks.go), such as the crash test's
// CARVE_FAULT_EXIT_AFTER_OPS. Binaries built without it have none.
const TestHooksTag = "carve_testhooks"

// BuildAgent builds cmd/carve-agent of the repository at root into dir,
// with the given build tags (none: the production binary; TestHooksTag:
// with the test hooks), and returns the binary's path.
func BuildAgent(ctx context.Context, root, dir string, tags ...string) (string, error) {
	return Build(ctx, root, dir, "carve-agent", tags...)
}

// Build builds the command cmd/<name> of the repository at root into dir,
// with cgo and the given build tags, and returns the binary's path.
func Build(ctx context.Context, root, dir, name string, tags ...string) (string, error) {
	out := filepath.Join(dir, name)
	args := []string{"build", "-o", out}
	what := name
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
		what += " -tags " + strings.Join(tags, ",")
	}
	args = append(args, "./cmd/"+name)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if os.Getenv("CGO_CFLAGS") == "" { // as the Makefile: cgo's -O2 -g without go-nvml's deprecation warnings
		cmd.Env = append(cmd.Env, "CGO_CFLAGS=-O2 -g -Wno-deprecated-declarations")
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %w\n%s", what, err, b)
	}
	return out, nil
}

// ErrNotExited is returned by Process.Wait when the process still runs.
var ErrNotExited = errors.New("process still running")

// Process is a carve-agent (or any) process started by Start.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	log  *os.File
}

// Start runs path with args and extra environment, its output going to
// logPath (appended).
func Start(path string, args, env []string, logPath string) (*Process, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: log: %w", filepath.Base(path), err)
	}
	// The process lives until Stop or Kill, not as long as some context.
	cmd := exec.CommandContext(context.Background(), path, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, errors.Join(fmt.Errorf("start %s: %w", filepath.Base(path), err), log.Close())
	}
	p := &Process{cmd: cmd, done: make(chan struct{}), log: log}
	go func() {
		p.err = errors.Join(cmd.Wait(), log.Close())
		close(p.done)
	}()
	return p, nil
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Wait waits up to limit for the process to end and returns its exit code
// (-1 when a signal ended it), or ErrNotExited.
func (p *Process) Wait(limit time.Duration) (int, error) {
	if !p.Exited() {
		select {
		case <-p.done:
		case <-time.After(limit):
			return 0, fmt.Errorf("after %s: %w", limit, ErrNotExited)
		}
	}
	if p.err == nil {
		return 0, nil
	}
	if ee, ok := errors.AsType[*exec.ExitError](p.err); ok {
		return ee.ExitCode(), nil
	}
	return 0, p.err
}

// Stop sends SIGTERM, waits up to 15 s for the process to end, then kills
// it; it returns the exit code.
func (p *Process) Stop() (int, error) {
	if p.Exited() {
		return p.Wait(0)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	code, err := p.Wait(15 * time.Second)
	if errors.Is(err, ErrNotExited) {
		_ = p.cmd.Process.Kill()
		code, err = p.Wait(5 * time.Second)
		if err == nil {
			err = errors.New("did not stop on SIGTERM; killed")
		}
	}
	return code, err
}

// Tail returns the last n lines of a log file.
func Tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n") + "\n"
}

// Signal sends sig to the process: syscall.SIGKILL for a kill that no
// handler sees, as a crashed node or the OOM killer would.
func (p *Process) Signal(sig os.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %s to %s: %w", sig, filepath.Base(p.cmd.Path), err)
	}
	return nil
}

// PID is the process's id.
func (p *Process) PID() int { return p.cmd.Process.Pid }
