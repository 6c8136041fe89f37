package agent

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// TestWatchInUse: a pod that starts or ends holding a device starts a
// pass, as does a record that does not list what the kubelet says (a pod
// that started before the first question); the same answer again, or a
// kubelet that does not answer, does not.
func TestWatchInUse(t *testing.T) {
	src := &fakeInUse{}
	src.hold("MIG-0", "early") // held before the watch starts; the record lists nothing
	var mu sync.Mutex
	recorded, passes := "", 0
	pass := func() { // a pass records what the kubelet says now
		u, err := src.InUse(t.Context())
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		recorded, passes = inUseKey(InUseRecord(u)), passes+1
	}
	go watchInUse(t.Context(), src, 5*time.Millisecond, func() string {
		mu.Lock()
		defer mu.Unlock()
		return recorded
	}, pass)
	step := func(name string, do func(), want int) {
		t.Helper()
		src.mu.Lock()
		start := src.calls
		src.mu.Unlock()
		do()
		// Four more questions (a pass asks one): the watch has asked at
		// least twice since.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			src.mu.Lock()
			calls := src.calls
			src.mu.Unlock()
			if calls >= start+4 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d questions, want %d", name, calls-start, 4)
			}
		}
		mu.Lock()
		got := passes
		passes = 0
		mu.Unlock()
		if got != want {
			t.Fatalf("%s: %d passes started, want %d", name, got, want)
		}
	}
	step("a pod held a device before the first question", func() {}, 1)
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
