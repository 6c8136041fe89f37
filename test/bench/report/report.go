// Package report holds what carve's benchmarks (`make bench`,
// test/cmd/carve-bench) produce: tables with a baseline beside each of
// carve's figures, the statistics they are made of, and the rewriting of
// docs/benchmarks.md between its markers.
package report

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Table is one table of docs/benchmarks.md.
type Table struct {
	// Title is the table's heading ("Allocate over gRPC").
	Title string
	// Command is what measures it on its own ("make bench BENCH=allocate").
	Command string
	// About says what is measured, how, and what the baseline is; markdown.
	About string
	// Columns are the header cells; Rows the body, each as long as Columns.
	Columns []string
	Rows    [][]string
	// Notes are paragraphs after the table (goals met or not, and why).
	Notes []string
	// Goals are the goals the table's figures are held to, met or not;
	// the run lists them all at the top of docs/benchmarks.md.
	Goals []Goal
}

// Goal is one of carve's goals and how a run measured against it.
type Goal struct {
	// Name states the goal ("RSS at most 40 MiB").
	Name string
	// Met says whether the run met it.
	Met bool
	// Figures are what the run measured, against the goal's bound.
	Figures string
}

// Markdown writes t as a level-3 section.
func (t Table) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "### %s\n\n", t.Title)
	if t.About != "" {
		fmt.Fprintf(&b, "%s\n\n", strings.TrimSpace(t.About))
	}
	if t.Command != "" {
		fmt.Fprintf(&b, "Command: `%s`\n\n", t.Command)
	}
	if len(t.Columns) > 0 {
		b.WriteString("| " + strings.Join(t.Columns, " | ") + " |\n")
		b.WriteString("|" + strings.Repeat("---|", len(t.Columns)) + "\n")
		for _, r := range t.Rows {
			cells := make([]string, len(t.Columns))
			copy(cells, r)
			for i, c := range cells {
				cells[i] = strings.ReplaceAll(c, "|", `\|`)
			}
			b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
		}
		b.WriteString("\n")
	}
	for _, n := range t.Notes {
		fmt.Fprintf(&b, "%s\n\n", strings.TrimSpace(n))
	}
	return b.String()
}

// Check reports a table whose rows do not match its columns, or that has
// no rows: a benchmark that produced nothing.
func (t Table) Check() error {
	if t.Title == "" {
		return fmt.Errorf("a table has no title")
	}
	if len(t.Rows) == 0 {
		return fmt.Errorf("table %q: no rows", t.Title)
	}
	for i, r := range t.Rows {
		if len(r) != len(t.Columns) {
			return fmt.Errorf("table %q: row %d has %d cells, want %d", t.Title, i+1, len(r), len(t.Columns))
		}
	}
	return nil
}

// Ratio writes carve/baseline as "0.93x"; "n/a" when the baseline is zero
// or either is not a number.
func Ratio(carve, baseline float64) string {
	if baseline == 0 || math.IsNaN(carve) || math.IsNaN(baseline) || math.IsInf(carve, 0) || math.IsInf(baseline, 0) {
		return "n/a"
	}
	r := carve / baseline
	switch {
	case r >= 100:
		return fmt.Sprintf("%.0fx", r)
	case r >= 10:
		return fmt.Sprintf("%.1fx", r)
	default:
		return fmt.Sprintf("%.2fx", r)
	}
}

// Percentile returns the p-quantile (0..1) of samples by the nearest-rank
// method; 0 for no samples. samples is not modified.
func Percentile(samples []time.Duration, p float64) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	rank := int(math.Ceil(p*float64(len(s)))) - 1
	return s[min(max(rank, 0), len(s)-1)]
}

// Duration writes d with three significant digits in a unit that suits it
// ("412 ns", "37.5 µs", "1.24 ms", "2.31 s").
func Duration(d time.Duration) string {
	// Round to three significant digits first, so that 999.7 µs is "1.00 ms".
	f, _ := strconv.ParseFloat(strconv.FormatFloat(float64(d), 'g', 3, 64), 64)
	units := []struct {
		name string
		div  float64
	}{{"s", 1e9}, {"ms", 1e6}, {"µs", 1e3}}
	for _, u := range units {
		if math.Abs(f) >= u.div {
			return sig3(f/u.div) + " " + u.name
		}
	}
	return fmt.Sprintf("%.0f ns", f)
}

// MiB writes a byte count in MiB with one decimal.
func MiB(bytes uint64) string { return fmt.Sprintf("%.1f MiB", float64(bytes)/(1<<20)) }

// sig3 writes v with three significant digits.
func sig3(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}
