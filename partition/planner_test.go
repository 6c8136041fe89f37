package partition_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
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

// maxKeepable finds, the dumb way, the most existing instances that can stay
// while the rest of want is placed around them: every subset, largest
// first, checked by the brute force with the subset's slices taken.
func maxKeepable(m partition.Model, have []partition.Instance, want map[string]int) int {
	best := 0
	for mask := range 1 << len(have) {
		left := maps.Clone(want)
		used := make([]bool, m.MemorySlices)
		n, ok := 0, true
		for i, x := range have {
			if mask&(1<<i) == 0 {
				continue
			}
			left[x.Profile]--
			if left[x.Profile] < 0 {
				ok = false
			}
			for s := x.Placement.Start; s < x.Placement.End(); s++ {
				used[s] = true
			}
			n++
		}
		if ok && n > best && bruteForceAround(m, left, used) {
			best = n
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

// TestPlanGPUKeepsMost plans random A -> B transitions on every model and
// checks against a brute force that the plan keeps as many instances as
// possible, that the final instances are a valid placement of B, and that
// the ops touch exactly the instances that go.
func TestPlanGPUKeepsMost(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, m := range partition.Catalogue() {
		sets := feasibleSets(m)
		t.Run(m.Key, func(t *testing.T) {
			for range 300 {
				a, b := sets[rng.IntN(len(sets))], sets[rng.IntN(len(sets))]
				slots, err := partition.Place(m, a)
				if err != nil {
					t.Fatal(err)
				}
				var have []in
				for i, s := range slots {
					have = append(have, in{s.Profile, s.Placement.Start, 20 + i, nil})
				}
				g := mkGPU(t, m, 0, have...)
				p, err := partition.PlanGPU(g, m, partition.Target{MIG: b}, nil)
				if err != nil {
					t.Fatalf("%v -> %v: %v", a, b, err)
				}
				kept := map[int]bool{}
				var final []partition.Slot
				for _, x := range p.Instances {
					final = append(final, partition.Slot{Profile: x.Profile, ProfileID: x.ProfileID, Placement: x.Placement})
					if x.Status == partition.StatusKept {
						kept[x.GIID] = true
					}
				}
				checkSlots(t, m, b, final)
				if want := maxKeepable(m, g.Instances, b); len(kept) != want {
					t.Errorf("%v -> %v: kept %d, the most possible is %d", a, b, len(kept), want)
				}
				destroyed := map[int]bool{}
				for _, o := range p.Ops {
					switch o.Kind {
					case partition.OpDestroyGI:
						destroyed[o.GIID] = true
					case partition.OpCreateGI, partition.OpCreateCI, partition.OpDestroyCI:
					default:
						t.Errorf("unexpected op %s", o)
					}
					if kept[o.GIID] {
						t.Errorf("%v -> %v: op %s touches a kept instance", a, b, o)
					}
				}
				if len(destroyed)+len(kept) != len(g.Instances) {
					t.Errorf("%v -> %v: %d destroyed + %d kept != %d existing", a, b, len(destroyed), len(kept), len(g.Instances))
				}
			}
		})
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
