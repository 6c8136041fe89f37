package claims

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// series makes a Series of kind whose samples run after each of ms
// milliseconds, allocated at 100 ms and, when dynamic, made 1.6 s after.
func series(kind Kind, ms ...int) Series {
	s := Series{Kind: kind}
	for _, v := range ms {
		x := Sample{Allocated: 100 * time.Millisecond, Running: time.Duration(v) * time.Millisecond}
		if kind.Dynamic {
			x.Made = x.Allocated + 1600*time.Millisecond
		}
		s.Samples = append(s.Samples, x)
	}
	return s
}

// TestTables checks the table's figures: percentiles per kind, the
// difference to the static device's p50, the stages, and the note that
// splits the difference into the NVML calls and the rest.
func TestTables(t *testing.T) {
	k := Kinds()
	res := Result{Latency: "realistic", Make: 1500 * time.Millisecond, Remove: time.Second, Series: []Series{
		series(k[0], 1000, 1200, 1100, 3000),
		series(k[1], 2700, 2600, 2800, 2900),
		series(k[2], 2500, 2600, 2700, 2650),
	}}
	tables := Tables(res, false)
	if len(tables) != 1 {
		t.Fatalf("%d tables, want 1", len(tables))
	}
	tb := tables[0]
	if err := tb.Check(); err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{k[0].Name, "4", "1.10 s", "3.00 s", "3.00 s", "baseline", "100 ms", "—", "1.00 s"},
		{k[1].Name, "4", "2.70 s", "2.90 s", "2.90 s", "+1.60 s", "100 ms", "1.60 s", "2.60 s"},
		{k[2].Name, "4", "2.60 s", "2.70 s", "2.70 s", "+1.50 s", "100 ms", "1.60 s", "2.50 s"},
	}
	if diff := cmp.Diff(want, tb.Rows); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	for _, s := range []string{
		"a pod with the dynamic 1g.10gb (GPU 1, made at prepare) runs +1.60 s later than one with the baseline (p50 against p50): 1.50 s of NVML calls and +100 ms else",
		"a pod with the dynamic 3g.40gb (GPU 1, made at prepare) runs +1.50 s later than one with the baseline (p50 against p50): 1.50 s of NVML calls and +0 ns else",
		"1.50 s together at `--sim-latency realistic`",
		"the baseline's p90 is 1.90 s above its p50",
	} {
		if !strings.Contains(tb.Notes[0], s) {
			t.Errorf("note does not say %q:\n%s", s, tb.Notes[0])
		}
	}
	if !strings.Contains(tb.Notes[1], "1.00 s together") {
		t.Errorf("note on deleting does not give the destroy calls' time:\n%s", tb.Notes[1])
	}
	if md := tb.Markdown(); !strings.Contains(md, "Command: `make bench BENCH=claims`") || !strings.Contains(md, "sim:h100-80gb*2 --sim-latency realistic") {
		t.Errorf("markdown lacks the command or the agent's flags:\n%s", md)
	}
	if short := Tables(res, true)[0]; !strings.Contains(short.Notes[len(short.Notes)-1], "Short mode") {
		t.Errorf("short mode is not marked: %v", short.Notes)
	}
}

// TestFindMade reads the time of a claim's device from agent log lines,
// skipping other claims, other messages and lines that are not JSON.
func TestFindMade(t *testing.T) {
	log := `not json made a MIG device for a claim
{"time":"2026-11-28T10:00:00.5Z","level":"INFO","msg":"made a MIG device for a claim","device":"gpu-1-dyn-1g10gb-0","claim":"other","uuid":"MIG-1"}
{"time":"2026-11-28T10:00:01.25Z","level":"INFO","msg":"destroyed the MIG device of a claim","claim":"uid-1"}
{"time":"2026-11-28T10:00:02.125Z","level":"INFO","msg":"made a MIG device for a claim","device":"gpu-1-dyn-1g10gb-1","claim":"uid-1","uuid":"MIG-2"}
`
	got, err := findMade(strings.NewReader(log), "uid-1")
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 11, 28, 10, 0, 2, 125e6, time.UTC); !got.Equal(want) {
		t.Errorf("made at %s, want %s", got, want)
	}
	if _, err := findMade(strings.NewReader(log), "uid-2"); err == nil || !strings.Contains(err.Error(), "uid-2") {
		t.Errorf("a claim without a line: error %v, want one naming it", err)
	}
}
