//go:build cgo

package nvml

import (
	"errors"
	"strings"
	"sync"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/carve-dev/carve/partition"
)

func TestInitIsCountedAndGuardsEveryCall(t *testing.T) {
	g := newFakeGPU(0)
	ml := fakeLib(g)
	lib := NewFrom(ml)

	// Before Init nothing reaches go-nvml.
	calls := map[string]func() error{
		"DeviceCount": func() error { _, err := lib.DeviceCount(); return err },
		"Device":      func() error { _, err := lib.Device(0); return err },
		"Topology":    func() error { _, err := lib.Topology(0, 0); return err },
		"WatchXIDs":   func() error { _, err := lib.WatchXIDs([]int{0}); return err },
		"Shutdown":    lib.Shutdown,
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, partition.ErrUninitialized) {
			t.Errorf("%s before Init = %v, want ErrUninitialized", name, err)
		}
	}
	if n := len(ml.DeviceGetCountCalls()) + len(ml.DeviceGetHandleByIndexCalls()) + len(ml.ShutdownCalls()); n != 0 {
		t.Fatalf("%d go-nvml calls before Init", n)
	}

	// Two Inits need two Shutdowns.
	for range 2 {
		if err := lib.Init(); err != nil {
			t.Fatalf("Init: %v", err)
		}
	}
	d := deviceAt(t, lib, 0)
	if err := lib.Shutdown(); err != nil {
		t.Fatalf("first Shutdown: %v", err)
	}
	if _, err := d.UUID(); err != nil {
		t.Fatalf("UUID with one Init left: %v", err)
	}
	if err := lib.Shutdown(); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	if err := lib.Shutdown(); !errors.Is(err, partition.ErrUninitialized) {
		t.Fatalf("third Shutdown = %v, want ErrUninitialized", err)
	}
	if got := len(ml.InitCalls()); got != 2 {
		t.Errorf("go-nvml Init called %d times, want 2", got)
	}
	if got := len(ml.ShutdownCalls()); got != 2 {
		t.Errorf("go-nvml Shutdown called %d times, want 2", got)
	}

	// A handle from a closed session fails, also after a new Init.
	uuidCalls := len(g.dev.GetUUIDCalls())
	if _, err := d.UUID(); !errors.Is(err, partition.ErrUninitialized) {
		t.Errorf("UUID after Shutdown = %v, want ErrUninitialized", err)
	}
	if err := lib.Init(); err != nil {
		t.Fatalf("Init again: %v", err)
	}
	defer func() { _ = lib.Shutdown() }()
	if _, err := d.UUID(); !errors.Is(err, partition.ErrUninitialized) {
		t.Errorf("UUID on a stale handle = %v, want ErrUninitialized", err)
	}
	if got := len(g.dev.GetUUIDCalls()); got != uuidCalls {
		t.Errorf("stale handle reached go-nvml (%d calls)", got-uuidCalls)
	}
	if _, err := deviceAt(t, lib, 0).UUID(); err != nil {
		t.Errorf("UUID on a fresh handle: %v", err)
	}
}

func TestInitFailure(t *testing.T) {
	ml := fakeLib()
	ml.InitFunc = func() gonvml.Return { return gonvml.ERROR_LIBRARY_NOT_FOUND }
	lib := NewFrom(ml)
	err := lib.Init()
	checkSentinel(t, err, partition.ErrLibraryNotFound)
	if _, err := lib.DeviceCount(); !errors.Is(err, partition.ErrUninitialized) {
		t.Errorf("DeviceCount after a failed Init = %v, want ErrUninitialized", err)
	}
	if err := lib.Shutdown(); !errors.Is(err, partition.ErrUninitialized) {
		t.Errorf("Shutdown after a failed Init = %v, want ErrUninitialized", err)
	}
}

func TestTopology(t *testing.T) {
	g0, g1, g2 := newFakeGPU(0), newFakeGPU(1), newFakeGPU(2)
	for l := range 4 {
		g0.nvlinks[l] = strings.Replace(g1.busID, "00000000:", "0000:", 1) // short domain, same GPU
		g1.nvlinks[l] = strings.ToLower(g0.busID)
	}
	g0.offLinks[4] = g1.busID // down: does not count
	g0.nvlinks[5] = g2.busID
	g1.nvlinks[6] = "00000000:99:00.0" // an NVSwitch, say
	g2.links = 0                       // no NVLink at all
	g2.dev.GetTopologyCommonAncestorFunc = func(gonvml.Device) (gonvml.GpuTopologyLevel, gonvml.Return) {
		return gonvml.TOPOLOGY_SYSTEM, gonvml.SUCCESS
	}
	lib := openFake(t, nil, g0, g1, g2)
	tests := []struct {
		a, b int
		want partition.Link
	}{
		{0, 1, partition.Link{NVLinks: 4, PCIe: int(gonvml.TOPOLOGY_HOSTBRIDGE)}},
		{1, 0, partition.Link{NVLinks: 4, PCIe: int(gonvml.TOPOLOGY_HOSTBRIDGE)}},
		{0, 2, partition.Link{NVLinks: 1, PCIe: int(gonvml.TOPOLOGY_HOSTBRIDGE)}},
		{2, 0, partition.Link{NVLinks: 0, PCIe: int(gonvml.TOPOLOGY_SYSTEM)}},
		{1, 1, partition.Link{NVLinks: 0, PCIe: int(gonvml.TOPOLOGY_INTERNAL)}},
	}
	for _, tt := range tests {
		got, err := lib.Topology(tt.a, tt.b)
		if err != nil || got != tt.want {
			t.Errorf("Topology(%d, %d) = %+v, %v; want %+v", tt.a, tt.b, got, err, tt.want)
		}
	}
	if _, err := lib.Topology(0, 9); !errors.Is(err, partition.ErrInvalidArgument) {
		t.Errorf("Topology(0, 9) = %v, want ErrInvalidArgument", err)
	}
	g1.dev.GetNvLinkStateFunc = func(int) (gonvml.EnableState, gonvml.Return) { return 0, gonvml.ERROR_GPU_IS_LOST }
	if _, err := lib.Topology(1, 0); err == nil || !strings.Contains(err.Error(), "NVLink 0 state") {
		t.Errorf("Topology with a lost GPU = %v, want an NVLink state error", err)
	}
}

func TestConcurrentUseAndShutdown(t *testing.T) {
	g := newFakeGPU(0)
	g.seed(gonvml.GPU_INSTANCE_PROFILE_7_SLICE, 0, true)
	lib := NewFrom(fakeLib(g), WithProfileInfoV2(fakeProfileInfoV2(g)))
	if err := lib.Init(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 4 {
		wg.Go(func() {
			for range 50 {
				d, err := lib.Device(0)
				if err == nil {
					_, err = partition.ReadGPU(d)
				}
				if err != nil && !errors.Is(err, partition.ErrUninitialized) {
					errs <- err
					return
				}
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			if err := lib.Shutdown(); err != nil {
				errs <- err
				return
			}
			if err := lib.Init(); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := lib.Shutdown(); err != nil {
		t.Fatal(err)
	}
}
