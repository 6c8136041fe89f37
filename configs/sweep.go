package configs

import (
	"container/heap"
	"time"
)

// A sweep walks time forward over a list of recurrences (windows or
// maintenance windows), keeping which of them are active, at a cost that
// grows with the instants at which one of them starts or stops being
// active, not with the number of recurrences times those instants:
// each recurrence's next change sits in a priority queue, and the active
// ones in a min-heap by list position (the first listed active window
// wins a selection).
//
// Occurrences that overlap or touch (a window of 2m every minute) make
// one stretch of activity: the sweep follows such a chain to its end at
// once, so an always-active window costs nothing after that.
//
// Every cron evaluation counts against a budget. When it runs out the
// sweep stops at the last instant up to which it knows every recurrence's
// state (Cut), so callers can say that they looked that far and no
// further instead of giving a wrong answer.
type sweep struct {
	rs      []*Recurrence
	active  []bool
	next    []time.Time // next change per recurrence; zero: none before horizon
	unsure  []bool      // next[i] is where the budget ran out, not a change
	queue   changeQueue
	actives minHeap
	horizon time.Time
	budget  int
	// Cut is the instant the sweep stopped at for want of budget, zero
	// while it has not.
	Cut time.Time
}

// newSweep starts a sweep at from; no change at or after horizon is
// reported. always marks recurrences active for good (a window whose
// schedule does not compile stands for the error it gives).
func newSweep(rs []*Recurrence, always []bool, from, horizon time.Time, budget int) *sweep {
	s := &sweep{
		rs: rs, active: make([]bool, len(rs)), next: make([]time.Time, len(rs)), unsure: make([]bool, len(rs)),
		horizon: horizon, budget: budget,
	}
	for i, r := range rs {
		if always != nil && always[i] {
			s.active[i] = true
		} else {
			s.budget--
			s.active[i] = r.active(from)
			s.schedule(i, from)
		}
		if s.active[i] {
			heap.Push(&s.actives, i)
		}
		if s.active[i] && (s.next[i].IsZero() || s.unsure[i]) {
			// Active until the horizon, or until where the sweep will
			// stop: the recurrences listed after it cannot come first,
			// nor change whether any is active, before then.
			s.rs, s.active, s.next, s.unsure = s.rs[:i+1], s.active[:i+1], s.next[:i+1], s.unsure[:i+1]
			break
		}
	}
	return s
}

// First returns the first listed active recurrence, -1 for none.
func (s *sweep) First() int {
	for s.actives.Len() > 0 {
		if i := s.actives[0]; s.active[i] {
			return i
		}
		heap.Pop(&s.actives)
	}
	return -1
}

// Any reports whether any recurrence is active.
func (s *sweep) Any() bool { return s.First() >= 0 }

// Advance moves to the next instant at which a recurrence changes, applies
// every change at that instant and returns it; false when there is none
// before the horizon, or when the budget ran out (Cut is then set).
func (s *sweep) Advance() (time.Time, bool) {
	for s.queue.Len() > 0 {
		t := s.queue[0].at
		var changed []int
		for s.queue.Len() > 0 && s.queue[0].at.Equal(t) {
			c := heap.Pop(&s.queue).(change)
			if s.next[c.i].Equal(t) { // not a stale entry
				changed = append(changed, c.i)
			}
		}
		if len(changed) == 0 {
			continue
		}
		for _, i := range changed {
			if s.unsure[i] {
				s.Cut = t
				return time.Time{}, false
			}
		}
		for _, i := range changed {
			s.active[i] = !s.active[i]
			if s.active[i] {
				heap.Push(&s.actives, i)
			}
			s.schedule(i, t)
		}
		return t, true
	}
	return time.Time{}, false
}

// schedule finds when recurrence i next changes after t and queues it.
func (s *sweep) schedule(i int, t time.Time) {
	at, unsure := s.changeAfter(s.rs[i], s.active[i], t)
	s.next[i], s.unsure[i] = at, unsure
	if !at.IsZero() {
		heap.Push(&s.queue, change{at: at, i: i})
	}
}

// changeAfter returns the first instant after t at which r, active or not
// at t, changes; zero when it does not before the horizon. unsure means the
// budget ran out: r is known to keep its state until the instant returned,
// not to change there.
func (s *sweep) changeAfter(r *Recurrence, active bool, t time.Time) (at time.Time, unsure bool) {
	c, err := r.schedule()
	if err != nil || r.Duration <= 0 {
		return time.Time{}, false
	}
	if !active {
		s.budget--
		start := c.next(t)
		if start.IsZero() || !start.Before(s.horizon) {
			return time.Time{}, false
		}
		return start, false
	}
	// Active: follow the chain of occurrences that overlap or touch.
	s.budget--
	start := c.next(t.Add(-r.Duration))
	if start.IsZero() {
		return time.Time{}, false
	}
	end := start.Add(r.Duration)
	for end.Before(s.horizon) {
		if s.budget <= 0 {
			return end, true
		}
		s.budget--
		start = c.next(start)
		if start.IsZero() || start.After(end) {
			return end, false
		}
		if e := start.Add(r.Duration); e.After(end) {
			end = e
		}
	}
	return time.Time{}, false
}

// change is a queued instant at which recurrence i changes.
type change struct {
	at time.Time
	i  int
}

// changeQueue is a min-heap of changes by time, then list position.
type changeQueue []change

func (q changeQueue) Len() int { return len(q) }
func (q changeQueue) Less(a, b int) bool {
	if !q[a].at.Equal(q[b].at) {
		return q[a].at.Before(q[b].at)
	}
	return q[a].i < q[b].i
}
func (q changeQueue) Swap(a, b int) { q[a], q[b] = q[b], q[a] }
func (q *changeQueue) Push(x any)   { *q = append(*q, x.(change)) }
func (q *changeQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// minHeap is a min-heap of list positions.
type minHeap []int

func (h minHeap) Len() int           { return len(h) }
func (h minHeap) Less(a, b int) bool { return h[a] < h[b] }
func (h minHeap) Swap(a, b int)      { h[a], h[b] = h[b], h[a] }
func (h *minHeap) Push(x any)        { *h = append(*h, x.(int)) }
func (h *minHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
