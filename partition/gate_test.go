package partition_test

import (
	"errors"
	"testing"
	"time"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
)

// A released Gate holds nothing of the driver (the simulated driver
// unloads), fails every call with ErrReleased, and after Reacquire serves
// again, devices fetched before the Release included.
func TestGateReleaseAndReacquire(t *testing.T) {
	m, err := sim.New("h100-80gb*2")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Init(); err != nil {
		t.Fatal(err)
	}
	g := partition.NewGate(m)
	d, err := g.Device(1)
	if err != nil {
		t.Fatal(err)
	}
	es, err := g.WatchXIDs([]int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := es.Wait(time.Millisecond); !errors.Is(err, partition.ErrTimeout) {
		t.Fatalf("wait before the release: %v, want %v", err, partition.ErrTimeout)
	}
	if err := m.UnloadDriver(); !errors.Is(err, partition.ErrInUse) {
		t.Fatalf("unload through an open Gate: %v, want %v", err, partition.ErrInUse)
	}

	if err := g.Release(); err != nil {
		t.Fatal(err)
	}
	if !g.Released() {
		t.Error("not released after Release")
	}
	if err := m.UnloadDriver(); err != nil {
		t.Fatalf("unload after the release: %v", err)
	}
	if _, err := g.DeviceCount(); !errors.Is(err, partition.ErrReleased) {
		t.Errorf("DeviceCount while released: %v, want %v", err, partition.ErrReleased)
	}
	if _, err := d.UUID(); !errors.Is(err, partition.ErrReleased) {
		t.Errorf("a device's UUID while released: %v, want %v", err, partition.ErrReleased)
	}
	if _, err := es.Wait(time.Millisecond); !errors.Is(err, partition.ErrReleased) {
		t.Errorf("wait on a set the release closed: %v, want %v", err, partition.ErrReleased)
	}
	if err := es.Close(); err != nil {
		t.Errorf("close a set the release closed: %v", err)
	}
	if err := g.Reacquire(); !errors.Is(err, partition.ErrDriverNotLoaded) {
		t.Fatalf("reacquire with the driver unloaded: %v, want %v", err, partition.ErrDriverNotLoaded)
	}
	if !g.Released() {
		t.Error("a failed Reacquire left the Gate open")
	}

	if err := m.LoadDriver(); err != nil {
		t.Fatal(err)
	}
	if err := g.Reacquire(); err != nil {
		t.Fatal(err)
	}
	uuid, err := d.UUID()
	if err != nil {
		t.Fatalf("a device from before the release: %v", err)
	}
	fresh, err := g.Device(1)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := fresh.UUID(); uuid != want {
		t.Errorf("device UUID %s after the reacquire, want %s", uuid, want)
	}
	if err := g.Release(); err != nil {
		t.Fatal(err)
	}
	if err := m.UnloadDriver(); err != nil {
		t.Fatalf("unload after the second release: %v", err)
	}
}
