package sim

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/carve-dev/carve/partition"
)

// eventSet is a simulated NVML event set watching some GPUs for XIDs.
type eventSet struct {
	m    *Machine
	gpus []int

	mu     sync.Mutex
	queue  []partition.XIDEvent
	closed bool
	// wake holds a token while events may be queued; done is closed by
	// Close.
	wake chan struct{}
	done chan struct{}
}

var _ partition.EventSet = (*eventSet)(nil)

// WatchXIDs returns an event set that receives the XIDs RaiseXID raises on
// the given GPUs. Indexes out of range fail with ErrInvalidArgument.
func (m *Machine) WatchXIDs(indexes []int) (partition.EventSet, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.ready("WatchXIDs", -1); err != nil {
		return nil, err
	}
	for _, i := range indexes {
		if i < 0 || i >= len(m.gpus) {
			return nil, fmt.Errorf("watch XIDs: GPU %d: machine has %d GPUs: %w", i, len(m.gpus), partition.ErrInvalidArgument)
		}
	}
	if err := m.fault("WatchXIDs", indexes...); err != nil {
		return nil, err
	}
	s := &eventSet{m: m, gpus: slices.Clone(indexes), wake: make(chan struct{}, 1), done: make(chan struct{})}
	m.watchers[s] = struct{}{}
	return s, nil
}

// RaiseXID reports XID error xid on GPU gpu to every open event set that
// watches it. giID and ciID name the MIG instance it hit, or are -1 for the
// whole GPU.
func (m *Machine) RaiseXID(gpu int, xid uint64, giID, ciID int) error {
	m.mu.Lock()
	if err := m.checkGPU("raise XID", gpu); err != nil {
		m.mu.Unlock()
		return err
	}
	ev := partition.XIDEvent{UUID: m.gpus[gpu].uuid, XID: xid, GIID: giID, CIID: ciID, Time: time.Now()}
	var sets []*eventSet
	for s := range m.watchers {
		if slices.Contains(s.gpus, gpu) {
			sets = append(sets, s)
		}
	}
	m.mu.Unlock()
	for _, s := range sets {
		s.push(ev)
	}
	return nil
}

// push queues an event unless the set is closed.
func (s *eventSet) push(ev partition.XIDEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.queue = append(s.queue, ev)
	s.signal()
}

// signal leaves a wake token for a waiter; the caller holds s.mu.
func (s *eventSet) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Wait returns the oldest queued event, blocking until one arrives or the
// timeout passes (ErrTimeout). After Close it fails at once, with an error
// wrapping ErrInvalidArgument, and Close wakes blocked waiters the same way.
func (s *eventSet) Wait(timeout time.Duration) (partition.XIDEvent, error) {
	s.m.mu.Lock()
	err := s.m.fault("Wait", s.gpus...)
	s.m.mu.Unlock()
	if err != nil {
		return partition.XIDEvent{}, err
	}
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return partition.XIDEvent{}, fmt.Errorf("wait for XID events: event set closed: %w", partition.ErrInvalidArgument)
		}
		if len(s.queue) > 0 {
			ev := s.queue[0]
			s.queue = s.queue[1:]
			if len(s.queue) > 0 {
				s.signal()
			}
			s.mu.Unlock()
			return ev, nil
		}
		s.mu.Unlock()
		if expired == nil {
			return partition.XIDEvent{}, fmt.Errorf("wait for XID events: no event: %w", partition.ErrTimeout)
		}
		select {
		case <-s.wake:
		case <-s.done:
		case <-expired:
			return partition.XIDEvent{}, fmt.Errorf("wait for XID events: none within %s: %w", timeout, partition.ErrTimeout)
		}
	}
}

// Close frees the event set and wakes its waiters. Closing twice is a
// no-op.
func (s *eventSet) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.queue = nil
	close(s.done)
	s.mu.Unlock()
	s.m.mu.Lock()
	delete(s.m.watchers, s)
	s.m.mu.Unlock()
	return nil
}
