package main

import (
	"runtime/debug"
)

// defaultGCPercent is the garbage collector's target (GOGC) carve-agent
// runs with when the environment sets none: the heap may grow to 1.5 times
// what was live after the last collection instead of Go's 2 times. The
// agent is idle nearly all the time, so the extra collections cost little
// CPU; measured with `make bench BENCH=memory`, the resident memory after
// repartitions and at 896 devices is about 1.3 MiB lower.
const defaultGCPercent = 50

// tuneGC sets defaultGCPercent unless GOGC is set, which then rules as in
// any Go program (GOMEMLIMIT is never touched). It returns the GC percent
// in force.
func tuneGC(getenv func(string) string) int {
	if getenv("GOGC") != "" {
		p := debug.SetGCPercent(100) // read the value the runtime took from GOGC ...
		debug.SetGCPercent(p)        // ... and put it back
		return p
	}
	debug.SetGCPercent(defaultGCPercent)
	return defaultGCPercent
}
