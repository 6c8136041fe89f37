package partition_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/validation"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/partition"
)

// allOpKinds lists every OpKind of the planner and its public form.
var allOpKinds = map[partition.OpKind]carvev1.OpKind{
	partition.OpDestroyCI:  carvev1.OpDestroyCI,
	partition.OpDestroyGI:  carvev1.OpDestroyGI,
	partition.OpEnableMIG:  carvev1.OpEnableMIG,
	partition.OpDisableMIG: carvev1.OpDisableMIG,
	partition.OpResetGPU:   carvev1.OpResetGPU,
	partition.OpCreateGI:   carvev1.OpCreateGI,
	partition.OpCreateCI:   carvev1.OpCreateCI,
}

// fullPlan is a plan with every kind of op, instance status and blocker,
// a GPU going whole (nil MIG target), one going MIG with no instances
// (empty target) and one with nothing to do (nil lists).
func fullPlan() partition.NodePlan {
	gpuOp := func(k partition.OpKind) partition.Op {
		return partition.Op{Kind: k, ProfileID: -1, GIID: -1, CIID: -1}
	}
	at := partition.Placement{Start: 4, Size: 4}
	return partition.NodePlan{GPUs: []partition.GPUPlan{
		{Index: 0, UUID: "GPU-0", Model: "H100-80GB", Mode: "enabled", PendingMode: "enabled",
			Target: partition.Target{MIG: map[string]int{"3g.40gb": 1, "1g.10gb": 2}},
			Instances: []partition.PlannedInstance{
				{Profile: "1g.10gb", ProfileID: 19, Placement: partition.Placement{Start: 0, Size: 1}, Status: partition.StatusKept, GIID: 9, UUID: "MIG-9"},
				{Profile: "1g.10gb", ProfileID: 19, Placement: partition.Placement{Start: 1, Size: 1}, Status: partition.StatusRepair, GIID: 10},
				{Profile: "3g.40gb", ProfileID: 9, Placement: at, Status: partition.StatusNew, GIID: -1},
			},
			Ops: []partition.Op{
				{Kind: partition.OpDestroyCI, Profile: "2g.20gb", ProfileID: 14, Placement: at, GIID: 3, CIID: 0, UUID: "MIG-3"},
				{Kind: partition.OpDestroyGI, Profile: "2g.20gb", ProfileID: 14, Placement: at, GIID: 3, CIID: -1},
				{Kind: partition.OpCreateGI, Profile: "3g.40gb", ProfileID: 9, Placement: at, GIID: -1, CIID: -1},
				{Kind: partition.OpCreateCI, Profile: "3g.40gb", ProfileID: 9, Placement: at, GIID: -1, CIID: -1},
			}},
		{Index: 1, UUID: "GPU-1", Model: "A100-40GB", Mode: "disabled", PendingMode: "disabled",
			Target:    partition.Target{MIG: map[string]int{}},
			Instances: []partition.PlannedInstance{}, Ops: []partition.Op{},
			Blocked: []partition.Blocker{
				{UUID: "GPU-1", GIID: -1, Reason: "in use; enabling MIG resets the GPU"},
				{UUID: "MIG-7", Profile: "1g.5gb", Placement: partition.Placement{Start: 6, Size: 1}, GIID: 7, Reason: "in use"},
			},
			WouldDo: []partition.Op{gpuOp(partition.OpEnableMIG), gpuOp(partition.OpResetGPU)}, NeedsReset: true},
		{Index: 2, UUID: "GPU-2", Model: "H100-80GB", Mode: "enabled", PendingMode: "enabled",
			Instances: []partition.PlannedInstance{},
			Ops:       []partition.Op{gpuOp(partition.OpDisableMIG), gpuOp(partition.OpResetGPU)}, NeedsReset: true},
		{Index: 3, UUID: "GPU-3", Model: "L4-24GB", Mode: "unsupported", PendingMode: "unsupported"},
	}}
}

// TestV1RoundTrip: a plan converted to api/v1 and back is the same plan,
// nil and empty lists and maps kept apart, and both forms encode to the
// same JSON; the plan holds every kind of op.
func TestV1RoundTrip(t *testing.T) {
	plan := fullPlan()
	kinds := map[partition.OpKind]bool{}
	for _, g := range plan.GPUs {
		for _, op := range slices.Concat(g.Ops, g.WouldDo) {
			kinds[op.Kind] = true
		}
	}
	if len(kinds) != len(allOpKinds) {
		t.Fatalf("the plan has %d kinds of op, want all %d", len(kinds), len(allOpKinds))
	}
	v1 := partition.NodePlanToV1(plan)
	if diff := cmp.Diff(plan, partition.NodePlanFromV1(v1)); diff != "" {
		t.Errorf("plan changes through api/v1 (-before +after):\n%s", diff)
	}
	want, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(v1)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("api/v1's plan encodes differently (-partition +api/v1):\n%s", diff)
	}
	var zero partition.NodePlan
	if diff := cmp.Diff(zero, partition.NodePlanFromV1(partition.NodePlanToV1(zero))); diff != "" {
		t.Errorf("empty plan changes through api/v1 (-before +after):\n%s", diff)
	}
}

// TestV1OpKinds: each op kind converts to the api/v1 kind of the same
// value, and back.
func TestV1OpKinds(t *testing.T) {
	for k, want := range allOpKinds {
		plan := partition.NodePlan{GPUs: []partition.GPUPlan{{Ops: []partition.Op{{Kind: k}}}}}
		v1 := partition.NodePlanToV1(plan)
		if got := v1.GPUs[0].Ops[0].Kind; got != want || string(got) != string(k) {
			t.Errorf("%s converts to %s, want %s", k, got, want)
		}
		if back := partition.NodePlanFromV1(v1).GPUs[0].Ops[0].Kind; back != k {
			t.Errorf("%s converts back to %s", k, back)
		}
	}
}

// TestV1PlacementRoundTrip: a placement converts to api/v1 and back.
func TestV1PlacementRoundTrip(t *testing.T) {
	p := partition.Placement{Start: 3, Size: 2}
	if v1 := partition.PlacementToV1(p); v1 != (carvev1.Placement{Start: 3, Size: 2}) {
		t.Errorf("PlacementToV1(%v) = %+v", p, v1)
	}
	if back := partition.PlacementFromV1(partition.PlacementToV1(p)); back != p {
		t.Errorf("placement %v comes back as %v", p, back)
	}
}

// TestV1FieldsMatch: each planner type has the JSON fields of its api/v1
// counterpart, name, options and kind alike, so that a field added to the
// planner is added to the public form (and its conversion) too, or the
// test says so.
func TestV1FieldsMatch(t *testing.T) {
	pairs := []struct{ planner, public any }{
		{partition.NodePlan{}, carvev1.NodePlan{}},
		{partition.GPUPlan{}, carvev1.GPUPlan{}},
		{partition.Target{}, carvev1.Target{}},
		{partition.PlannedInstance{}, carvev1.PlannedInstance{}},
		{partition.Op{}, carvev1.Op{}},
		{partition.Blocker{}, carvev1.Blocker{}},
		{partition.Placement{}, carvev1.Placement{}},
	}
	for _, p := range pairs {
		want, got := jsonFields(reflect.TypeOf(p.planner)), jsonFields(reflect.TypeOf(p.public))
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%T and %T differ; add the field to both and to partition/apiv1.go (-partition +api/v1):\n%s",
				p.planner, p.public, diff)
		}
	}
}

// jsonFields maps each field of a struct to its JSON tag and the kind of
// its type.
func jsonFields(t reflect.Type) map[string]string {
	out := map[string]string{}
	for f := range t.Fields() {
		out[f.Name] = f.Tag.Get("json") + " " + f.Type.Kind().String()
	}
	return out
}

// Every profile name of the catalogue makes a valid resource name and
// label key, and no two profiles of a model share one.
func TestCatalogueNames(t *testing.T) {
	for _, m := range partition.Catalogue() {
		seen := map[string]string{}
		for _, p := range m.Profiles {
			for _, name := range []string{carvev1.ResourceName(p.Name, false), carvev1.ResourceName(p.Name, true), carvev1.MIGLabelKey(p.Name, carvev1.MIGLabelMemory)} {
				if errs := validation.IsQualifiedName(name); len(errs) > 0 {
					t.Errorf("%s %s: %q is invalid: %v", m.Key, p.Name, name, errs)
				}
			}
			if other, dup := seen[carvev1.MIGName(p.Name)]; dup {
				t.Errorf("%s: %s and %s are both %s", m.Key, other, p.Name, carvev1.MIGName(p.Name))
			}
			seen[carvev1.MIGName(p.Name)] = p.Name
		}
	}
}
