package partition

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrReleased is the error of a call made through a Gate while it is
// released: the process has let go of the driver on purpose.
var ErrReleased = errors.New("GPU handles released while the driver is replaced")

// gateWaitBound bounds one wait for events through a Gate, so that Release
// never waits longer than this for a watcher to let go.
const gateWaitBound = 500 * time.Millisecond

// Gate is an NVML that can let go of the driver and take it back. Release
// waits for the calls under way, closes the event sets handed out and
// shuts the library down, so that the process holds no handle of the
// driver, as unloading the driver needs; every call then fails with an
// error wrapping ErrReleased until Reacquire initialises the library again.
// Devices and event sets obtained before a Release stay usable objects:
// a device finds its GPU again by index after Reacquire, an event set
// fails and must be replaced. A Gate is safe for concurrent use.
type Gate struct {
	lib NVML

	mu       sync.RWMutex
	released bool
	// gen counts the Reacquires: a device fetched in an older one fetches
	// its GPU again.
	gen  int
	sets map[*gatedEvents]bool
}

var _ NVML = (*Gate)(nil)

// NewGate returns a Gate over lib, which must be initialised.
func NewGate(lib NVML) *Gate { return &Gate{lib: lib, sets: map[*gatedEvents]bool{}} }

// NewReleasedGate returns a Gate over lib, which could not be initialised:
// released, until Reacquire initialises lib.
func NewReleasedGate(lib NVML) *Gate {
	g := NewGate(lib)
	g.released = true
	return g
}

// Released reports whether the Gate has let go of the driver.
func (g *Gate) Released() bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.released
}

// Release lets go of the driver: it waits for the calls under way, closes
// the event sets and shuts the library down. Releasing a released Gate does
// nothing. A failed shutdown is returned, and the Gate is released all the
// same: nothing goes through it until Reacquire.
func (g *Gate) Release() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.released {
		return nil
	}
	var errs []error
	for es := range g.sets {
		if err := es.inner.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close an XID event set: %w", err))
		}
		es.closed = true
	}
	clear(g.sets)
	if err := g.lib.Shutdown(); err != nil {
		errs = append(errs, fmt.Errorf("shut NVML down: %w", err))
	}
	g.released = true
	return errors.Join(errs...)
}

// Reacquire initialises the library again after a Release; on failure (the
// driver is not loaded yet) the Gate stays released. Reacquiring a Gate
// that is not released does nothing.
func (g *Gate) Reacquire() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.released {
		return nil
	}
	if err := g.lib.Init(); err != nil {
		return fmt.Errorf("initialise NVML again: %w", err)
	}
	g.released = false
	g.gen++
	return nil
}

// enter starts a call: it holds the read lock and fails while released.
// The caller unlocks g.mu.RUnlock when it returned nil.
func (g *Gate) enter(call string) error {
	g.mu.RLock()
	if g.released {
		g.mu.RUnlock()
		return fmt.Errorf("%s: %w", call, ErrReleased)
	}
	return nil
}

// Init initialises the library once more (calls nest, as NVML's do).
func (g *Gate) Init() error {
	if err := g.enter("Init"); err != nil {
		return err
	}
	defer g.mu.RUnlock()
	return g.lib.Init()
}

// Shutdown undoes one Init.
func (g *Gate) Shutdown() error {
	if err := g.enter("Shutdown"); err != nil {
		return err
	}
	defer g.mu.RUnlock()
	return g.lib.Shutdown()
}

// DeviceCount returns the number of GPUs.
func (g *Gate) DeviceCount() (int, error) {
	if err := g.enter("DeviceCount"); err != nil {
		return 0, err
	}
	defer g.mu.RUnlock()
	return g.lib.DeviceCount()
}

// Device returns the GPU at index.
func (g *Gate) Device(index int) (Device, error) {
	if err := g.enter("Device"); err != nil {
		return nil, err
	}
	defer g.mu.RUnlock()
	d, err := g.lib.Device(index)
	if err != nil {
		return nil, err
	}
	return &gatedDevice{g: g, index: index, gen: g.gen, inner: d}, nil
}

// Topology tells how closely two GPUs are connected.
func (g *Gate) Topology(a, b int) (Link, error) {
	if err := g.enter("Topology"); err != nil {
		return Link{}, err
	}
	defer g.mu.RUnlock()
	return g.lib.Topology(a, b)
}

// WatchXIDs returns an event set that Release closes.
func (g *Gate) WatchXIDs(indexes []int) (EventSet, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.released {
		return nil, fmt.Errorf("WatchXIDs: %w", ErrReleased)
	}
	inner, err := g.lib.WatchXIDs(indexes)
	if err != nil {
		return nil, err
	}
	es := &gatedEvents{g: g, inner: inner}
	g.sets[es] = true
	return es, nil
}

// gatedEvents is an event set handed out by a Gate.
type gatedEvents struct {
	g      *Gate
	inner  EventSet
	closed bool // guarded by g.mu
}

// Wait waits at most gateWaitBound at a time (a shorter wait ends in
// ErrTimeout as a longer one would), so that Release is never held up for
// long; on a set Release closed it fails with ErrReleased.
func (es *gatedEvents) Wait(timeout time.Duration) (XIDEvent, error) {
	es.g.mu.RLock()
	defer es.g.mu.RUnlock()
	if es.closed {
		return XIDEvent{}, fmt.Errorf("wait for XID events: %w", ErrReleased)
	}
	return es.inner.Wait(min(timeout, gateWaitBound))
}

// Close frees the event set; on one Release closed it does nothing.
func (es *gatedEvents) Close() error {
	es.g.mu.Lock()
	defer es.g.mu.Unlock()
	if es.closed {
		return nil
	}
	es.closed = true
	delete(es.g.sets, es)
	return es.inner.Close()
}
