package report

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRatio(t *testing.T) {
	for _, tc := range []struct {
		carve, base float64
		want        string
	}{
		{1, 1, "1.00x"}, {1.18, 1, "1.18x"}, {25, 2, "12.5x"}, {300, 2, "150x"},
		{1, 0, "n/a"}, {0, 4, "0.00x"},
	} {
		if got := Ratio(tc.carve, tc.base); got != tc.want {
			t.Errorf("Ratio(%v, %v) = %q, want %q", tc.carve, tc.base, got, tc.want)
		}
	}
}

func TestPercentile(t *testing.T) {
	var s []time.Duration
	for i := 100; i >= 1; i-- {
		s = append(s, time.Duration(i))
	}
	got := []time.Duration{Percentile(s, 0.5), Percentile(s, 0.9), Percentile(s, 0.99), Percentile(s, 1), Percentile(nil, 0.5)}
	if diff := cmp.Diff([]time.Duration{50, 90, 99, 100, 0}, got); diff != "" {
		t.Errorf("percentiles (-want +got):\n%s", diff)
	}
	if s[0] != 100 {
		t.Errorf("Percentile sorted its input")
	}
}

func TestDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		412:                      "412 ns",
		37500:                    "37.5 µs",
		1240 * time.Microsecond:  "1.24 ms",
		2310 * time.Millisecond:  "2.31 s",
		125 * time.Second:        "125 s",
		999 * time.Microsecond:   "999 µs",
		10500 * time.Microsecond: "10.5 ms",
		999700 * time.Nanosecond: "1.00 ms",
		999499 * time.Nanosecond: "999 µs",
	} {
		if got := Duration(d); got != want {
			t.Errorf("Duration(%d) = %q, want %q", d, got, want)
		}
	}
}

func TestTableMarkdownAndCheck(t *testing.T) {
	tab := Table{Title: "T", Command: "make bench BENCH=x", About: "What.", Columns: []string{"a", "b"},
		Rows: [][]string{{"1", "x|y"}}, Notes: []string{"Note."}}
	want := "### T\n\nWhat.\n\nCommand: `make bench BENCH=x`\n\n| a | b |\n|---|---|\n| 1 | x\\|y |\n\nNote.\n\n"
	if diff := cmp.Diff(want, tab.Markdown()); diff != "" {
		t.Errorf("Markdown (-want +got):\n%s", diff)
	}
	if err := tab.Check(); err != nil {
		t.Errorf("Check: %v", err)
	}
	bad := tab
	bad.Rows = [][]string{{"1"}}
	if err := bad.Check(); err == nil || !strings.Contains(err.Error(), "row 1 has 1 cells") {
		t.Errorf("Check of a short row = %v", err)
	}
	bad.Rows = nil
	if err := bad.Check(); err == nil {
		t.Errorf("Check of an empty table passed")
	}
}

func TestRewrite(t *testing.T) {
	run := Run{Command: "make bench", Started: time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC),
		Finished: time.Date(2026, 11, 25, 10, 12, 3, 0, time.UTC), Machine: Machine{Cores: 2, CPU: "cpu", Kernel: "6.1", Go: "go1.26"},
		Sections: []Section{
			{Title: "One", Tables: []Table{{Title: "T", Columns: []string{"a"}, Rows: [][]string{{"1"}},
				Goals: []Goal{{Name: "a under 2", Met: true, Figures: "1"}, {Name: "a | b", Figures: "3 against 2"}}}}, Took: time.Second},
			{Title: "Two", Err: errors.New("needs\nroot")},
		}}
	gen := run.Markdown()
	for _, want := range []string{"## Goals\n\n| goal | section | met | figures |\n|---|---|---|---|\n" +
		"| a under 2 | 1. One | met | 1 |\n| a \\| b | 1. One | **not met** | 3 against 2 |\n| - | 2. Two | not measured in this run | - |\n\n## 1. One", "## 2. Two", "**Not measured in this run**: needs root", "(12m3s in all)", "2 cores (cpu)"} {
		if !strings.Contains(gen, want) {
			t.Errorf("generated part lacks %q:\n%s", want, gen)
		}
	}
	path := filepath.Join(t.TempDir(), "b.md")
	if err := os.WriteFile(path, []byte("# Benchmarks\n\nHand text.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Rewrite(path, gen); err != nil {
		t.Fatal(err)
	}
	first, _ := os.ReadFile(path)
	if want := "# Benchmarks\n\n" + gen + "\nHand text.\n"; string(first) != want {
		t.Errorf("first rewrite (-want +got):\n%s", cmp.Diff(want, string(first)))
	}
	// A second run replaces only the marked part.
	run.Sections = run.Sections[:1]
	if err := Rewrite(path, run.Markdown()); err != nil {
		t.Fatal(err)
	}
	second, _ := os.ReadFile(path)
	if want := "# Benchmarks\n\n" + run.Markdown() + "\nHand text.\n"; string(second) != want {
		t.Errorf("second rewrite (-want +got):\n%s", cmp.Diff(want, string(second)))
	}
	if err := os.WriteFile(path, []byte("# B\n"+EndMarker+"\n"+BeginMarker+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Rewrite(path, gen); err == nil {
		t.Error("Rewrite accepted markers out of order")
	}
}
