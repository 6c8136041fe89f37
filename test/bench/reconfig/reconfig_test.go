package reconfig

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/desired"
	"github.com/carve-dev/carve/internal/transitions"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
)

// The counts of two transitions, worked out by hand on the H100 (two GPUs,
// each as below), for carve and for the wipe.
func TestMeasureCounts(t *testing.T) {
	ops := func(dci, dgi, cgi, cci int) map[partition.OpKind]int {
		out := map[partition.OpKind]int{}
		for k, v := range map[partition.OpKind]int{
			partition.OpDestroyCI: dci, partition.OpDestroyGI: dgi, partition.OpCreateGI: cgi, partition.OpCreateCI: cci,
		} {
			if v > 0 {
				out[k] = v
			}
		}
		return out
	}
	tests := []struct {
		from, to    string
		carve, wipe tally
	}{{
		// all-1g holds 1g at 0..6; balanced is placed 2g 0:2, 1g 2:1 and
		// 3:1, 3g 4:4. carve keeps the 1g at 2 and 3, destroys five and
		// makes two: 14 calls, 8 s a GPU. The wipe destroys seven and
		// makes four, the 1g at 2 and 3 among them: 22 calls, 13 s.
		from: "all-1g", to: "balanced",
		carve: tally{ops: ops(10, 10, 4, 4), total: 28, destroyed: 10, kept: 4, time: 16 * time.Second},
		wipe: tally{ops: ops(14, 14, 8, 8), total: 44, destroyed: 14, destroyedWanted: 4, time: 26 * time.Second,
			wanted: []string{"GPU 0: 1g.10gb at 2:1", "GPU 0: 1g.10gb at 3:1", "GPU 1: 1g.10gb at 2:1", "GPU 1: 1g.10gb at 3:1"}},
	}, {
		// half is a 3g at 0:4; half-plus adds three 1g at 4, 5 and 6.
		// carve only adds them: 6 calls, 4.5 s a GPU. The wipe destroys
		// the 3g and makes all four again: 10 calls, 7 s.
		from: "half", to: "half-plus",
		carve: tally{ops: ops(0, 0, 6, 6), total: 12, kept: 2, time: 9 * time.Second},
		wipe: tally{ops: ops(2, 2, 8, 8), total: 20, destroyed: 2, destroyedWanted: 2, time: 14 * time.Second,
			wanted: []string{"GPU 0: 3g.40gb at 0:4", "GPU 1: 3g.40gb at 0:4"}},
	}}
	for _, tc := range tests {
		tr := transitions.Transition{Model: "H100-80GB", Machine: "h100-80gb*2", From: tc.from, To: tc.to}
		t.Run(tr.Name(), func(t *testing.T) {
			r, err := measure(context.Background(), tr, sim.RealisticLatency())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.carve, r.carve, cmp.AllowUnexported(tally{})); diff != "" {
				t.Errorf("carve (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wipe, r.wipe, cmp.AllowUnexported(tally{})); diff != "" {
				t.Errorf("wipe (-want +got):\n%s", diff)
			}
		})
	}
}

// The wipe really reaches the target on the simulator, and a sequence that
// stops short of it is caught, not counted.
func TestRunChecksConvergence(t *testing.T) {
	ctx := context.Background()
	f, err := configs.Parse([]byte(transitions.Profiles("H100-80GB")))
	if err != nil {
		t.Fatal(err)
	}
	for _, short := range []bool{false, true} {
		m, err := machineAt(ctx, "h100-80gb*2", f, "all-1g")
		if err != nil {
			t.Fatal(err)
		}
		node, err := partition.ReadNode(m)
		if err != nil {
			t.Fatal(err)
		}
		st, err := desired.For(f, "balanced", node)
		if err != nil {
			t.Fatal(err)
		}
		steps, err := Wipe(node, st.Targets)
		if err != nil {
			t.Fatal(err)
		}
		if short {
			steps = steps[:len(steps)-1]
		}
		_, err = run(ctx, m, node, steps, st.Targets, sim.RealisticLatency())
		if short && (err == nil || !strings.Contains(err.Error(), "not converged")) {
			t.Errorf("one call short: err = %v, want not converged", err)
		}
		if !short && err != nil {
			t.Errorf("the whole wipe: %v", err)
		}
	}
}

// count follows the instances through the steps: a reset destroys what
// the GPU holds, a destroyed instance made again where it was counts as
// destroyed but wanted, and steps that do not lead where the machine is
// are an error.
func TestCount(t *testing.T) {
	m := lookup(t, "H100-80GB")
	a, b := inst(t, m, "3g.40gb", 0, 1), inst(t, m, "3g.40gb", 4, 2)
	before := []partition.GPU{gpu(0, true, []partition.Instance{a, b})}
	steps := join(destroy(0, a), []Step{mode(0, partition.OpResetGPU)}, create(t, m, 0, "3g.40gb", 0))
	after := []partition.GPU{gpu(0, true, []partition.Instance{a})}
	got, err := count(before, steps, after, sim.UniformLatency(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	want := tally{
		ops:   map[partition.OpKind]int{partition.OpDestroyCI: 1, partition.OpDestroyGI: 1, partition.OpResetGPU: 1, partition.OpCreateGI: 1, partition.OpCreateCI: 1},
		total: 5, destroyed: 2, destroyedWanted: 1, wanted: []string{"GPU 0: 3g.40gb at 0:4"}, time: 5 * time.Second,
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(tally{})); diff != "" {
		t.Errorf("count (-want +got):\n%s", diff)
	}
	if _, err := count(before, steps[:2], after, sim.UniformLatency(time.Second)); err == nil {
		t.Error("count of steps that leave b in place, against a machine without it: no error")
	}
}

// Run measures the whole suite in short mode: two tables that pass Check,
// one row per transition and a total that adds them up, carve never
// rebuilding an instance.
func TestRun(t *testing.T) {
	var log strings.Builder
	tables, err := Run(context.Background(), Options{Short: true, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) != 2 {
		t.Fatalf("%d tables, want 2", len(tables))
	}
	for _, tb := range tables {
		if err := tb.Check(); err != nil {
			t.Error(err)
		}
		if tb.Command != "make bench BENCH=reconfig" || tb.About == "" || len(tb.Notes) == 0 {
			t.Errorf("table %q: command %q, about or notes missing", tb.Title, tb.Command)
		}
	}
	suite := transitions.Suite()
	rows := tables[0].Rows
	if len(rows) != len(suite)+1 || len(suite) < 20 {
		t.Fatalf("%d rows for %d transitions, want one each and a total, at least 20", len(rows), len(suite))
	}
	if n := strings.Count(log.String(), "\n"); n != len(suite) {
		t.Errorf("%d progress lines, want %d", n, len(suite))
	}
	checkTotals(t, rows)
}

// checkTotals checks that each transition row names its transition and
// that the total row adds up the count columns, carve's rebuilt being 0.
func checkTotals(t *testing.T, rows [][]string) {
	t.Helper()
	sums := map[int]int{}
	for i, tr := range transitions.Suite() {
		if rows[i][0] != tr.Name() || rows[i][1] != tr.What {
			t.Errorf("row %d is %q %q, want %q %q", i+1, rows[i][0], rows[i][1], tr.Name(), tr.What)
		}
		for _, col := range []int{2, 3, 5, 6} {
			n, err := strconv.Atoi(rows[i][col])
			if err != nil {
				t.Fatalf("row %d column %d: %v", i+1, col, err)
			}
			sums[col] += n
		}
		if rows[i][5] != "0" {
			t.Errorf("%s: carve destroyed but wanted %s", tr.Name(), rows[i][5])
		}
	}
	total := rows[len(rows)-1]
	for col, sum := range sums {
		if total[col] != strconv.Itoa(sum) {
			t.Errorf("total column %d is %s, want %d", col, total[col], sum)
		}
	}
}
