package transitions_test

import (
	"context"
	"testing"

	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/desired"
	"github.com/carve-dev/carve/internal/transitions"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
)

// Every transition of the suite is valid and runs on its simulated
// machine: From, then To, each converging (a second plan has nothing to
// do); names are unique and the suite has at least 20 entries.
func TestSuiteRuns(t *testing.T) {
	suite := transitions.Suite()
	if len(suite) < 20 {
		t.Fatalf("suite has %d transitions, want at least 20", len(suite))
	}
	seen := map[string]bool{}
	for _, tr := range suite {
		if seen[tr.Name()] {
			t.Fatalf("duplicate transition %s", tr.Name())
		}
		seen[tr.Name()] = true
		t.Run(tr.Name(), func(t *testing.T) {
			f, err := configs.Parse([]byte(transitions.Profiles(tr.Model)))
			if err != nil {
				t.Fatal(err)
			}
			m, err := sim.New(tr.Machine)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Init(); err != nil {
				t.Fatal(err)
			}
			ops := 0
			for _, profile := range []string{tr.From, tr.To} {
				ops = realise(t, m, f, profile)
				if again := realise(t, m, f, profile); again != 0 {
					t.Fatalf("%s: %d ops after converging", profile, again)
				}
			}
			if tr.To != "shared-4" && ops == 0 {
				t.Fatalf("%s -> %s changed nothing", tr.From, tr.To)
			}
		})
	}
}

// realise plans the profile on the machine, applies the plan and returns
// its number of operations.
func realise(t *testing.T, m *sim.Machine, f *configs.File, profile string) int {
	t.Helper()
	node, err := partition.ReadNode(m)
	if err != nil {
		t.Fatal(err)
	}
	st, err := desired.For(f, profile, node)
	if err != nil {
		t.Fatalf("%s: %v", profile, err)
	}
	plan, err := st.Plan(node, nil)
	if err != nil {
		t.Fatalf("plan %s: %v", profile, err)
	}
	n := 0
	for _, p := range plan.GPUs {
		n += len(p.Ops)
		ap := partition.Applier{Lib: m}
		if err := ap.Apply(context.Background(), p); err != nil {
			t.Fatalf("apply %s: %v", profile, err)
		}
	}
	return n
}
