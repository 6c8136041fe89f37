//go:build carve_testhooks

package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/gpus"
)

func TestExitAfterOps(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, bad := range []string{"0", "-1", "x"} {
		if _, err := exitAfterOps(bad, log, func(int) {}); err == nil {
			t.Errorf("%s=%s accepted", ExitAfterOpsEnv, bad)
		}
	}
	if hook, err := exitAfterOps("", log, func(int) {}); err != nil || hook != nil {
		t.Fatalf("unset: hook %v, err %v; want neither", hook != nil, err)
	}
	var exited []int
	hook, err := exitAfterOps("3", log, func(code int) { exited = append(exited, code) })
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 5; i++ {
		if err := hook(0, i, partition.Op{Kind: partition.OpCreateGI}); err != nil {
			t.Fatal(err)
		}
		if want := i >= 3; (len(exited) > 0) != want {
			t.Fatalf("after op %d: exited %v", i, exited)
		}
	}
	if len(exited) != 1 || exited[0] != ExitAfterOpsCode {
		t.Fatalf("exit calls %v, want exactly one with %d", exited, ExitAfterOpsCode)
	}
}

func TestAfterOpHookReadsTheEnvironment(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	env := map[string]string{ExitAfterOpsEnv: "1"}
	var exited []int
	hook, err := afterOpHook(func(k string) string { return env[k] }, log, func(code int) { exited = append(exited, code) })
	if err != nil || hook == nil {
		t.Fatalf("%s=1: hook %v, err %v; want a hook", ExitAfterOpsEnv, hook != nil, err)
	}
	if err := hook(0, 1, partition.Op{Kind: partition.OpCreateGI}); err != nil {
		t.Fatal(err)
	}
	if len(exited) != 1 || exited[0] != ExitAfterOpsCode {
		t.Fatalf("exit calls %v, want one with %d", exited, ExitAfterOpsCode)
	}
	env[ExitAfterOpsEnv] = "x"
	if _, err := afterOpHook(func(k string) string { return env[k] }, log, func(int) {}); err == nil {
		t.Errorf("%s=x accepted", ExitAfterOpsEnv)
	}
}

func TestSimOpJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ops.log")
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	lib, err := gpus.Open("sim:a30x4", gpus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := lib.Init(); err != nil {
		t.Fatal(err)
	}
	if closeFn, err := simOpJournal(getenv, lib); closeFn != nil || err != nil {
		t.Fatalf("unset: close %v, err %v; want neither", closeFn != nil, err)
	}

	env[SimOpJournalEnv] = path
	if _, err := simOpJournal(getenv, struct{ partition.NVML }{lib}); err == nil || !strings.Contains(err.Error(), "not simulated") {
		t.Errorf("real GPUs: err %v, want one saying they are not simulated", err)
	}
	closeFn, err := simOpJournal(getenv, lib)
	if err != nil || closeFn == nil {
		t.Fatalf("set: close %v, err %v; want a journal", closeFn != nil, err)
	}
	d, err := lib.Device(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetMIGMode(partition.MIGEnabled); err != nil {
		t.Fatal(err)
	}
	if err := closeFn(); err != nil {
		t.Fatal(err)
	}
	if err := d.SetMIGMode(partition.MIGDisabled); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "GPU 1 SetMIGMode(enabled)"; !strings.HasPrefix(string(got), want) || strings.Count(string(got), "\n") != 1 {
		t.Errorf("journal %q, want one line starting %q (nothing after the journal was closed)", got, want)
	}
}

// TestRolloutTiming: CARVE_TEST_ROLLOUT sets the slot duration and retry,
// either alone, and refuses what is not a positive duration or a known part.
func TestRolloutTiming(t *testing.T) {
	for v, want := range map[string][2]time.Duration{
		"":                  {0, 0},
		"slot=6s":           {6 * time.Second, 0},
		"retry=500ms":       {0, 500 * time.Millisecond},
		"slot=6s,retry=1s":  {6 * time.Second, time.Second},
		"retry=1s,slot=10s": {10 * time.Second, time.Second},
	} {
		slot, retry, err := rolloutTiming(func(string) string { return v })
		if err != nil || slot != want[0] || retry != want[1] {
			t.Errorf("%q: slot %s, retry %s, err %v; want %s, %s", v, slot, retry, err, want[0], want[1])
		}
	}
	for _, v := range []string{"slot", "slot=", "slot=-1s", "slot=0s", "lease=5s", "slot=5s,"} {
		if _, _, err := rolloutTiming(func(string) string { return v }); err == nil || !strings.Contains(err.Error(), RolloutTimingEnv) {
			t.Errorf("%q: err %v, want one naming %s", v, err, RolloutTimingEnv)
		}
	}
}
