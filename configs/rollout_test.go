package configs

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const rolloutBase = "version: v1\nprofiles:\n  full:\n    - gpus: all\n"

func TestParseRollout(t *testing.T) {
	tests := []struct {
		name    string
		src     string
		want    Rollout
		windows map[string]Rollout
	}{
		{"none: one node, one failure", "", DefaultRollout, nil},
		{"a count", "rollout: {maxUnavailable: 3}\n", Rollout{MaxUnavailable: Bound{N: 3}, MaxFailures: 1}, nil},
		{"a percentage", "rollout: {maxUnavailable: \"10%\", maxFailures: 2}\n", Rollout{MaxUnavailable: Bound{N: 10, Percent: true}, MaxFailures: 2}, nil},
		{"all at once", "rollout: {maxUnavailable: 100%}\n", Rollout{MaxUnavailable: Bound{N: 100, Percent: true}, MaxFailures: 1}, nil},
		{"a window overrides the fields it gives", `rollout: {maxUnavailable: 2, maxFailures: 3}
windows:
  - {name: night, schedule: "0 20 * * *", duration: 1h, profile: full, rollout: {maxUnavailable: 50%}}
  - {name: day, schedule: "0 8 * * *", duration: 1h, profile: full}
`, Rollout{MaxUnavailable: Bound{N: 2}, MaxFailures: 3}, map[string]Rollout{"night": {MaxUnavailable: Bound{N: 50, Percent: true}, MaxFailures: 3}}},
		{"a window before the top-level section in the file", `windows:
  - {name: night, schedule: "0 20 * * *", duration: 1h, profile: full, rollout: {maxFailures: 5}}
rollout: {maxUnavailable: 4}
`, Rollout{MaxUnavailable: Bound{N: 4}, MaxFailures: 1}, map[string]Rollout{"night": {MaxUnavailable: Bound{N: 4}, MaxFailures: 5}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := mustParse(t, rolloutBase+tt.src)
			if diff := cmp.Diff(tt.want, f.Rollout); diff != "" {
				t.Errorf("rollout (-want +got):\n%s", diff)
			}
			for _, w := range f.Windows {
				want, own := tt.windows[w.Name]
				if !own {
					want = tt.want
				}
				got := f.RolloutFor(Selection{Profile: "full", Source: SourceWindow, Window: w.Name})
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("window %s (-want +got):\n%s", w.Name, diff)
				}
			}
			if diff := cmp.Diff(tt.want, f.RolloutFor(Selection{Profile: "full", Source: SourceDefault})); diff != "" {
				t.Errorf("outside windows (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseRolloutErrors(t *testing.T) {
	tests := []struct {
		src  string
		want string
	}{
		{"rollout: {maxUnavailable: 0}\n", "rollout.maxUnavailable: must be at least 1, not 0"},
		{"rollout: {maxUnavailable: -2}\n", "rollout.maxUnavailable: must be at least 1, not -2"},
		{"rollout: {maxUnavailable: \"0%\"}\n", `rollout.maxUnavailable: "0%": a percentage must be a whole number from 1% to 100%`},
		{"rollout: {maxUnavailable: \"101%\"}\n", `rollout.maxUnavailable: "101%": a percentage must be a whole number from 1% to 100%`},
		{"rollout: {maxUnavailable: \"2.5%\"}\n", `"2.5%": a percentage must be a whole number`},
		{"rollout: {maxUnavailable: \"3\"}\n", `rollout.maxUnavailable: "3": want a count of nodes from 1 or a percentage such as "10%"`},
		{"rollout: {maxUnavailable: 1.5}\n", "rollout.maxUnavailable: must be a whole number, not 1.5"},
		{"rollout: {maxUnavailable: true}\n", "rollout.maxUnavailable: must be a count of nodes from 1 or a percentage"},
		{"rollout: {maxFailures: 0}\n", "rollout.maxFailures: must be at least 1, not 0"},
		{"rollout: {maxfailures: 2}\n", "rollout.maxfailures: unknown field (did you mean maxFailures?)"},
		{"rollout: 3\n", "rollout: must be a mapping"},
		{"windows:\n  - {name: w, schedule: \"0 1 * * *\", duration: 1h, profile: full, rollout: {maxUnavailable: 0}}\n",
			"windows[0].rollout.maxUnavailable: must be at least 1, not 0"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			_, err := Parse([]byte(rolloutBase + tt.src))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestBoundOf(t *testing.T) {
	tests := []struct {
		b     Bound
		nodes int
		want  int
	}{
		{Bound{N: 1}, 0, 1},
		{Bound{N: 3}, 500, 3},
		{Bound{N: 10, Percent: true}, 500, 50},
		{Bound{N: 10, Percent: true}, 21, 3}, // 2.1 rounds up
		{Bound{N: 10, Percent: true}, 5, 1},
		{Bound{N: 10, Percent: true}, 0, 0},
		{Bound{N: 100, Percent: true}, 7, 7},
		{Bound{N: 1, Percent: true}, 1, 1},
	}
	for _, tt := range tests {
		if got := tt.b.Of(tt.nodes); got != tt.want {
			t.Errorf("%s of %d nodes = %d, want %d", tt.b, tt.nodes, got, tt.want)
		}
	}
}
