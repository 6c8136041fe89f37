//go:build carve_testhooks

package main

import (
	"log/slog"
	"testing"

	"github.com/carve-dev/carve/partition"
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
