package memory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/carve-dev/carve/test/cluster"
	"github.com/carve-dev/carve/test/harness"
)

// proc is a program the run started: carve-agent or the floor.
type proc struct {
	*harness.Process
	log     string
	metrics string // carve-agent's /metrics URL; "" for the floor
	stats   string // the floor's memstats file; "" for carve-agent
}

// startProc runs bin with args, its output going to logPath.
func startProc(bin string, args []string, logPath string) (*proc, error) {
	p, err := harness.Start(bin, args, nil, logPath)
	if err != nil {
		return nil, err
	}
	return &proc{Process: p, log: logPath}, nil
}

// startAgent starts carve-agent on the node, serving /metrics on a free
// local port.
func (m *measurer) startAgent() (*proc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(m.o.WorkDir, "agent")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("start carve-agent: %w", err)
	}
	bin, err := coldCopy(m.o.Agent, dir)
	if err != nil {
		return nil, err
	}
	p, err := startProc(bin, m.agentArgs(dir, port), filepath.Join(dir, "agent.log"))
	if err != nil {
		return nil, err
	}
	p.metrics = "http://127.0.0.1:" + strconv.Itoa(port) + "/metrics"
	return p, nil
}

// freePort returns a TCP port free on 127.0.0.1 a moment ago.
func freePort() (int, error) {
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return 0, fmt.Errorf("free port: unexpected address %v", l.Addr())
	}
	return addr.Port, nil
}

// phase runs change (which returns once the agent has reached a state),
// leaves the agent idle for the settle period, and reads it; the RSS is
// sampled all along for the maximum.
func (m *measurer) phase(ctx context.Context, p *proc, state string, devices int, change func(context.Context) error) (Reading, error) {
	m.logf("%s", state)
	s := sampleRSS(p.PID(), 100*time.Millisecond)
	err := change(ctx)
	if err == nil {
		err = sleep(ctx, m.settle)
	}
	peak := s.stop()
	if err == nil && p.Exited() {
		err = errors.New("carve-agent exited")
	}
	if err != nil {
		return Reading{}, fmt.Errorf("%s: %w", state, err)
	}
	r := Reading{State: state, Devices: devices}
	if r.Settled, err = ReadMem(p.PID()); err != nil {
		return r, fmt.Errorf("%s: %w", state, err)
	}
	if r.Go, err = ScrapeGoMem(ctx, p.metrics); err != nil {
		return r, fmt.Errorf("%s: %w", state, err)
	}
	r.Max = max(peak, r.Settled.RSS)
	m.logf("  RSS %s settled, %s max", mib(r.Settled.RSS), mib(r.Max))
	return r, nil
}

// sampler keeps the most VmRSS of a process seen.
type sampler struct {
	stopc chan struct{}
	done  chan uint64
}

// sampleRSS reads pid's VmRSS every interval until stop.
func sampleRSS(pid int, every time.Duration) *sampler {
	s := &sampler{stopc: make(chan struct{}), done: make(chan uint64, 1)}
	status := filepath.Join("/proc", strconv.Itoa(pid), "status")
	go func() {
		var most uint64
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if v, err := readKB(status, "VmRSS"); err == nil {
				most = max(most, v["VmRSS"])
			}
			select {
			case <-s.stopc:
				s.done <- most
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// stop ends the sampling and returns the most RSS seen.
func (s *sampler) stop() uint64 {
	close(s.stopc)
	return <-s.done
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// buildFloor builds the floor program (./floor) and copies it cold into
// dir.
func buildFloor(ctx context.Context, dir string) (string, error) {
	root, err := harness.RepoRoot(".")
	if err != nil {
		return "", fmt.Errorf("build floor: %w", err)
	}
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", fmt.Errorf("build floor: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	out := filepath.Join(tmp, "floor")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./bench/memory/floor")
	cmd.Dir = filepath.Join(root, "test")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build floor: %w\n%s", err, b)
	}
	return coldCopy(out, dir)
}

// startFloor starts the floor program on the node and waits until it is
// ready (its informer synced, its socket listening).
func startFloor(ctx context.Context, bin string, c *cluster.Cluster, dir string) (*proc, error) {
	stats := filepath.Join(dir, "floor-memstats.json")
	args := []string{"--kubeconfig", c.Kubeconfig(), "--node-name", c.NodeName(),
		"--socket", filepath.Join(dir, "floor.sock"), "--memstats", stats}
	p, err := startProc(bin, args, filepath.Join(dir, "floor.log"))
	if err != nil {
		return nil, err
	}
	p.stats = stats
	err = harness.PollEvery(ctx, 50*time.Millisecond, time.Minute, func(context.Context) (bool, error) {
		if p.Exited() {
			return false, errors.New("floor exited")
		}
		b, err := os.ReadFile(p.log)
		return err == nil && strings.Contains(string(b), "ready"), nil
	})
	if err != nil {
		_, _ = p.Stop()
		return nil, fmt.Errorf("floor: %w (log: %s)", err, harness.Tail(p.log, 10))
	}
	return p, nil
}

// readFloor reads the floor's memory and asks it (SIGUSR1) for its Go
// runtime's figures.
func (m *measurer) readFloor(ctx context.Context, p *proc) (Reading, error) {
	r := Reading{State: "floor: one Node informer + one gRPC server"}
	var err error
	if r.Settled, err = ReadMem(p.PID()); err != nil {
		return r, fmt.Errorf("floor: %w", err)
	}
	r.Max = r.Settled.Peak
	_ = os.Remove(p.stats)
	if err := p.Signal(syscall.SIGUSR1); err != nil {
		return r, fmt.Errorf("floor: %w", err)
	}
	err = harness.PollEvery(ctx, 20*time.Millisecond, 10*time.Second, func(context.Context) (bool, error) {
		b, err := os.ReadFile(p.stats)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil // not written yet
		}
		if err != nil {
			return false, err
		}
		return true, json.Unmarshal(b, &r.Go)
	})
	if err != nil {
		return r, fmt.Errorf("floor: memstats: %w", err)
	}
	return r, nil
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// coldCopy copies the program src into dir and drops the copy's pages
// from the page cache, so that it starts as from a freshly pulled image:
// its pages are read from disk as it runs. How much of a mapped binary is
// resident depends on how its pages came into the cache (a freshly
// linked binary's large folios are mapped whole on recent kernels), so
// carve-agent and the floor both start this way.
func coldCopy(src, dir string) (string, error) {
	in, err := os.Open(src)
	if err != nil {
		return "", fmt.Errorf("copy %s: %w", src, err)
	}
	defer in.Close()
	dst := filepath.Join(dir, filepath.Base(src)+".cold")
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return "", fmt.Errorf("copy %s: %w", src, err)
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	if err == nil {
		err = dropCache(out)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("copy %s: %w", src, err)
	}
	return dst, nil
}

// dropCache drops the (clean) pages of f from the page cache:
// posix_fadvise(POSIX_FADV_DONTNEED) on the whole file.
func dropCache(f *os.File) error {
	const posixFadvDontneed = 4
	_, _, errno := syscall.Syscall6(syscall.SYS_FADVISE64, f.Fd(), 0, 0, posixFadvDontneed, 0, 0)
	if errno != 0 {
		return fmt.Errorf("posix_fadvise: %w", errno)
	}
	return nil
}
