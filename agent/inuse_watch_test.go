package agent

import (
	"errors"
	"testing"
	"time"
)

// TestWatchInUse: a pod that starts or ends holding a device starts a
// pass; the same answer again, or a kubelet that does not answer, does
// not.
func TestWatchInUse(t *testing.T) {
	src := &fakeInUse{}
	changes := make(chan struct{}, 10)
	go watchInUse(t.Context(), src, 5*time.Millisecond, func() { changes <- struct{}{} })
	polled := func(n int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			src.mu.Lock()
			calls := src.calls
			src.mu.Unlock()
			if calls >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d polls, want %d", calls, n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	count := func() int {
		n := 0
		for {
			select {
			case <-changes:
				n++
			default:
				return n
			}
		}
	}
	step := func(name string, do func(), want int) {
		t.Helper()
		src.mu.Lock()
		start := src.calls
		src.mu.Unlock()
		do()
		polled(start + 3)
		if got := count(); got != want {
			t.Fatalf("%s: %d passes started, want %d", name, got, want)
		}
	}
	step("at rest", func() {}, 0)
	step("a pod starts", func() { src.hold("MIG-1", "train") }, 1)
	step("it runs on", func() {}, 0)
	step("the kubelet does not answer", func() {
		src.mu.Lock()
		src.err = errors.New("unreachable")
		src.mu.Unlock()
	}, 0)
	step("it answers the same", func() {
		src.mu.Lock()
		src.err = nil
		src.mu.Unlock()
	}, 0)
	step("the pod ends", func() { src.release("MIG-1") }, 1)
}
