package memory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/carve-dev/carve/test/harness"
)

// floorDriver is the DRA driver name the floor (DRA library) registers
// with the kubelet, beside carve's.
const floorDriver = "floor.bench.carve.dev"

// floorProgram is one of the floor programs the run starts.
type floorProgram struct {
	// name is the floor's name in the tables, pkg its directory under
	// test/bench/memory, state the State of its Reading.
	name, pkg, state string
	// dra adds the flags of the DRA kubelet plugin.
	dra bool
}

// floorPrograms are the floors, in the order of Result's fields Floor,
// NarrowFloor and DRAFloor.
var floorPrograms = []floorProgram{
	{name: "floor (clientset)", pkg: "floor", state: "floor (clientset): one Node informer + one gRPC server, client-go's clientset"},
	{name: "floor (narrow client)", pkg: "floor-narrow", state: "floor (narrow client): the same with a client of core/v1 only"},
	{name: "floor (DRA library)", pkg: "floor-dra", state: "floor (DRA library): floor (clientset) + the DRA kubelet plugin library", dra: true},
}

// startFloors builds and starts every floor program and waits until each
// is ready. It returns those it started, also on error.
func (m *measurer) startFloors(ctx context.Context) ([]*proc, error) {
	var started []*proc
	for _, f := range floorPrograms {
		bin, err := buildFloor(ctx, m.o.WorkDir, f.pkg)
		if err != nil {
			return started, err
		}
		p, err := m.startFloor(ctx, bin, f)
		if err != nil {
			return started, err
		}
		started = append(started, p)
	}
	return started, nil
}

// stopFloors stops the floors and removes what the floor (DRA library)
// left in the kubelet's directories.
func (m *measurer) stopFloors(floors []*proc) {
	for _, f := range floors {
		_, _ = f.Stop()
	}
	root := m.c.KubeletRootDir()
	_ = os.RemoveAll(filepath.Join(root, "plugins", floorDriver))
	_ = os.Remove(filepath.Join(root, "plugins_registry", floorDriver+"-reg.sock"))
}

// buildFloor builds the floor program in ./pkg and copies it cold into
// dir.
func buildFloor(ctx context.Context, dir, pkg string) (string, error) {
	root, err := harness.RepoRoot(".")
	if err != nil {
		return "", fmt.Errorf("build %s: %w", pkg, err)
	}
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", fmt.Errorf("build %s: %w", pkg, err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	out := filepath.Join(tmp, pkg)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./bench/memory/"+pkg)
	cmd.Dir = filepath.Join(root, "test")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %w\n%s", pkg, err, b)
	}
	return coldCopy(out, dir)
}

// startFloor starts a floor program on the node and waits until it is
// ready (its informer synced, its socket listening, its DRA driver
// registered).
func (m *measurer) startFloor(ctx context.Context, bin string, f floorProgram) (*proc, error) {
	dir := m.o.WorkDir
	stats := filepath.Join(dir, f.pkg+"-memstats.json")
	args := []string{"--kubeconfig", m.c.Kubeconfig(), "--node-name", m.c.NodeName(),
		"--socket", filepath.Join(dir, f.pkg+".sock"), "--memstats", stats}
	if f.dra {
		args = append(args, "--kubelet-root-dir", m.c.KubeletRootDir(), "--driver-name", floorDriver)
	}
	p, err := startProc(bin, args, filepath.Join(dir, f.pkg+".log"))
	if err != nil {
		return nil, err
	}
	p.stats = stats
	err = harness.PollEvery(ctx, 50*time.Millisecond, time.Minute, func(context.Context) (bool, error) {
		if p.Exited() {
			return false, fmt.Errorf("%s exited", f.pkg)
		}
		b, err := os.ReadFile(p.log)
		return err == nil && strings.Contains(string(b), "ready"), nil
	})
	if err != nil {
		_, _ = p.Stop()
		return nil, fmt.Errorf("%s: %w (log: %s)", f.pkg, err, harness.Tail(p.log, 10))
	}
	return p, nil
}

// readFloor reads a floor's memory and asks it (SIGUSR1) for its Go
// runtime's figures.
func (m *measurer) readFloor(ctx context.Context, p *proc, state string) (Reading, error) {
	r := Reading{State: state}
	var err error
	if r.Settled, err = ReadMem(p.PID()); err != nil {
		return r, fmt.Errorf("%s: %w", state, err)
	}
	r.Max = r.Settled.Peak
	_ = os.Remove(p.stats)
	if err := p.Signal(syscall.SIGUSR1); err != nil {
		return r, fmt.Errorf("%s: %w", state, err)
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
		return r, fmt.Errorf("%s: memstats: %w", state, err)
	}
	return r, nil
}
