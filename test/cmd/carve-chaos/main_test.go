package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/carve-dev/carve/internal/chaos"
)

// TestRun writes a report from a directory of records, prints the totals,
// and fails when a case lost something or none was recorded.
func TestRun(t *testing.T) {
	tests := []struct {
		name    string
		records []chaos.Record
		wantErr string
		want    []string // in the report
	}{
		{name: "all survived", records: []chaos.Record{
			{Scenario: "S", Checked: "what S checks"},
			{Scenario: "S", Case: "c1", Fault: "f", Survived: true},
		}, want: []string{"- Outcome: 1 cases tried, 1 survived, nothing lost", "what S checks", "| f | 1 | 1 | 0 |", "- Command: `make chaos`, which took"}},
		{name: "a case lost something", records: []chaos.Record{
			{Scenario: "S", Case: "c1", Fault: "f", Lost: "an instance"},
		}, wantErr: "1 cases lost something", want: []string{"- c1 (f): an instance"}},
		{name: "no records", wantErr: "no cases recorded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv(chaos.EnvOut, dir)
			rec := chaos.NewRecorder("runs")
			for _, r := range tt.records {
				if err := rec.Add(r); err != nil {
					t.Fatal(err)
				}
			}
			report := filepath.Join(t.TempDir(), "reliability.md")
			var out strings.Builder
			err := run([]string{"--records", dir, "--write", report, "--started", "1"}, &out)
			if (err != nil) != (tt.wantErr != "") || err != nil && !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("run = %v, want an error saying %q", err, tt.wantErr)
			}
			if len(tt.want) == 0 {
				return
			}
			data, err := os.ReadFile(report)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(data), w) {
					t.Errorf("report lacks %q:\n%s", w, data)
				}
			}
			if !strings.Contains(out.String(), "all") {
				t.Errorf("totals not printed: %q", out.String())
			}
		})
	}
}

func TestLoadAverage(t *testing.T) {
	dir := t.TempDir()
	tests := []struct{ content, want string }{
		{"0.84 0.63 0.89 2/345 6789\n", "0.84 0.63 0.89"},
		{"garbage\n", ""},
		{"a b c d\n", ""},
	}
	for i, tt := range tests {
		p := filepath.Join(dir, "loadavg")
		if err := os.WriteFile(p, []byte(tt.content), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := loadAverage(p); got != tt.want {
			t.Errorf("%d: loadAverage(%q) = %q, want %q", i, tt.content, got, tt.want)
		}
	}
	if got := loadAverage(filepath.Join(dir, "missing")); got != "" {
		t.Errorf("missing file: %q", got)
	}
}
