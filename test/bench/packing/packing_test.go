package packing

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/carve-dev/carve/partition"
)

// TestRunShort runs the benchmark as `make test` does: the table's shape,
// the allocator it names, and its counts, which are the same on every run.
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
	if tab.Command != "make bench BENCH=packing" {
		t.Errorf("command %q", tab.Command)
	}
	for _, want := range []string{"its **incubating** allocator", "DRAPartitionableDevices, DRAPrioritizedList)"} {
		if !strings.Contains(tab.About, want) {
			t.Errorf("the text lacks %q:\n%s", want, tab.About)
		}
	}
	var got [][]string
	for _, r := range tab.Rows {
		got = append(got, []string{r[0], r[3], r[4], r[5], r[6]})
	}
	want := [][]string{
		{"H100-80GB x1, mixed", "75.6% (68/90)", "71.1% (64/90)", "75.6% (68/90)", "75.6% (68/90)"},
		{"H100-80GB x1, small and large", "75.6% (68/90)", "68.9% (62/90)", "75.6% (68/90)", "75.6% (68/90)"},
		{"A100-40GB x1, mixed", "75.6% (68/90)", "71.1% (64/90)", "75.6% (68/90)", "75.6% (68/90)"},
		{"A30-24GB x1, mixed", "72.2% (65/90)", "72.2% (65/90)", "72.2% (65/90)", "73.3% (66/90)"},
		{"H100-80GB x2, mixed", "77.5% (31/40)", "77.5% (31/40)", "-", "-"},
		{"H100-80GB x8, mixed", "95.0% (38/40)", "92.5% (37/40)", "-", "-"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rows: node, carve, NVIDIA's order, best placement, best with refusals (-want +got):\n%s", diff)
	}
	if n := strings.Count(log.String(), "\n"); n != len(Cases(true)) {
		t.Errorf("%d progress lines, want %d:\n%s", n, len(Cases(true)), log.String())
	}
}

// TestCarveOrderServesMore: where the order matters, carve's serves more
// claims than NVIDIA's through the scheduler's allocator, and the brute
// force serves at least as many as both. By hand: on one H100, a 1g.10gb
// that stays and then a 4g.40gb. NVIDIA's order puts the 1g at slice 0,
// where the only 4g placement starts, and the 4g finds nothing; carve's
// puts it at slice 6, and both are served. Then a pinned random sequence
// of the "small and large" mix.
func TestCarveOrderServesMore(t *testing.T) {
	h100 := Cases(false)[1]
	if h100.Name() != "H100-80GB x1, small and large" {
		t.Fatalf("case 1 is %s", h100.Name())
	}
	byHand := Sequence{Claims: []Claim{{Profile: "1g.10gb", Arrive: 0, Depart: 5}, {Profile: "4g.40gb", Arrive: 1, Depart: 2}}}
	byHand.Events = events(byHand.Claims)
	random, err := generate(7, h100.Mix, 60, 1, h100.MaxLife)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		seq       Sequence
		wantCarve int
		wantNV    int
	}{
		{"1g then 4g", byHand, 2, 1},
		{"seed 7", random, 43, 37},
	} {
		t.Run(tc.name, func(t *testing.T) {
			carve, nvidia, bestN, bound := serveBoth(t, tc.seq)
			if carve != tc.wantCarve || nvidia != tc.wantNV {
				t.Errorf("served: carve %d, NVIDIA's order %d; want %d and %d", carve, nvidia, tc.wantCarve, tc.wantNV)
			}
			if carve <= nvidia {
				t.Errorf("carve's order served %d, NVIDIA's %d: want more", carve, nvidia)
			}
			if bestN < carve || bestN < nvidia || bound < bestN {
				t.Errorf("brute force: best %d, with refusals %d; carve %d, NVIDIA's order %d", bestN, bound, carve, nvidia)
			}
		})
	}
}

// serveBoth replays seq on one H100 against carve's slices and NVIDIA's
// order, and runs the brute force without and with refusals.
func serveBoth(t *testing.T, seq Sequence) (carve, nvidia, bestN, bound int) {
	t.Helper()
	m, _ := partition.LookupModel("H100-80GB")
	off, cs, err := carveNode(m, 1)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := nvidiaSlices(off)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	fc, err := replay(ctx, seq, cs)
	if err != nil {
		t.Fatal(err)
	}
	fn, err := replay(ctx, seq, ns)
	if err != nil {
		t.Fatal(err)
	}
	l, err := layout(m)
	if err != nil {
		t.Fatal(err)
	}
	if bestN, err = best(seq, l, false, 1e6); err != nil {
		t.Fatal(err)
	}
	if bound, err = best(seq, l, true, 1e6); err != nil {
		t.Fatal(err)
	}
	return countTrue(fc), countTrue(fn), bestN, bound
}
