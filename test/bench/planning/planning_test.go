package planning

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestRunShort runs the benchmark as `make test` does and checks the
// table's shape and the figures that do not depend on timing.
func TestRunShort(t *testing.T) {
	var log strings.Builder
	tables, err := Run(context.Background(), Options{Short: true, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) != 1 {
		t.Fatalf("got %d tables, want 1", len(tables))
	}
	tab := tables[0]
	if err := tab.Check(); err != nil {
		t.Fatal(err)
	}
	if tab.Command != "make bench BENCH=planning" {
		t.Errorf("command %q", tab.Command)
	}
	// Every figure that is not a timing: case, GPUs, ops, ops ratio, kept
	// sets, brute-force states.
	var got [][]string
	for _, r := range tab.Rows {
		got = append(got, []string{r[0], r[1], r[7], r[8], r[9], r[10]})
	}
	want := [][]string{
		{"typical change", "1", "14 / 14", "1.00x", "128 / 128", "227"},
		{"typical change", "8", "88 / 88", "1.00x", "215 / 234", "1020"},
		{"typical change", "64", "704 / 704", "1.00x", "1720 / 1872", "8160"},
		{"worst case, nothing in use", "1", "14 / 14", "1.00x", "128 / 128", "531"},
		{"worst case, nothing in use", "8", "112 / 112", "1.00x", "1024 / 1024", "4248"},
		{"worst case, nothing in use", "64", "896 / 896", "1.00x", "8192 / 8192", "33984"},
		{"worst case, 3 devices in use (blocked)", "1", "0 + 1 GPU blocked / 0 + 1 GPU blocked", "1.00x", "128 / 128", "1451"},
		{"worst case, 3 devices in use (blocked)", "8", "0 + 8 GPUs blocked / 0 + 8 GPUs blocked", "1.00x", "1024 / 1024", "11608"},
		{"worst case, 3 devices in use (blocked)", "64", "0 + 64 GPUs blocked / 0 + 64 GPUs blocked", "1.00x", "8192 / 8192", "92864"},
		{"keep or repair", "1", "7 / 7", "1.00x", "16 / 16", "214"},
		{"keep or repair", "8", "56 / 56", "1.00x", "128 / 128", "1712"},
		{"keep or repair", "64", "448 / 448", "1.00x", "1024 / 1024", "13696"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	for _, r := range tab.Rows {
		if r[6] == "n/a" || strings.Contains(r[4], "did not finish") {
			t.Errorf("%s on %s GPUs: the brute force did not finish in short mode: %q, %q", r[0], r[1], r[4], r[6])
		}
	}
	if g := tab.Goals[0]; !g.Met || !strings.HasPrefix(g.Figures, "as many operations as the brute force's fewest in 12 of 12 cases") ||
		!strings.Contains(g.Figures, "2339 operations in all against 2339, ops ratio 1.00x") {
		t.Errorf("fewest-operations goal %+v, want met in 12 of 12 cases", g)
	}
	if n := strings.Count(log.String(), "\n"); n != len(want) {
		t.Errorf("%d progress lines, want %d:\n%s", n, len(want), log.String())
	}
}

// TestRunBudgetExhausted checks what the table says when the brute force
// runs out of its budget: the cell says so, the ratio is n/a, and carve is
// still measured.
func TestRunBudgetExhausted(t *testing.T) {
	tables, err := Run(context.Background(), Options{Short: true, Budget: time.Nanosecond, GPUs: []int{64}, SampleTime: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	tab := tables[0]
	if err := tab.Check(); err != nil {
		t.Fatal(err)
	}
	for _, r := range tab.Rows {
		got := []string{r[4], r[5], r[6]}
		want := []string{"did not finish in 1ns", "n/a", "n/a"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: brute force cells (-want +got):\n%s", r[0], diff)
		}
		if !strings.HasSuffix(r[10], "(stopped)") || strings.Contains(r[2], "n/a") || r[8] != "n/a" {
			t.Errorf("%s: states %q, carve %q, ops ratio %q", r[0], r[10], r[2], r[8])
		}
	}
	if g := tab.Goals[0]; g.Met || !strings.Contains(g.Figures, "the brute force finished 0") {
		t.Errorf("fewest-operations goal %+v, want not met: the brute force finished no case", g)
	}
	if !strings.Contains(strings.Join(tab.Notes, "\n"), "did not finish within its budget") {
		t.Errorf("notes do not say the brute force ran out of time:\n%s", strings.Join(tab.Notes, "\n"))
	}
}
