package chaos_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/carve-dev/carve/internal/chaos"
)

// Records written by Recorders come back from Read, file by file in name
// order; without CARVE_CHAOS_OUT a Recorder writes nothing.
func TestRecorderAndRead(t *testing.T) {
	t.Setenv(chaos.EnvOut, "")
	if err := chaos.NewRecorder("x").Add(chaos.Record{Scenario: "s", Case: "c"}); err != nil {
		t.Fatalf("Add without a directory: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "out")
	t.Setenv(chaos.EnvOut, dir)
	b, a := chaos.NewRecorder("b"), chaos.NewRecorder("a")
	steps := []func() error{
		func() error { return b.Describe("S2", "checks two") },
		func() error { return b.Add(chaos.Record{Scenario: "S2", Case: "c2", Fault: "f", Survived: true}) },
		func() error { return a.Add(chaos.Record{Scenario: "S1", Case: "c1", Fault: "f", Lost: "an instance"}) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	got, err := chaos.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []chaos.Record{
		{Scenario: "S1", Case: "c1", Fault: "f", Lost: "an instance"},
		{Scenario: "S2", Checked: "checks two"},
		{Scenario: "S2", Case: "c2", Fault: "f", Survived: true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Read (-want +got):\n%s", diff)
	}
}

func TestReadRejectsABrokenLine(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x.jsonl"), []byte("{\"scenario\":\"s\"}\n{\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := chaos.Read(dir); err == nil || !strings.Contains(err.Error(), "x.jsonl:2") {
		t.Fatalf("Read = %v, want an error naming x.jsonl:2", err)
	}
}

func TestWriteReport(t *testing.T) {
	recs := []chaos.Record{
		{Scenario: "NVML failure", Checked: "Each op fails once."},
		{Scenario: "NVML failure", Case: "a, op 1", Fault: "SetMIGMode fails once", Survived: true},
		{Scenario: "NVML failure", Case: "a, op 2", Fault: "Reset fails once", Survived: true},
		{Scenario: "NVML failure", Case: "b, op 1", Fault: "SetMIGMode fails once", Survived: true},
		{Scenario: "kill", Case: "a | b", Fault: "killed", Survived: false, Detail: "did not converge:\nlayout x"},
		{Scenario: "kill", Case: "c", Fault: "killed", Survived: false, Lost: "instance GPU 0 1g.10gb@0:1"},
	}
	info := chaos.Info{
		Date: time.Date(2026, 3, 2, 12, 30, 0, 0, time.UTC), Command: "make chaos", Took: 21*time.Minute + 3400*time.Millisecond,
		Cores: 2, LoadAverage: "1.50 1.20 0.90", Platform: "linux/amd64, go1.26.8",
	}
	var b strings.Builder
	if err := chaos.WriteReport(&b, recs, info); err != nil {
		t.Fatal(err)
	}
	want := "# Reliability: what `make chaos` tried\n\n" +
		"Written by `make chaos` from the records of its runs; do not edit by hand. " +
		"Every case is also a test assertion: a case that did not survive failed `make chaos`. \"Lost\" counts the cases that lost " +
		"something (an instance a pod held or both geometries hold, an orphan instance, a checkpoint, a device the kubelet dropped); it must be 0.\n\n" +
		"- Date: 2026-03-02 12:30 UTC\n" +
		"- Machine: 2 CPU cores, load average 1.50 1.20 0.90 (1, 5, 15 min) at the end; linux/amd64, go1.26.8\n" +
		"- Command: `make chaos`, which took 21m3s\n" +
		"- Outcome: 5 cases tried, 3 survived, **1 lost something**\n\n" +
		"| scenario | cases | survived | lost |\n|---|---:|---:|---:|\n" +
		"| NVML failure | 3 | 3 | 0 |\n" +
		"| kill | 2 | 0 | 1 |\n" +
		"| **all** | **5** | **3** | **1** |\n" +
		"\n## NVML failure\n\nEach op fails once.\n\n" +
		"| fault | cases | survived | lost |\n|---|---:|---:|---:|\n" +
		"| SetMIGMode fails once | 2 | 2 | 0 |\n" +
		"| Reset fails once | 1 | 1 | 0 |\n" +
		"| **total** | **3** | **3** | **0** |\n" +
		"\n## kill\n\n" +
		"| fault | cases | survived | lost |\n|---|---:|---:|---:|\n" +
		"| killed | 2 | 0 | 1 |\n" +
		"| **total** | **2** | **0** | **1** |\n" +
		"\nCases that did not survive or lost something:\n\n" +
		"- a | b (killed): did not converge: layout x\n" +
		"- c (killed): instance GPU 0 1g.10gb@0:1\n" +
		"\nDevelopers: see [internals/reliability.md](internals/reliability.md).\n"
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
}
