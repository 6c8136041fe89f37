package memory

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/carve-dev/carve/test/bench/report"
)

// reading is a Reading of rss MiB settled.
func reading(state string, rss uint64) Reading {
	return Reading{State: state, Max: rss << 20, Settled: Mem{RSS: rss << 20, Binary: rss << 19, BinaryMapped: rss << 20, Threads: 10},
		Go: GoMem{HeapInuse: 4 << 20, Goroutines: 14}}
}

// result is a Result whose device-plugin agent settles at dp MiB and DRA
// agent at draMiB, beside floors of 40, 20 and 42 MiB.
func result(dp, draMiB uint64) Result {
	return Result{
		Agent:       []Reading{reading("idle", dp-2), reading("again", dp-1), reading("dense", dp)},
		DRA:         []Reading{reading("DRA idle", draMiB-1), reading("DRA dense", draMiB)},
		Floor:       reading("floor", 40),
		NarrowFloor: reading("narrow", 20),
		DRAFloor:    reading("dra floor", 42),
	}
}

// TestTablesGoals checks that the tables are well formed and that their
// goals are met exactly when every settled state is within 40 MiB and
// 1.05x its floor.
func TestTablesGoals(t *testing.T) {
	for _, c := range []struct {
		name        string
		dp, dra     uint64
		wantMet     []bool
		wantFigures string
	}{
		{"both met", 33, 35, []bool{true, true}, "at most 33.0 MiB (0.82x the goal), 0.82x the floor (clientset) of 40.0 MiB"},
		{"above the goal", 41, 41, []bool{false, false}, "at most 41.0 MiB (1.02x the goal), 1.02x the floor (clientset) of 40.0 MiB"},
		{"under the goal and within 1.05x the floor", 39, 39, []bool{true, true}, "at most 39.0 MiB (0.97x the goal), 0.97x the floor (clientset) of 40.0 MiB"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tables := Tables(result(c.dp, c.dra), false)
			var met []bool
			for _, tb := range tables {
				if err := tb.Check(); err != nil {
					t.Error(err)
				}
				for _, g := range tb.Goals {
					met = append(met, g.Met)
				}
			}
			if diff := cmp.Diff(c.wantMet, met); diff != "" {
				t.Errorf("goals met (-want +got):\n%s", diff)
			}
			if got := tables[0].Goals[0].Figures; got != c.wantFigures {
				t.Errorf("figures %q, want %q", got, c.wantFigures)
			}
		})
	}
}

// TestTablesFloorRatio checks the 1.05x bound against the floor: a
// floor far under the goal makes a state under the goal fail.
func TestTablesFloorRatio(t *testing.T) {
	res := result(33, 35)
	res.Floor = reading("floor", 30)
	res.DRAFloor = reading("dra floor", 34)
	var got []report.Goal
	for _, tb := range Tables(res, false) {
		got = append(got, tb.Goals...)
	}
	if len(got) != 2 || got[0].Met || !got[1].Met {
		t.Fatalf("goals %+v: want device-plugin not met (1.10x the floor), DRA met (1.03x)", got)
	}
	if !strings.Contains(got[0].Figures, "1.10x the floor (clientset) of 30.0 MiB") {
		t.Errorf("figures %q do not give the ratio to the floor", got[0].Figures)
	}
}
