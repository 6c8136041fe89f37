package planning

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/carve-dev/carve/partition"
)

// size is how big a node's plan is: ops over the GPUs not blocked, and the
// blocked GPUs.
type size struct{ Ops, Blocked int }

// smallCase is a node of a few GPUs, all planned to one target.
type smallCase struct {
	name    string
	layouts []layout
	target  map[string]int
}

// smallCases are the planning problems on which carve and the brute force
// must agree.
func smallCases() []smallCase {
	busy := func(l layout, i int) layout {
		l = append(layout(nil), l...)
		l[i].busy = true
		return l
	}
	sevenOnes := ones(0, 1, 2, 3, 4, 5, 6)
	full := layout{{profile: "7g.80gb", start: 0}}
	return []smallCase{
		{"already as wanted", []layout{ones(0, 1, 2, 3, 4, 5, 6)}, map[string]int{"1g.10gb": 7}},
		{"whole GPU to balanced", []layout{nil}, balanced()},
		{"1g x7 to balanced", []layout{sevenOnes}, balanced()},
		{"7g to 1g x7", []layout{full}, map[string]int{"1g.10gb": 7}},
		{"balanced to whole GPU", []layout{{{profile: "3g.40gb", start: 4}, {profile: "2g.20gb", start: 0}}}, nil},
		{"busy 1g kept, 3g around it", []layout{busy(ones(0, 1, 2, 3, 4), 4)}, map[string]int{"3g.40gb": 1, "1g.10gb": 3}},
		{"busy 1g where the 4g must go", []layout{busy(sevenOnes, 0)}, map[string]int{"4g.40gb": 1, "1g.10gb": 3}},
		{"busy whole-GPU reset", []layout{busy(full, 0)}, nil},
		{"incomplete 2g repaired", []layout{{{profile: "2g.20gb", start: 0, slices: 1}, {profile: "3g.40gb", start: 4}}}, balanced()},
		{"empty GPU instance repaired", []layout{{{profile: "3g.40gb", start: 0, slices: -1}}}, map[string]int{"3g.40gb": 2}},
		{"mixed three GPUs", []layout{sevenOnes, full, nil}, map[string]int{"2g.20gb": 2, "3g.40gb": 1}},
		{"worst case, nothing in use", worstFree().layouts(2), worstFree().target},
		{"worst case, busy", worstBusy().layouts(2), worstBusy().target},
		{"typical change, 8 GPUs", typical().layouts(8), typical().target},
	}
}

// TestBruteAgreesWithCarve checks that the brute force finds plans of the
// same number of operations as carve's planner, and blocks the same GPUs.
func TestBruteAgreesWithCarve(t *testing.T) {
	for _, tc := range smallCases() {
		t.Run(tc.name, func(t *testing.T) {
			in := mustInput(t, tc.layouts, tc.target)
			plan, err := in.plan()
			if err != nil {
				t.Fatal(err)
			}
			ops, blocked, _ := carveWork(in, plan)
			found, err := bruteNode(context.Background(), in.node, in.targets, in.inUse, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(size{ops, blocked}, size{found.ops, found.blocked}); diff != "" {
				t.Errorf("carve's plan vs the brute force's (-carve +brute):\n%s", diff)
			}
		})
	}
}

// TestBrutePlanApplies runs the brute force's plans on the simulated
// machine: each must realise the target and leave every device in use as
// it was.
func TestBrutePlanApplies(t *testing.T) {
	for _, tc := range smallCases() {
		t.Run(tc.name, func(t *testing.T) {
			in := mustInput(t, tc.layouts, tc.target)
			found, err := bruteNode(context.Background(), in.node, in.targets, in.inUse, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			a := partition.Applier{Lib: in.lib}
			for _, p := range found.plans {
				if err := a.Apply(context.Background(), partition.GPUPlan{Index: p.index, Ops: p.ops}); err != nil {
					t.Fatalf("apply the brute force's plan: %v", err)
				}
			}
			checkRealised(t, in, found)
		})
	}
}

// checkRealised reads the machine back and checks every GPU that was not
// blocked against its target, and that every busy device is still there.
func checkRealised(t *testing.T, in input, found bruteResult) {
	t.Helper()
	after, err := partition.ReadInventory(in.lib)
	if err != nil {
		t.Fatal(err)
	}
	present := map[string]bool{}
	for i, g := range after {
		for _, inst := range g.Instances {
			present[inst.UUID()] = true
		}
		if found.plans[i].blocked {
			continue
		}
		if diff := cmp.Diff(in.targets[i].MIG, counts(g), cmpEmptyMap()); diff != "" {
			t.Errorf("GPU %d after the plan (-want +got):\n%s", i, diff)
		}
	}
	for u := range in.inUse {
		if !present[u] {
			t.Errorf("device in use %s was destroyed", u)
		}
	}
}

// counts returns the complete instances of a GPU by profile, nil when MIG
// is off.
func counts(g partition.GPU) map[string]int {
	if g.MIGMode != partition.MIGEnabled {
		return nil
	}
	out := map[string]int{}
	for _, in := range g.Instances {
		if in.Complete() {
			out[in.Profile]++
		}
	}
	return out
}

// cmpEmptyMap tells an empty map from nil (MIG on without instances vs
// MIG off) but nothing else.
func cmpEmptyMap() cmp.Option {
	return cmp.Comparer(func(a, b map[string]int) bool {
		if (a == nil) != (b == nil) || len(a) != len(b) {
			return false
		}
		for k, v := range a {
			if b[k] != v {
				return false
			}
		}
		return true
	})
}

// TestBruteRespectsInUse checks that the brute force pays for keeping a
// busy instance rather than destroying it, and blocks when it cannot.
func TestBruteRespectsInUse(t *testing.T) {
	l := ones(0, 1, 2, 3, 4)
	l[4].busy = true
	target := map[string]int{"3g.40gb": 1, "1g.10gb": 3}
	tests := []struct {
		name string
		l    layout
		// want is the plan with the devices in use left alone, cheapest
		// the cheapest plan of all (-1: none).
		want, cheapest int
		blocked        bool
	}{
		// Free: keep 1g at 0-2, drop 1g at 3 and 4, 3g at 4:4.
		{"nothing in use", ones(0, 1, 2, 3, 4), 6, 6, false},
		// Busy 1g at 4: 3g at 0:4, every other 1g goes, two made at 5-6.
		{"1g at 4 in use", l, 14, 6, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := mustInput(t, []layout{tc.l}, target)
			bf := &bruteForce{ctx: context.Background(), budget: time.Minute, deadline: time.Now().Add(time.Minute)}
			s, err := newGPUSearch(bf, in.node.GPUs[0], in.node.Models[0], target, in.inUse)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.run(); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]int{tc.want, tc.cheapest}, []int{s.best, s.bestAny}); diff != "" {
				t.Errorf("fewest ops [honouring in-use, any] (-want +got):\n%s", diff)
			}
			plan := s.plan()
			if len(plan) != s.best {
				t.Errorf("the plan written has %d ops, the search counted %d", len(plan), s.best)
			}
			for _, op := range plan {
				if in.inUse[op.UUID] {
					t.Errorf("the plan destroys a device in use: %s", op)
				}
			}
		})
	}
}

// TestCarveRepairsRatherThanKeepOne: empty GPU instances at 0-2 and a
// complete 1g at 4, wanted 1g x3 + 3g. Keeping the complete 1g forces the
// 3g to 0:4 and the empty ones out (9 ops); repairing the empty ones and
// moving the 1g costs 7, and carve's planner makes the 7, as the brute
// force does.
func TestCarveRepairsRatherThanKeepOne(t *testing.T) {
	sc := keepOrRepair()
	in := mustInput(t, sc.layouts(1), sc.target)
	plan, err := in.plan()
	if err != nil {
		t.Fatal(err)
	}
	ops, _, _ := carveWork(in, plan)
	found, err := bruteNode(context.Background(), in.node, in.targets, in.inUse, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(size{Ops: 7}, size{Ops: ops}); diff != "" {
		t.Errorf("carve (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(size{Ops: 7}, size{Ops: found.ops}); diff != "" {
		t.Errorf("brute force (-want +got):\n%s", diff)
	}
}

// TestBruteBudget checks that the budget and the context stop the search.
func TestBruteBudget(t *testing.T) {
	in := mustInput(t, worstBusy().layouts(8), worstBusy().target)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := bruteNode(context.Background(), in.node, in.targets, in.inUse, time.Nanosecond)
	var be *budgetError
	if !errors.As(err, &be) || be.budget != time.Nanosecond {
		t.Errorf("with a 1ns budget: got %v, want a budget error", err)
	}
	if _, err := bruteNode(cancelled, in.node, in.targets, in.inUse, time.Minute); !errors.Is(err, context.Canceled) {
		t.Errorf("with a cancelled context: got %v, want context.Canceled", err)
	}
}

// mustInput builds a simulated node.
func mustInput(t *testing.T, layouts []layout, target map[string]int) input {
	t.Helper()
	in, err := buildInput("h100-80gb", layouts, target)
	if err != nil {
		t.Fatal(err)
	}
	return in
}
