//go:build cgo

package nvml

import (
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/carve-dev/carve/partition"
)

// fakeEvents is a go-nvml event set that hands out queued events.
type fakeEvents struct {
	mu     sync.Mutex
	events []gonvml.EventData
	waits  []uint32
	freed  int
}

func (f *fakeEvents) set() *mock.EventSet {
	return &mock.EventSet{
		WaitFunc: func(ms uint32) (gonvml.EventData, gonvml.Return) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.waits = append(f.waits, ms)
			if len(f.events) == 0 {
				return gonvml.EventData{}, gonvml.ERROR_TIMEOUT
			}
			ev := f.events[0]
			f.events = f.events[1:]
			return ev, gonvml.SUCCESS
		},
		FreeFunc: func() gonvml.Return {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.freed++
			return gonvml.SUCCESS
		},
	}
}

func TestWatchXIDs(t *testing.T) {
	g0, g1 := newFakeGPU(0), newFakeGPU(1)
	other := &mock.Device{GetUUIDFunc: func() (string, gonvml.Return) { return "GPU-other", gonvml.SUCCESS }}
	fe := &fakeEvents{events: []gonvml.EventData{
		{Device: g1.dev, EventType: gonvml.EventTypeXidCriticalError, EventData: 79, GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF},
		{Device: g0.dev, EventType: gonvml.EventTypeXidCriticalError, EventData: 31, GpuInstanceId: 2, ComputeInstanceId: 0},
		{Device: other, EventType: gonvml.EventTypeXidCriticalError, EventData: 48, GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF},
	}}
	set := fe.set()
	ml := fakeLib(g0, g1)
	ml.EventSetCreateFunc = func() (gonvml.EventSet, gonvml.Return) { return set, gonvml.SUCCESS }
	lib := NewFrom(ml)
	if err := lib.Init(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lib.Shutdown() }()

	es, err := lib.WatchXIDs([]int{0, 1})
	if err != nil {
		t.Fatalf("WatchXIDs: %v", err)
	}
	for _, g := range []*fakeGPU{g0, g1} {
		calls := g.dev.RegisterEventsCalls()
		if len(calls) != 1 || calls[0].V != gonvml.EventTypeXidCriticalError || calls[0].EventSet != set {
			t.Errorf("GPU %d RegisterEvents calls = %+v, want one for XID critical errors on the set", g.index, calls)
		}
	}
	before := time.Now()
	want := []partition.XIDEvent{
		{UUID: g1.uuid, XID: 79, GIID: -1, CIID: -1},
		{UUID: g0.uuid, XID: 31, GIID: 2, CIID: 0},
		{UUID: "GPU-other", XID: 48, GIID: -1, CIID: -1},
	}
	for i, w := range want {
		ev, err := es.Wait(1500 * time.Millisecond)
		if err != nil {
			t.Fatalf("Wait %d: %v", i, err)
		}
		if ev.Time.Before(before) {
			t.Errorf("event %d time %v is before the wait", i, ev.Time)
		}
		ev.Time = time.Time{}
		if ev != w {
			t.Errorf("event %d = %+v, want %+v", i, ev, w)
		}
	}
	if _, err := es.Wait(20 * time.Millisecond); !errors.Is(err, partition.ErrTimeout) {
		t.Errorf("Wait with no event = %v, want ErrTimeout", err)
	}
	if _, err := es.Wait(-time.Second); !errors.Is(err, partition.ErrTimeout) {
		t.Errorf("Wait(-1s) = %v, want ErrTimeout", err)
	}
	if want := []uint32{1500, 1500, 1500, 20, 0}; !slices.Equal(fe.waits, want) {
		t.Errorf("go-nvml Wait timeouts = %v ms, want %v", fe.waits, want)
	}
	if err := es.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := es.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if fe.freed != 1 {
		t.Errorf("event set freed %d times, want 1", fe.freed)
	}
	if _, err := es.Wait(time.Millisecond); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Wait after Close = %v, want os.ErrClosed", err)
	}
}

func TestWatchXIDsRegistrationFails(t *testing.T) {
	g0, g1 := newFakeGPU(0), newFakeGPU(1)
	g1.dev.RegisterEventsFunc = func(uint64, gonvml.EventSet) gonvml.Return { return gonvml.ERROR_NOT_SUPPORTED }
	fe := &fakeEvents{}
	ml := fakeLib(g0, g1)
	ml.EventSetCreateFunc = func() (gonvml.EventSet, gonvml.Return) { return fe.set(), gonvml.SUCCESS }
	lib := NewFrom(ml)
	if err := lib.Init(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lib.Shutdown() }()
	_, err := lib.WatchXIDs([]int{0, 1})
	checkSentinel(t, err, partition.ErrNotSupported)
	if !strings.Contains(err.Error(), "GPU 1") || fe.freed != 1 {
		t.Errorf("WatchXIDs = %v, event set freed %d times; want GPU 1 named and the set freed once", err, fe.freed)
	}
}
