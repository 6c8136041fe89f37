//go:build cgo

package nvml

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/carve-dev/carve/partition"
)

// nvidiaFiles returns the /dev/nvidia* files this process has open; ok is
// false where /proc/self/fd cannot be read.
func nvidiaFiles(t *testing.T) (files []string, ok bool) {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, false
	}
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err == nil && strings.HasPrefix(target, "/dev/nvidia") {
			files = append(files, target)
		}
	}
	return files, true
}

// TestRealGateLetsGoOfTheDriver: on a machine with a driver, a released
// Gate over the real NVML leaves no /dev/nvidia* file open in the process
// (what a driver unload needs), and after Reacquire the devices and the
// XID watch work again. Read-only; skipped without a driver.
func TestRealGateLetsGoOfTheDriver(t *testing.T) {
	lib := New()
	if err := lib.Init(); err != nil {
		t.Skipf("no NVIDIA driver here: %v", err)
	}
	g := partition.NewGate(lib)
	d, err := g.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	uuid, err := d.UUID()
	if err != nil {
		t.Fatal(err)
	}
	es, err := g.WatchXIDs([]int{0})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := es.Wait(10 * time.Millisecond); err != nil && !errors.Is(err, partition.ErrTimeout) {
		t.Fatalf("wait for XIDs: %v", err)
	}
	open, ok := nvidiaFiles(t)
	if !ok {
		t.Skip("no /proc/self/fd here")
	}
	t.Logf("open with NVML initialised: %v", open)
	if len(open) == 0 {
		t.Fatal("no /dev/nvidia* file open with NVML initialised: the check below would prove nothing")
	}

	if err := g.Release(); err != nil {
		t.Fatalf("release: %v", err)
	}
	if open, _ := nvidiaFiles(t); len(open) != 0 {
		t.Errorf("open after the release: %v, want none", open)
	}

	if err := g.Reacquire(); err != nil {
		t.Fatalf("reacquire: %v", err)
	}
	again, err := d.UUID()
	if err != nil || again != uuid {
		t.Errorf("a device from before the release: UUID %q, %v; want %s", again, err, uuid)
	}
	es2, err := g.WatchXIDs([]int{0})
	if err != nil {
		t.Fatalf("watch XIDs after the reacquire: %v", err)
	}
	if _, err := es2.Wait(10 * time.Millisecond); err != nil && !errors.Is(err, partition.ErrTimeout) {
		t.Errorf("wait for XIDs after the reacquire: %v", err)
	}
	if err := g.Release(); err != nil {
		t.Fatalf("second release: %v", err)
	}
	if open, _ := nvidiaFiles(t); len(open) != 0 {
		t.Errorf("open after the second release: %v, want none", open)
	}
}
