//go:build !carve_testhooks

package main

import (
	"log/slog"
	"testing"
)

// TestDefaultBuildIgnoresExitAfterOps checks that a binary built without
// the carve_testhooks tag ignores CARVE_FAULT_EXIT_AFTER_OPS: no hook, no
// error even for a bad value, and no environment read at all.
func TestDefaultBuildIgnoresExitAfterOps(t *testing.T) {
	for _, v := range []string{"1", "3", "x"} {
		var read []string
		getenv := func(k string) string {
			read = append(read, k)
			return map[string]string{"CARVE_FAULT_EXIT_AFTER_OPS": v}[k]
		}
		hook, err := afterOpHook(getenv, slog.New(slog.DiscardHandler), func(code int) {
			t.Fatalf("exit(%d) called", code)
		})
		if hook != nil || err != nil {
			t.Errorf("CARVE_FAULT_EXIT_AFTER_OPS=%s: hook %v, err %v; want neither", v, hook != nil, err)
		}
		if len(read) != 0 {
			t.Errorf("CARVE_FAULT_EXIT_AFTER_OPS=%s: read %v from the environment, want nothing", v, read)
		}
	}
}

// TestDefaultBuildHasNoSimOpJournal checks that a binary built without the
// carve_testhooks tag keeps no op journal and reads no environment for it.
func TestDefaultBuildHasNoSimOpJournal(t *testing.T) {
	var read []string
	getenv := func(k string) string {
		read = append(read, k)
		return "/tmp/journal"
	}
	closeFn, err := simOpJournal(getenv, nil)
	if closeFn != nil || err != nil || len(read) != 0 {
		t.Errorf("close %v, err %v, read %v; want none of them", closeFn != nil, err, read)
	}
}
