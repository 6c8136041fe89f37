package partition_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/carve-dev/carve/partition"
)

// in describes an existing instance for mkGPU: a profile at a start, with
// its GI ID; cis is the compute slices of each CI (nil = one CI that fills
// the GI, i.e. complete; empty = no CI).
type in struct {
	profile string
	start   int
	giID    int
	cis     []int
}

// noCI and partialCI make incomplete instances.
var noCI = []int{}

func mkInstance(t testing.TB, m partition.Model, gpu int, x in) partition.Instance {
	t.Helper()
	p, ok := m.Profile(x.profile)
	if !ok {
		t.Fatalf("%s has no profile %s", m.Key, x.profile)
	}
	inst := partition.Instance{
		GIID: x.giID, ProfileID: p.ID, Profile: p.Name, ComputeSlices: p.ComputeSlices, MemoryMiB: p.MemoryMiB,
		Placement: partition.Placement{Start: x.start, Size: p.MemorySlices},
	}
	cis := x.cis
	if cis == nil {
		cis = []int{p.ComputeSlices}
	}
	for i, c := range cis {
		inst.CIs = append(inst.CIs, partition.ComputeInstance{ID: i, GIID: x.giID, ComputeSlices: c, UUID: migUUID(gpu, x.giID, i)})
	}
	return inst
}

func migUUID(gpu, gi, ci int) string { return fmt.Sprintf("MIG-%d-%d-%d", gpu, gi, ci) }

// mkGPU builds a MIG-enabled GPU snapshot with the given instances.
func mkGPU(t testing.TB, m partition.Model, index int, insts ...in) partition.GPU {
	t.Helper()
	g := partition.GPU{
		Index: index, UUID: fmt.Sprintf("GPU-%d", index), Product: m.Product, Model: m.Key, MemoryMiB: m.MemoryMiB,
		MIGCapable: true, MIGMode: partition.MIGEnabled, PendingMIGMode: partition.MIGEnabled,
	}
	for _, x := range insts {
		g.Instances = append(g.Instances, mkInstance(t, m, index, x))
	}
	return g
}

func opsText(ops []partition.Op) string {
	s := make([]string, len(ops))
	for i, o := range ops {
		s[i] = o.String()
	}
	return strings.Join(s, "; ")
}

func instancesText(ins []partition.PlannedInstance) string {
	s := make([]string, len(ins))
	for i, x := range ins {
		s[i] = fmt.Sprintf("%s@%d:%d %s", x.Profile, x.Placement.Start, x.Placement.Size, x.Status)
		if x.GIID >= 0 {
			s[i] += fmt.Sprintf(" gi=%d", x.GIID)
		}
		if x.UUID != "" {
			s[i] += " " + x.UUID
		}
	}
	return strings.Join(s, ", ")
}

func blockedText(bs []partition.Blocker) string {
	s := make([]string, len(bs))
	for i, b := range bs {
		s[i] = b.UUID + ": " + b.Reason
	}
	return strings.Join(s, "; ")
}

// planIndices lists the GPU indices of a node plan's GPU plans, in order.
func planIndices(p partition.NodePlan) []int {
	var out []int
	for _, g := range p.GPUs {
		out = append(out, g.Index)
	}
	return out
}

func uuids(us ...string) map[string]bool {
	out := map[string]bool{}
	for _, u := range us {
		out[u] = true
	}
	return out
}

// TestPlanGPUTransitions checks geometry changes on a MIG-enabled H100:
// what is kept, what is destroyed, what is created, in which order, and
// what blocks.
func TestPlanGPUTransitions(t *testing.T) {
	m := mustModel(t, "H100-80GB")
	sevenSmall := []in{{"1g.10gb", 0, 7, nil}, {"1g.10gb", 1, 8, nil}, {"1g.10gb", 2, 9, nil}, {"1g.10gb", 3, 10, nil}, {"1g.10gb", 4, 11, nil}, {"1g.10gb", 5, 12, nil}, {"1g.10gb", 6, 13, nil}}
	tests := []struct {
		name      string
		have      []in
		want      map[string]int
		inUse     map[string]bool
		ops       string // exact Ops (or WouldDo when blocked)
		instances string // exact final instances
		blocked   string // substrings of the blockers, "" = not blocked
	}{
		{
			name: "same geometry is a no-op",
			have: []in{{"3g.40gb", 0, 1, nil}, {"3g.40gb", 4, 2, nil}},
			want: map[string]int{"3g.40gb": 2},
			ops:  "", instances: "3g.40gb@0:4 kept gi=1 MIG-0-1-0, 3g.40gb@4:4 kept gi=2 MIG-0-2-0",
		},
		{
			name:      "3g x2 to 3g + 1g x4 keeps the 3g at 4",
			have:      []in{{"3g.40gb", 0, 1, nil}, {"3g.40gb", 4, 2, nil}},
			want:      map[string]int{"3g.40gb": 1, "1g.10gb": 4},
			ops:       "destroy-ci 3g.40gb at 0:4 (GI 1, CI 0); destroy-gi 3g.40gb at 0:4 (GI 1); create-gi 1g.10gb at 0:1; create-gi 1g.10gb at 1:1; create-gi 1g.10gb at 2:1; create-gi 1g.10gb at 3:1; create-ci 1g.10gb at 0:1; create-ci 1g.10gb at 1:1; create-ci 1g.10gb at 2:1; create-ci 1g.10gb at 3:1",
			instances: "1g.10gb@0:1 new, 1g.10gb@1:1 new, 1g.10gb@2:1 new, 1g.10gb@3:1 new, 3g.40gb@4:4 kept gi=2 MIG-0-2-0",
		},
		{
			name:      "the busy 3g at 0 blocks: the 1g x4 need slices 0-3",
			have:      []in{{"3g.40gb", 0, 1, nil}, {"3g.40gb", 4, 2, nil}},
			want:      map[string]int{"3g.40gb": 1, "1g.10gb": 4},
			inUse:     uuids("MIG-0-1-0"),
			ops:       "destroy-ci 3g.40gb at 0:4 (GI 1, CI 0); destroy-gi 3g.40gb at 0:4 (GI 1); create-gi 1g.10gb at 0:1; create-gi 1g.10gb at 1:1; create-gi 1g.10gb at 2:1; create-gi 1g.10gb at 3:1; create-ci 1g.10gb at 0:1; create-ci 1g.10gb at 1:1; create-ci 1g.10gb at 2:1; create-ci 1g.10gb at 3:1",
			instances: "1g.10gb@0:1 new, 1g.10gb@1:1 new, 1g.10gb@2:1 new, 1g.10gb@3:1 new, 3g.40gb@4:4 kept gi=2 MIG-0-2-0",
			blocked:   "MIG-0-1-0: in use; at 0:4 it leaves no room for the rest of the target (1g.10gb x4, 3g.40gb x1)",
		},
		{
			name:      "a busy 3g at 4 is simply kept",
			have:      []in{{"3g.40gb", 0, 1, nil}, {"3g.40gb", 4, 2, nil}},
			want:      map[string]int{"3g.40gb": 1, "1g.10gb": 4},
			inUse:     uuids("MIG-0-2-0"),
			ops:       "destroy-ci 3g.40gb at 0:4 (GI 1, CI 0); destroy-gi 3g.40gb at 0:4 (GI 1); create-gi 1g.10gb at 0:1; create-gi 1g.10gb at 1:1; create-gi 1g.10gb at 2:1; create-gi 1g.10gb at 3:1; create-ci 1g.10gb at 0:1; create-ci 1g.10gb at 1:1; create-ci 1g.10gb at 2:1; create-ci 1g.10gb at 3:1",
			instances: "1g.10gb@0:1 new, 1g.10gb@1:1 new, 1g.10gb@2:1 new, 1g.10gb@3:1 new, 3g.40gb@4:4 kept gi=2 MIG-0-2-0",
		},
		{
			name:      "a busy instance of a profile no longer wanted blocks",
			have:      []in{{"2g.20gb", 0, 3, nil}, {"2g.20gb", 2, 4, nil}},
			want:      map[string]int{"3g.40gb": 2},
			inUse:     uuids("MIG-0-4-0"),
			ops:       "destroy-ci 2g.20gb at 0:2 (GI 3, CI 0); destroy-ci 2g.20gb at 2:2 (GI 4, CI 0); destroy-gi 2g.20gb at 0:2 (GI 3); destroy-gi 2g.20gb at 2:2 (GI 4); create-gi 3g.40gb at 0:4; create-gi 3g.40gb at 4:4; create-ci 3g.40gb at 0:4; create-ci 3g.40gb at 4:4",
			instances: "3g.40gb@0:4 new, 3g.40gb@4:4 new",
			blocked:   "MIG-0-4-0: in use; the target has no 2g.20gb",
		},
		{
			name:      "busy instances the target still wants stay while the rest changes",
			have:      []in{{"1g.10gb", 0, 7, nil}, {"1g.10gb", 1, 8, nil}, {"2g.20gb", 4, 5, nil}},
			want:      map[string]int{"1g.10gb": 1, "3g.40gb": 1},
			inUse:     uuids("MIG-0-8-0"),
			ops:       "destroy-ci 1g.10gb at 0:1 (GI 7, CI 0); destroy-ci 2g.20gb at 4:2 (GI 5, CI 0); destroy-gi 1g.10gb at 0:1 (GI 7); destroy-gi 2g.20gb at 4:2 (GI 5); create-gi 3g.40gb at 4:4; create-ci 3g.40gb at 4:4",
			instances: "1g.10gb@1:1 kept gi=8 MIG-0-8-0, 3g.40gb@4:4 new",
		},
		{
			name:      "most instances kept: four 1g stay, the 3g goes to 4",
			have:      sevenSmall,
			want:      map[string]int{"3g.40gb": 1, "1g.10gb": 4},
			ops:       "destroy-ci 1g.10gb at 4:1 (GI 11, CI 0); destroy-ci 1g.10gb at 5:1 (GI 12, CI 0); destroy-ci 1g.10gb at 6:1 (GI 13, CI 0); destroy-gi 1g.10gb at 4:1 (GI 11); destroy-gi 1g.10gb at 5:1 (GI 12); destroy-gi 1g.10gb at 6:1 (GI 13); create-gi 3g.40gb at 4:4; create-ci 3g.40gb at 4:4",
			instances: "1g.10gb@0:1 kept gi=7 MIG-0-7-0, 1g.10gb@1:1 kept gi=8 MIG-0-8-0, 1g.10gb@2:1 kept gi=9 MIG-0-9-0, 1g.10gb@3:1 kept gi=10 MIG-0-10-0, 3g.40gb@4:4 new",
		},
		{
			name:      "ties keep the lower instances",
			have:      sevenSmall,
			want:      map[string]int{"3g.40gb": 1, "1g.10gb": 3},
			ops:       "destroy-ci 1g.10gb at 3:1 (GI 10, CI 0); destroy-ci 1g.10gb at 4:1 (GI 11, CI 0); destroy-ci 1g.10gb at 5:1 (GI 12, CI 0); destroy-ci 1g.10gb at 6:1 (GI 13, CI 0); destroy-gi 1g.10gb at 3:1 (GI 10); destroy-gi 1g.10gb at 4:1 (GI 11); destroy-gi 1g.10gb at 5:1 (GI 12); destroy-gi 1g.10gb at 6:1 (GI 13); create-gi 3g.40gb at 4:4; create-ci 3g.40gb at 4:4",
			instances: "1g.10gb@0:1 kept gi=7 MIG-0-7-0, 1g.10gb@1:1 kept gi=8 MIG-0-8-0, 1g.10gb@2:1 kept gi=9 MIG-0-9-0, 3g.40gb@4:4 new",
		},
		{
			name:      "a busy instance steers which ones are kept",
			have:      sevenSmall,
			want:      map[string]int{"3g.40gb": 1, "1g.10gb": 3},
			inUse:     uuids("MIG-0-12-0"),
			ops:       "destroy-ci 1g.10gb at 0:1 (GI 7, CI 0); destroy-ci 1g.10gb at 1:1 (GI 8, CI 0); destroy-ci 1g.10gb at 2:1 (GI 9, CI 0); destroy-ci 1g.10gb at 3:1 (GI 10, CI 0); destroy-gi 1g.10gb at 0:1 (GI 7); destroy-gi 1g.10gb at 1:1 (GI 8); destroy-gi 1g.10gb at 2:1 (GI 9); destroy-gi 1g.10gb at 3:1 (GI 10); create-gi 3g.40gb at 0:4; create-ci 3g.40gb at 0:4",
			instances: "3g.40gb@0:4 new, 1g.10gb@4:1 kept gi=11 MIG-0-11-0, 1g.10gb@5:1 kept gi=12 MIG-0-12-0, 1g.10gb@6:1 kept gi=13 MIG-0-13-0",
		},
		{
			name:      "more busy instances than wanted: the extra one blocks",
			have:      []in{{"1g.10gb", 0, 7, nil}, {"1g.10gb", 1, 8, nil}, {"1g.10gb", 2, 9, nil}},
			want:      map[string]int{"1g.10gb": 2},
			inUse:     uuids("MIG-0-7-0", "MIG-0-8-0", "MIG-0-9-0"),
			ops:       "destroy-ci 1g.10gb at 2:1 (GI 9, CI 0); destroy-gi 1g.10gb at 2:1 (GI 9)",
			instances: "1g.10gb@0:1 kept gi=7 MIG-0-7-0, 1g.10gb@1:1 kept gi=8 MIG-0-8-0",
			blocked:   "MIG-0-9-0: in use; the target wants 2 1g.10gb and keeps 2 others",
		},
		{
			name:      "4g must sit at 0: the 2g there go, the 2g at 4 stays",
			have:      []in{{"2g.20gb", 0, 3, nil}, {"2g.20gb", 2, 4, nil}, {"2g.20gb", 4, 5, nil}},
			want:      map[string]int{"4g.40gb": 1, "2g.20gb": 1},
			ops:       "destroy-ci 2g.20gb at 0:2 (GI 3, CI 0); destroy-ci 2g.20gb at 2:2 (GI 4, CI 0); destroy-gi 2g.20gb at 0:2 (GI 3); destroy-gi 2g.20gb at 2:2 (GI 4); create-gi 4g.40gb at 0:4; create-ci 4g.40gb at 0:4",
			instances: "4g.40gb@0:4 new, 2g.20gb@4:2 kept gi=5 MIG-0-5-0",
		},
		{
			name:      "a GI without CI is repaired, not re-made",
			have:      []in{{"3g.40gb", 0, 1, nil}, {"3g.40gb", 4, 2, noCI}},
			want:      map[string]int{"3g.40gb": 2},
			ops:       "create-ci 3g.40gb at 4:4 (GI 2)",
			instances: "3g.40gb@0:4 kept gi=1 MIG-0-1-0, 3g.40gb@4:4 repair gi=2",
		},
		{
			name:      "a GI with a partial CI gets the full one",
			have:      []in{{"3g.40gb", 0, 1, []int{1, 1}}, {"3g.40gb", 4, 2, nil}},
			want:      map[string]int{"3g.40gb": 2},
			ops:       "destroy-ci 3g.40gb at 0:4 (GI 1, CI 0); destroy-ci 3g.40gb at 0:4 (GI 1, CI 1); create-ci 3g.40gb at 0:4 (GI 1)",
			instances: "3g.40gb@0:4 repair gi=1, 3g.40gb@4:4 kept gi=2 MIG-0-2-0",
		},
		{
			name:      "an incomplete GI of an unwanted profile goes",
			have:      []in{{"2g.20gb", 0, 3, noCI}},
			want:      map[string]int{"3g.40gb": 1},
			ops:       "destroy-gi 2g.20gb at 0:2 (GI 3); create-gi 3g.40gb at 0:4; create-ci 3g.40gb at 0:4",
			instances: "3g.40gb@0:4 new",
		},
		{
			name:      "a complete instance is kept rather than an incomplete one",
			have:      []in{{"1g.10gb", 0, 7, noCI}, {"1g.10gb", 1, 8, nil}},
			want:      map[string]int{"1g.10gb": 1},
			ops:       "destroy-gi 1g.10gb at 0:1 (GI 7)",
			instances: "1g.10gb@1:1 kept gi=8 MIG-0-8-0",
		},
		{
			name:      "repairing a busy partial instance blocks",
			have:      []in{{"3g.40gb", 0, 1, []int{1}}},
			want:      map[string]int{"3g.40gb": 1},
			inUse:     uuids("MIG-0-1-0"),
			ops:       "destroy-ci 3g.40gb at 0:4 (GI 1, CI 0); create-ci 3g.40gb at 0:4 (GI 1)",
			instances: "3g.40gb@0:4 repair gi=1",
			blocked:   "MIG-0-1-0: in use; its GPU instance is incomplete",
		},
		{
			name:      "empty target destroys everything, MIG stays on",
			have:      []in{{"4g.40gb", 0, 1, nil}, {"3g.40gb", 4, 2, noCI}},
			want:      map[string]int{},
			ops:       "destroy-ci 4g.40gb at 0:4 (GI 1, CI 0); destroy-gi 4g.40gb at 0:4 (GI 1); destroy-gi 3g.40gb at 4:4 (GI 2)",
			instances: "",
		},
		{
			name:      "a GPU UUID in use does not block changes inside MIG mode",
			have:      []in{{"7g.80gb", 0, 0, nil}},
			want:      map[string]int{"7g.80gb": 1},
			inUse:     uuids("GPU-0"),
			ops:       "",
			instances: "7g.80gb@0:8 kept gi=0 MIG-0-0-0",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := mkGPU(t, m, 0, tc.have...)
			p, err := partition.PlanGPU(g, m, partition.Target{MIG: tc.want}, tc.inUse)
			if err != nil {
				t.Fatalf("PlanGPU: %v", err)
			}
			ops := p.Ops
			if tc.blocked != "" {
				if len(p.Ops) != 0 {
					t.Errorf("blocked plan has ops: %s", opsText(p.Ops))
				}
				if !strings.Contains(blockedText(p.Blocked), tc.blocked) {
					t.Errorf("blocked\n got %s\nwant %s", blockedText(p.Blocked), tc.blocked)
				}
				ops = p.WouldDo
			} else if len(p.Blocked) > 0 || len(p.WouldDo) > 0 {
				t.Errorf("unexpected blockers %s / would do %s", blockedText(p.Blocked), opsText(p.WouldDo))
			}
			if got := opsText(ops); got != tc.ops {
				t.Errorf("ops\n got %s\nwant %s", got, tc.ops)
			}
			if got := instancesText(p.Instances); got != tc.instances {
				t.Errorf("instances\n got %s\nwant %s", got, tc.instances)
			}
			if p.NeedsReset {
				t.Errorf("NeedsReset without a mode change")
			}
			if p.NoOp() != (tc.ops == "" && tc.blocked == "") {
				t.Errorf("NoOp() = %v", p.NoOp())
			}
			// Never an op on a busy device, blocked or not.
			for _, o := range p.Ops {
				if tc.inUse[o.UUID] {
					t.Errorf("op %s destroys a busy device", o)
				}
			}
		})
	}
}

// TestPlanGPUModes checks MIG mode changes, resets and their blocking.
func TestPlanGPUModes(t *testing.T) {
	m := mustModel(t, "A100-40GB")
	one := map[string]int{"1g.5gb": 1}
	type mode = partition.MIGMode
	on, off := partition.MIGEnabled, partition.MIGDisabled
	tests := []struct {
		name          string
		cur, pending  mode
		have          []in
		target        map[string]int
		inUse         map[string]bool
		ops           string
		reset         bool
		blocked       string
		mode, pendMod string
	}{
		{name: "whole GPU stays whole", cur: off, pending: off, target: nil, ops: ""},
		{name: "enable MIG: set, reset, create", cur: off, pending: off, target: one, reset: true,
			ops: "enable-mig; reset-gpu; create-gi 1g.5gb at 0:1; create-ci 1g.5gb at 0:1"},
		{name: "enable MIG with no instances", cur: off, pending: off, target: map[string]int{}, reset: true, ops: "enable-mig; reset-gpu"},
		{name: "pending already on: reset and create", cur: off, pending: on, target: one, reset: true,
			ops: "reset-gpu; create-gi 1g.5gb at 0:1; create-ci 1g.5gb at 0:1"},
		{name: "pending off on a MIG GPU that stays MIG: put it back, no reset", cur: on, pending: off, have: []in{{"1g.5gb", 0, 7, nil}}, target: one,
			ops: "enable-mig"},
		{name: "pending on on a whole GPU that stays whole: put it back", cur: off, pending: on, target: nil, ops: "disable-mig"},
		{name: "pending off while MIG stays on, and a change", cur: on, pending: off, have: []in{{"2g.10gb", 0, 3, nil}}, target: one,
			ops: "destroy-ci 2g.10gb at 0:2 (GI 3, CI 0); destroy-gi 2g.10gb at 0:2 (GI 3); enable-mig; create-gi 1g.5gb at 0:1; create-ci 1g.5gb at 0:1"},
		{name: "disable MIG: destroy all, set, reset", cur: on, pending: on, have: []in{{"1g.5gb", 0, 7, nil}, {"3g.20gb", 4, 2, noCI}}, target: nil, reset: true,
			ops: "destroy-ci 1g.5gb at 0:1 (GI 7, CI 0); destroy-gi 1g.5gb at 0:1 (GI 7); destroy-gi 3g.20gb at 4:4 (GI 2); disable-mig; reset-gpu"},
		{name: "disable MIG with the pending mode already off", cur: on, pending: off, target: nil, reset: true, ops: "reset-gpu"},
		{name: "GPU in use blocks enabling MIG", cur: off, pending: off, target: one, inUse: uuids("GPU-0"), reset: true,
			ops: "enable-mig; reset-gpu; create-gi 1g.5gb at 0:1; create-ci 1g.5gb at 0:1", blocked: "GPU-0: in use; enabling MIG resets the GPU"},
		{name: "MIG device in use blocks disabling MIG", cur: on, pending: on, have: []in{{"1g.5gb", 0, 7, nil}, {"1g.5gb", 1, 8, nil}}, target: nil, inUse: uuids("MIG-0-8-0"), reset: true,
			ops:     "destroy-ci 1g.5gb at 0:1 (GI 7, CI 0); destroy-ci 1g.5gb at 1:1 (GI 8, CI 0); destroy-gi 1g.5gb at 0:1 (GI 7); destroy-gi 1g.5gb at 1:1 (GI 8); disable-mig; reset-gpu",
			blocked: "MIG-0-8-0: in use; disabling MIG destroys every MIG instance and resets the GPU"},
		{name: "GPU in use does not block putting the pending mode back", cur: off, pending: on, target: nil, inUse: uuids("GPU-0"), ops: "disable-mig"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := mkGPU(t, m, 0, tc.have...)
			g.MIGMode, g.PendingMIGMode = tc.cur, tc.pending
			p, err := partition.PlanGPU(g, m, partition.Target{MIG: tc.target}, tc.inUse)
			if err != nil {
				t.Fatalf("PlanGPU: %v", err)
			}
			ops := p.Ops
			if tc.blocked != "" {
				if len(p.Ops) != 0 || !strings.Contains(blockedText(p.Blocked), tc.blocked) {
					t.Errorf("ops %q, blocked %q; want no ops, blocked %q", opsText(p.Ops), blockedText(p.Blocked), tc.blocked)
				}
				ops = p.WouldDo
			} else if len(p.Blocked) > 0 {
				t.Errorf("unexpected blockers %s", blockedText(p.Blocked))
			}
			if got := opsText(ops); got != tc.ops {
				t.Errorf("ops\n got %s\nwant %s", got, tc.ops)
			}
			if p.NeedsReset != tc.reset {
				t.Errorf("NeedsReset = %v, want %v", p.NeedsReset, tc.reset)
			}
			if p.Mode != tc.cur.String() || p.PendingMode != tc.pending.String() {
				t.Errorf("modes %s/%s, want %s/%s", p.Mode, p.PendingMode, tc.cur, tc.pending)
			}
		})
	}
}

func TestPlanGPUErrors(t *testing.T) {
	h100 := mustModel(t, "H100-80GB")
	whole := partition.GPU{Index: 3, UUID: "GPU-3", Product: "NVIDIA L4", Model: "L4-24GB"}
	tests := []struct {
		name   string
		g      partition.GPU
		m      partition.Model
		target map[string]int
		is     error
		words  string
	}{
		{name: "no MIG on the GPU", g: whole, target: map[string]int{}, is: partition.ErrNotSupported, words: "GPU 3 (L4-24GB): the target asks for MIG instances but the GPU cannot do MIG"},
		{name: "infeasible target", g: mkGPU(t, h100, 3), m: h100, target: map[string]int{"1g.10gb": 8}, is: partition.ErrCannotPlace, words: "GPU 3 (H100-80GB): 1g.10gb x8: at most 7 fit on H100-80GB"},
		{name: "infeasible target on a whole GPU", g: func() partition.GPU {
			g := mkGPU(t, h100, 3)
			g.MIGMode, g.PendingMIGMode = partition.MIGDisabled, partition.MIGDisabled
			return g
		}(), m: h100, target: map[string]int{"3g.40gb": 2, "1g.10gb": 1}, is: partition.ErrCannotPlace, words: "3g.40gb x2 cover all 8 memory slices, leaving none for 1g.10gb x1"},
		{name: "no geometry", g: mkGPU(t, h100, 3), target: map[string]int{"1g.10gb": 1}, is: partition.ErrCannotPlace, words: "no MIG geometry known"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := partition.PlanGPU(tc.g, tc.m, partition.Target{MIG: tc.target}, nil)
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.words) {
				t.Fatalf("error %v, want one wrapping %v with %q", err, tc.is, tc.words)
			}
		})
	}
	p, err := partition.PlanGPU(whole, partition.Model{}, partition.Target{}, nil)
	if err != nil || !p.NoOp() || p.Mode != "unsupported" {
		t.Errorf("whole GPU without MIG: %+v, %v", p, err)
	}
}

func TestPlanGPUUnknownInstanceGoes(t *testing.T) {
	m := mustModel(t, "H100-80GB")
	g := mkGPU(t, m, 0, in{"1g.10gb", 0, 7, nil})
	g.Instances[0].ProfileID, g.Instances[0].Profile = 99, "profile-99"
	p, err := partition.PlanGPU(g, m, partition.Target{MIG: map[string]int{"1g.10gb": 1}}, uuids("MIG-0-7-0"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(blockedText(p.Blocked), "its profile (ID 99) is unknown to H100-80GB") {
		t.Errorf("blocked: %s", blockedText(p.Blocked))
	}
	if want := "destroy-ci profile-99 at 0:1 (GI 7, CI 0); destroy-gi profile-99 at 0:1 (GI 7); create-gi 1g.10gb at 0:1; create-ci 1g.10gb at 0:1"; opsText(p.WouldDo) != want {
		t.Errorf("would do\n got %s\nwant %s", opsText(p.WouldDo), want)
	}
}

func TestPlanNode(t *testing.T) {
	m := mustModel(t, "H100-80GB")
	g0 := mkGPU(t, m, 0, in{"7g.80gb", 0, 0, nil})
	g1 := mkGPU(t, m, 1)
	g1.MIGMode, g1.PendingMIGMode = partition.MIGDisabled, partition.MIGDisabled
	g2 := mkGPU(t, m, 2, in{"3g.40gb", 0, 1, nil})
	models := map[int]partition.Model{0: m, 1: m, 2: m}

	// Given out of order; GPU 1 has no target and stays whole; GPU 2's
	// target cannot be placed.
	plan, err := partition.PlanNode([]partition.GPU{g2, g0, g1}, models,
		map[int]partition.Target{0: {MIG: map[string]int{"7g.80gb": 1}}, 2: {MIG: map[string]int{"4g.40gb": 2}}}, nil)
	if !errors.Is(err, partition.ErrCannotPlace) || !strings.Contains(err.Error(), "GPU 2 (H100-80GB): 4g.40gb x2: at most 1 fits") {
		t.Fatalf("error %v, want GPU 2's placement error", err)
	}
	if diff := cmp.Diff([]int{0, 1}, planIndices(plan)); diff != "" {
		t.Fatalf("plans for GPUs (-want +got):\n%s", diff)
	}
	if !plan.NoOp() || plan.NeedsReset() || plan.IsBlocked() {
		t.Errorf("GPUs 0 and 1 are as wanted: NoOp %v, NeedsReset %v, IsBlocked %v", plan.NoOp(), plan.NeedsReset(), plan.IsBlocked())
	}

	plan, err = partition.PlanNode([]partition.GPU{g0, g1, g2}, models,
		map[int]partition.Target{1: {MIG: map[string]int{}}, 2: {MIG: map[string]int{"3g.40gb": 1}}, 7: {}}, uuids("GPU-1"))
	if err == nil || !strings.Contains(err.Error(), "GPU 7: target given for a GPU the node does not have") {
		t.Fatalf("error %v, want one about GPU 7", err)
	}
	if len(plan.GPUs) != 3 {
		t.Fatalf("%d plans, want 3", len(plan.GPUs))
	}
	if got := opsText(plan.GPUs[0].Ops); !strings.Contains(got, "disable-mig; reset-gpu") {
		t.Errorf("GPU 0 without target should become whole: %s", got)
	}
	if !plan.GPUs[1].IsBlocked() || !plan.IsBlocked() || !plan.NeedsReset() || plan.NoOp() {
		t.Errorf("GPU 1 is in use and needs a reset: %+v", plan.GPUs[1])
	}
	if !plan.GPUs[2].NoOp() {
		t.Errorf("GPU 2 is as wanted: %s", opsText(plan.GPUs[2].Ops))
	}
}

// TestGPUPlanJSON pins the field names of the plan payload
// (docs/plan-schema.md).
func TestGPUPlanJSON(t *testing.T) {
	m := mustModel(t, "H100-80GB")
	g := mkGPU(t, m, 0, in{"3g.40gb", 0, 1, nil}, in{"3g.40gb", 4, 2, nil})
	p, err := partition.PlanGPU(g, m, partition.Target{MIG: map[string]int{"3g.40gb": 1, "1g.10gb": 4}}, uuids("MIG-0-1-0"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"index":0`, `"uuid":"GPU-0"`, `"model":"H100-80GB"`, `"mode":"enabled"`, `"pendingMode":"enabled"`,
		`"target":{"mig":{"1g.10gb":4,"3g.40gb":1}}`,
		`{"profile":"3g.40gb","profileID":2,"placement":{"start":4,"size":4},"status":"kept","giID":2,"uuid":"MIG-0-2-0"}`,
		`{"profile":"1g.10gb","profileID":0,"placement":{"start":0,"size":1},"status":"new","giID":-1}`,
		`"ops":[]`,
		`"blocked":[{"uuid":"MIG-0-1-0","profile":"3g.40gb","placement":{"start":0,"size":4},"giID":1,"reason":"in use; at 0:4`,
		`"wouldDo":[{"kind":"destroy-ci","profile":"3g.40gb","profileID":2,"placement":{"start":0,"size":4},"giID":1,"ciID":0,"uuid":"MIG-0-1-0"}`,
		`{"kind":"create-gi","profile":"1g.10gb","profileID":0,"placement":{"start":0,"size":1},"giID":-1,"ciID":-1}`,
		`"needsReset":false`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON lacks %s\n%s", want, b)
		}
	}
	// MIG off is a null target; GPU-wide ops carry no profile or placement.
	g.MIGMode, g.PendingMIGMode = partition.MIGDisabled, partition.MIGDisabled
	g.Instances = nil
	p, _ = partition.PlanGPU(g, m, partition.Target{}, nil)
	b, err = json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"target":{"mig":null}`) || !strings.Contains(string(b), `"instances":[],"ops":[]`) {
		t.Errorf("whole GPU JSON: %s", b)
	}
	var back partition.GPUPlan
	if err := json.Unmarshal(b, &back); err != nil || back.Target.MIGEnabled() {
		t.Errorf("round trip: %+v, %v", back, err)
	}
	op, err := json.Marshal(partition.GPUPlan{Ops: []partition.Op{{Kind: partition.OpResetGPU, ProfileID: -1, GIID: -1, CIID: -1}}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(op), `{"kind":"reset-gpu","profileID":-1,"giID":-1,"ciID":-1}`) {
		t.Errorf("GPU-wide op JSON: %s", op)
	}
}

// Kept-instance classes, in the planner's order of preference: instances in
// use, then complete ones, then incomplete GPU instances.
const (
	classBusy = iota
	classComplete
	classIncomplete
)

// keepClass returns the class of an existing instance.
func keepClass(x partition.Instance, inUse map[string]bool) int {
	for _, ci := range x.CIs {
		if inUse[ci.UUID] {
			return classBusy
		}
	}
	if x.Complete() {
		return classComplete
	}
	return classIncomplete
}

// bestKept finds, the dumb way, the best set of existing instances that can
// stay while the rest of want is placed around them: every subset is
// checked by the brute force with the subset's slices taken, and scored by
// how many instances of each class it keeps; the lexicographically highest
// score wins (so, with nothing in use and every instance complete, its
// classComplete entry is the most instances that can stay).
func bestKept(m partition.Model, have []partition.Instance, inUse map[string]bool, want map[string]int) [3]int {
	var best [3]int
	for mask := range 1 << len(have) {
		left := maps.Clone(want)
		used := make([]bool, m.MemorySlices)
		var score [3]int
		ok := true
		for i, x := range have {
			if mask&(1<<i) == 0 {
				continue
			}
			left[x.Profile]--
			if left[x.Profile] < 0 {
				ok = false
			}
			for s := x.Placement.Start; s < x.Placement.End(); s++ {
				ok = ok && !used[s]
				used[s] = true
			}
			score[keepClass(x, inUse)]++
		}
		if ok && slices.Compare(score[:], best[:]) > 0 && bruteForceAround(m, left, used) {
			best = score
		}
	}
	return best
}

// bruteForceAround reports whether the instances fit in the slices not yet
// used, trying every placement of each (no limits checked: bruteForce does
// that before calling it with nothing used).
func bruteForceAround(m partition.Model, counts map[string]int, used []bool) bool {
	var inst []partition.GIProfile
	for _, p := range m.Profiles {
		for range counts[p.Name] {
			inst = append(inst, p)
		}
	}
	var try func(i int) bool
	try = func(i int) bool {
		if i == len(inst) {
			return true
		}
		for _, pl := range inst[i].Placements {
			free := true
			for s := pl.Start; s < pl.End(); s++ {
				free = free && s < len(used) && !used[s]
			}
			if !free {
				continue
			}
			for s := pl.Start; s < pl.End(); s++ {
				used[s] = true
			}
			ok := try(i + 1)
			for s := pl.Start; s < pl.End(); s++ {
				used[s] = false
			}
			if ok {
				return true
			}
		}
		return false
	}
	return try(0)
}

// feasibleSets returns the multisets of m that fit, per the brute force.
func feasibleSets(m partition.Model) []map[string]int {
	var out []map[string]int
	for _, c := range multisets(m) {
		if bruteForce(m, c) {
			out = append(out, c)
		}
	}
	return out
}

// randomLayout places instances of random profiles at random valid
// placements of m, as the hardware allows them (placements of the profile,
// no overlap, at most MaxCount of a profile, the compute slices, one +me),
// with distinct random GI IDs. About one in eight has no compute instance
// and one in eight a partial one.
func randomLayout(rng *rand.Rand, m partition.Model) []in {
	var out []in
	var used uint64
	count := map[string]int{}
	compute, me := 0, 0
	ids := rng.Perm(14)
	for range 2 + rng.IntN(14) {
		p := m.Profiles[rng.IntN(len(m.Profiles))]
		at := p.Placements[rng.IntN(len(p.Placements))]
		mask := uint64(1)<<at.End() - uint64(1)<<at.Start
		if used&mask != 0 || count[p.Name] >= p.MaxCount || compute+p.ComputeSlices > m.ComputeSlices || (p.MediaExtensions && me > 0) {
			continue
		}
		used |= mask
		count[p.Name]++
		compute += p.ComputeSlices
		if p.MediaExtensions {
			me++
		}
		x := in{profile: p.Name, start: at.Start, giID: 1 + ids[len(out)]}
		switch rng.IntN(8) {
		case 0:
			x.cis = noCI
		case 1:
			if p.ComputeSlices > 1 {
				x.cis = []int{1 + rng.IntN(p.ComputeSlices-1)}
			}
		}
		out = append(out, x)
	}
	return out
}

// randomWant picks a feasible target: half the time any feasible set of
// the model, else the layout's own counts with some instances dropped and
// some feasible ones added, so that much of the layout can stay.
func randomWant(rng *rand.Rand, m partition.Model, sets []map[string]int, have []in) map[string]int {
	if rng.IntN(2) == 0 {
		return maps.Clone(sets[rng.IntN(len(sets))])
	}
	want := map[string]int{}
	for _, x := range have {
		if rng.IntN(3) != 0 {
			want[x.profile]++
		}
	}
	for range rng.IntN(4) {
		p := m.Profiles[rng.IntN(len(m.Profiles))]
		want[p.Name]++
		if !bruteForce(m, want) {
			want[p.Name]--
		}
	}
	maps.DeleteFunc(want, func(_ string, n int) bool { return n == 0 })
	return want
}

// layoutText writes a layout for failure messages: "3g.40gb@4 gi=2 cis=[3]".
func layoutText(have []in) string {
	s := make([]string, len(have))
	for i, x := range have {
		s[i] = fmt.Sprintf("%s@%d gi=%d", x.profile, x.start, x.giID)
		if x.cis != nil {
			s[i] += fmt.Sprintf(" cis=%v", x.cis)
		}
	}
	return strings.Join(s, ", ")
}

// TestPlanGPUKeepsMost plans seeded random transitions on several models:
// from a random valid layout (random profiles at random placements, some
// GPU instances incomplete, some in use) to a random feasible target. It
// checks the plan against a brute force: instances in use are never
// destroyed by the ops (a plan that must destroy one is blocked, naming
// exactly those devices); the kept set is the best possible (most in use,
// then most complete, then most incomplete instances kept); the final
// instances are a valid placement of the target; and the ops touch exactly
// the instances that go or are repaired.
func TestPlanGPUKeepsMost(t *testing.T) {
	tests := []struct {
		model string
		seed  uint64
		runs  int
	}{
		{"A100-40GB", 0xA100, 500},
		{"H100-80GB", 0x4100, 500},
		{"H200-141GB", 0x4200, 500},
		{"A30-24GB", 0xA30, 500},
	}
	for _, tc := range tests {
		t.Run(tc.model, func(t *testing.T) {
			m := mustModel(t, tc.model)
			sets := feasibleSets(m)
			// How often each situation came up, so the test cannot pass
			// by never meeting it.
			seen := map[string]int{}
			for run := range tc.runs {
				rng := rand.New(rand.NewPCG(tc.seed, uint64(run)))
				have := randomLayout(rng, m)
				want := randomWant(rng, m, sets, have)
				g := mkGPU(t, m, 0, have...)
				inUse := map[string]bool{}
				for _, x := range g.Instances {
					if len(x.CIs) > 0 && rng.IntN(3) == 0 {
						inUse[x.CIs[rng.IntN(len(x.CIs))].UUID] = true
					}
				}
				if rng.IntN(8) == 0 {
					inUse[g.UUID] = true // no matter inside MIG mode
				}
				checkKeepsMost(t, m, g, want, inUse, seen)
				if t.Failed() {
					t.Logf("seed rand.NewPCG(%#x, %d): layout %s; target %v; in use %v", tc.seed, run, layoutText(have), want, slices.Sorted(maps.Keys(inUse)))
					return
				}
			}
			for _, s := range []string{"busy kept", "blocked", "repair", "kept", "new", "no-op"} {
				if seen[s] == 0 {
					t.Errorf("no run had a plan with %s: the random layouts miss a case", s)
				}
			}
		})
	}
}

// checkKeepsMost plans g towards want and checks the plan (see
// TestPlanGPUKeepsMost), counting in seen what came up.
func checkKeepsMost(t *testing.T, m partition.Model, g partition.GPU, want map[string]int, inUse map[string]bool, seen map[string]int) {
	t.Helper()
	p, err := partition.PlanGPU(g, m, partition.Target{MIG: want}, inUse)
	if err != nil {
		t.Errorf("PlanGPU: %v", err)
		return
	}
	var final []partition.Slot
	for _, x := range p.Instances {
		final = append(final, partition.Slot{Profile: x.Profile, ProfileID: x.ProfileID, Placement: x.Placement})
	}
	checkSlots(t, m, want, final)

	existing := map[int]partition.Instance{}
	for _, x := range g.Instances {
		existing[x.GIID] = x
	}
	// What stays, as the plan says, checked against the existing instances.
	stays := map[int]partition.PlannedInstance{}
	var score [3]int
	for _, x := range p.Instances {
		if x.Status == partition.StatusNew {
			seen["new"]++
			continue
		}
		old, ok := existing[x.GIID]
		if _, twice := stays[x.GIID]; !ok || twice {
			t.Errorf("planned %s %s at %s names GI %d: none or twice", x.Status, x.Profile, x.Placement, x.GIID)
			continue
		}
		stays[x.GIID] = x
		if old.Profile != x.Profile || old.Placement != x.Placement {
			t.Errorf("GI %d is %s at %s, planned as %s at %s", x.GIID, old.Profile, old.Placement, x.Profile, x.Placement)
		}
		wantStatus := partition.StatusKept
		if !old.Complete() {
			wantStatus = partition.StatusRepair
		}
		if x.Status != wantStatus || x.UUID != old.UUID() {
			t.Errorf("GI %d: status %s, UUID %q; want %s, %q", x.GIID, x.Status, x.UUID, wantStatus, old.UUID())
		}
		score[keepClass(old, inUse)]++
		seen[string(x.Status)]++
	}
	if best := bestKept(m, g.Instances, inUse, want); score != best {
		t.Errorf("kept (in use, complete, incomplete) = %v, the best possible is %v", score, best)
	}

	// In-use devices of instances that go, or whose compute instances are
	// re-made, block the plan; nothing else does.
	var wantBlocked, wantDestroyGI, wantDestroyCI []string
	wantCreateGI, wantCreateCI := len(p.Instances)-len(stays), len(p.Instances)-len(stays)
	for _, x := range g.Instances {
		st, ok := stays[x.GIID]
		if ok && st.Status == partition.StatusKept {
			if keepClass(x, inUse) == classBusy {
				seen["busy kept"]++
			}
			continue
		}
		if !ok {
			wantDestroyGI = append(wantDestroyGI, fmt.Sprint(x.GIID))
		} else {
			wantCreateCI++
		}
		for _, ci := range x.CIs {
			wantDestroyCI = append(wantDestroyCI, fmt.Sprintf("%d/%d", x.GIID, ci.ID))
			if inUse[ci.UUID] {
				wantBlocked = append(wantBlocked, ci.UUID)
			}
		}
	}
	var gotBlocked []string
	for _, b := range p.Blocked {
		gotBlocked = append(gotBlocked, b.UUID)
	}
	slices.Sort(wantBlocked)
	slices.Sort(gotBlocked)
	if diff := cmp.Diff(wantBlocked, gotBlocked); diff != "" {
		t.Errorf("blocked devices (-want +got):\n%s", diff)
	}
	ops := p.Ops
	switch {
	case len(p.Blocked) > 0:
		seen["blocked"]++
		if len(p.Ops) > 0 {
			t.Errorf("blocked plan has ops: %s", opsText(p.Ops))
		}
		ops = p.WouldDo
	case len(p.WouldDo) > 0:
		t.Errorf("unblocked plan would do %s", opsText(p.WouldDo))
	}
	if len(ops) == 0 {
		seen["no-op"]++
	}

	// Never an op that destroys a device in use; the ops destroy exactly
	// what goes and create exactly what is new or repaired.
	for _, o := range p.Ops {
		if (o.Kind == partition.OpDestroyCI || o.Kind == partition.OpDestroyGI) && keepClass(existing[o.GIID], inUse) == classBusy {
			t.Errorf("op %s destroys an instance in use", o)
		}
	}
	var gotDestroyGI, gotDestroyCI []string
	gotCreateGI, gotCreateCI := 0, 0
	for _, o := range ops {
		if st, ok := stays[o.GIID]; ok && st.Status == partition.StatusKept {
			t.Errorf("op %s touches a kept instance", o)
		}
		switch o.Kind {
		case partition.OpDestroyGI:
			gotDestroyGI = append(gotDestroyGI, fmt.Sprint(o.GIID))
		case partition.OpDestroyCI:
			gotDestroyCI = append(gotDestroyCI, fmt.Sprintf("%d/%d", o.GIID, o.CIID))
		case partition.OpCreateGI:
			gotCreateGI++
		case partition.OpCreateCI:
			gotCreateCI++
		default:
			t.Errorf("unexpected op %s", o)
		}
	}
	slices.Sort(wantDestroyGI)
	slices.Sort(gotDestroyGI)
	slices.Sort(wantDestroyCI)
	slices.Sort(gotDestroyCI)
	if diff := cmp.Diff(wantDestroyGI, gotDestroyGI); diff != "" {
		t.Errorf("destroyed GPU instances (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantDestroyCI, gotDestroyCI); diff != "" {
		t.Errorf("destroyed compute instances (-want +got):\n%s", diff)
	}
	if gotCreateGI != wantCreateGI || gotCreateCI != wantCreateCI {
		t.Errorf("creates %d GIs and %d CIs, want %d and %d: %s", gotCreateGI, gotCreateCI, wantCreateGI, wantCreateCI, opsText(ops))
	}
	if t.Failed() {
		t.Logf("plan: %s; ops %s; blocked %s", instancesText(p.Instances), opsText(ops), blockedText(p.Blocked))
	}
}

// dgxTransition builds a dgx-h100 node (8x H100-80GB in MIG mode) with a
// different geometry on every GPU, and a "balanced" target for all of them
// that keeps some instances and re-makes others; two instances are in use.
func dgxTransition(b testing.TB) ([]partition.GPU, map[int]partition.Model, map[int]partition.Target, map[string]bool) {
	b.Helper()
	m := mustModel(b, "H100-80GB")
	have := [][]map[string]int{
		{{"1g.10gb": 7}}, {{"3g.40gb": 2}}, {{"4g.40gb": 1, "3g.40gb": 1}}, {{"2g.20gb": 3, "1g.10gb": 1}},
		{{"1g.10gb": 4, "3g.40gb": 1}}, {{"7g.80gb": 1}}, {{"1g.20gb": 4}}, {{"2g.20gb": 2, "1g.10gb": 3}},
	}
	var gpus []partition.GPU
	models := map[int]partition.Model{}
	targets := map[int]partition.Target{}
	for i, h := range have {
		slots, err := partition.Place(m, h[0])
		if err != nil {
			b.Fatal(err)
		}
		var ins []in
		for k, s := range slots {
			ins = append(ins, in{s.Profile, s.Placement.Start, k + 1, nil})
		}
		gpus = append(gpus, mkGPU(b, m, i, ins...))
		models[i] = m
		targets[i] = partition.Target{MIG: map[string]int{"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}
	}
	return gpus, models, targets, uuids(migUUID(0, 3, 0), migUUID(4, 5, 0))
}

// BenchmarkPlanNode plans a whole 8-GPU dgx-h100 geometry transition.
func BenchmarkPlanNode(b *testing.B) {
	gpus, models, targets, inUse := dgxTransition(b)
	plan, err := partition.PlanNode(gpus, models, targets, inUse)
	if err != nil || plan.NoOp() {
		b.Fatalf("plan %v, %v", plan.NoOp(), err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := partition.PlanNode(gpus, models, targets, inUse); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPlanNodeNoOp plans a node that is already as wanted, the
// agent's steady state.
func BenchmarkPlanNodeNoOp(b *testing.B) {
	gpus, models, targets, _ := dgxTransition(b)
	m := models[0]
	for i := range gpus {
		slots, err := partition.Place(m, targets[i].MIG)
		if err != nil {
			b.Fatal(err)
		}
		var ins []in
		for k, s := range slots {
			ins = append(ins, in{s.Profile, s.Placement.Start, k + 1, nil})
		}
		gpus[i] = mkGPU(b, m, i, ins...)
	}
	b.ReportAllocs()
	for b.Loop() {
		plan, err := partition.PlanNode(gpus, models, targets, nil)
		if err != nil || !plan.NoOp() {
			b.Fatal("not a no-op", err)
		}
	}
}

// BenchmarkPlace places one mixed set on an H100.
func BenchmarkPlace(b *testing.B) {
	m := mustModel(b, "H100-80GB")
	counts := map[string]int{"3g.40gb": 1, "1g.10gb": 4}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := partition.Place(m, counts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPlanGPUWorstCase plans the costliest single-GPU change found by
// planning every complete H100 layout to every target that fits (make bench,
// test/bench/planning): seven 1g instances, one of them +me, to a 4g, the
// +me and two 1g. Every one of the 2^7 kept sets is built and a few dozen
// are tried before one leaves room for the 4g.
func BenchmarkPlanGPUWorstCase(b *testing.B) {
	m := mustModel(b, "H100-80GB")
	g := mkGPU(b, m, 0, in{"1g.10gb", 0, 1, nil}, in{"1g.10gb+me", 1, 2, nil}, in{"1g.10gb", 2, 3, nil},
		in{"1g.10gb", 3, 4, nil}, in{"1g.10gb", 4, 5, nil}, in{"1g.10gb", 5, 6, nil}, in{"1g.10gb", 6, 7, nil})
	target := partition.Target{MIG: map[string]int{"4g.40gb": 1, "1g.10gb+me": 1, "1g.10gb": 2}}
	plan, err := partition.PlanGPU(g, m, target, nil)
	if err != nil || plan.NoOp() || plan.IsBlocked() {
		b.Fatalf("plan no-op %v, blocked %v, %v", plan.NoOp(), plan.IsBlocked(), err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := partition.PlanGPU(g, m, target, nil); err != nil {
			b.Fatal(err)
		}
	}
}
