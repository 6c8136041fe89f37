package testclock

import (
	"testing"
	"time"
)

// TestClock: the clock moves only when told, forwards and backwards.
func TestClock(t *testing.T) {
	start := time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC)
	c := New(start)
	if !c.Now().Equal(start) {
		t.Fatalf("Now = %v, want %v", c.Now(), start)
	}
	c.Add(90 * time.Second)
	c.Add(-30 * time.Second)
	if got, want := c.Now(), start.Add(time.Minute); !got.Equal(want) {
		t.Errorf("after +90s -30s: %v, want %v", got, want)
	}
	c.Set(start)
	if !c.Now().Equal(start) {
		t.Errorf("after Set: %v, want %v", c.Now(), start)
	}
}
