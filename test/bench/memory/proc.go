package memory

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

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

// startAgent starts carve-agent on the node with the run's flags and
// extra, its files in the work directory's name, serving /metrics on a
// free local port.
func (m *measurer) startAgent(name string, extra []string) (*proc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(m.o.WorkDir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("start carve-agent: %w", err)
	}
	bin, err := coldCopy(m.o.Agent, dir)
	if err != nil {
		return nil, err
	}
	p, err := startProc(bin, m.agentArgs(dir, port, extra), filepath.Join(dir, "agent.log"))
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
