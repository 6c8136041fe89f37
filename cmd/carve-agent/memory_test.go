package main

import (
	"runtime/debug"
	"testing"
)

func TestTuneGC(t *testing.T) {
	orig := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(orig) })

	debug.SetGCPercent(100)
	if got := tuneGC(func(string) string { return "" }); got != defaultGCPercent {
		t.Errorf("GOGC unset: tuneGC = %d, want %d", got, defaultGCPercent)
	}
	if got := debug.SetGCPercent(100); got != defaultGCPercent {
		t.Errorf("GOGC unset: GC percent %d in force, want %d", got, defaultGCPercent)
	}

	// With GOGC set, the runtime's value (here 80, as if GOGC=80) stays.
	debug.SetGCPercent(80)
	getenv := func(k string) string {
		if k == "GOGC" {
			return "80"
		}
		return ""
	}
	if got := tuneGC(getenv); got != 80 {
		t.Errorf("GOGC=80: tuneGC = %d, want 80", got)
	}
	if got := debug.SetGCPercent(100); got != 80 {
		t.Errorf("GOGC=80: GC percent %d in force, want 80", got)
	}
}
