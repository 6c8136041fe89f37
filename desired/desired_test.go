package desired

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/timeslice"
)

func wholeGPU(i int, uuid string) partition.GPU {
	return partition.GPU{Index: i, UUID: uuid, Product: "NVIDIA L4", MemoryMiB: 23034}
}

// TestFailRequestsFromProfile follows timeSlicing.failRequestsGreaterThanOne
// from a resolved profile to the advertised replicas (not to unshared
// devices), so the plugin can honour it.
func TestFailRequestsFromProfile(t *testing.T) {
	as := []configs.Assignment{
		{GPU: 0, Entry: 0, Replicas: 2, FailRequestsGreaterThanOne: true},
		{GPU: 1, Entry: 0, Replicas: 1, FailRequestsGreaterThanOne: true},
		{GPU: 2, Entry: 1, Replicas: 2},
	}
	res, err := timeslice.Expand([]partition.GPU{wholeGPU(0, "GPU-a"), wholeGPU(1, "GPU-b"), wholeGPU(2, "GPU-c")}, SharingFrom(as))
	if err != nil {
		t.Fatal(err)
	}
	// Every device of the three GPUs, by ID, with its flag: only GPU 0's
	// two replicas refuse more than one; GPU 1 is not shared.
	gpu := carvev1.GPUResource + " "
	want := map[string]bool{gpu + "GPU-a::0": true, gpu + "GPU-a::1": true, gpu + "GPU-b": false, gpu + "GPU-c::0": false, gpu + "GPU-c::1": false}
	got := map[string]bool{}
	for name, devs := range res {
		for _, d := range devs {
			got[name+" "+d.ID] = d.FailRequestsGreaterThanOne
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("devices and their FailRequestsGreaterThanOne (-want +got):\n%s", diff)
	}
}

const profiles = `version: v1
defaultProfile: full
profiles:
  full:
    - gpus: all
  mixed:
    - gpus: [0]
      mig: {3g.40gb: 2}
      timeSlicing: {replicas: {3g.40gb: 2}}
    - gpus: [1]
      timeSlicing: {replicas: 4}
  a100:
    - gpus: all
      model: A100-40GB
      mig: {1g.5gb: 7}
`

func TestForPlanResources(t *testing.T) {
	m, err := sim.New("h100-80gb*2")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Init(); err != nil {
		t.Fatal(err)
	}
	node, err := partition.ReadNode(m)
	if err != nil {
		t.Fatal(err)
	}
	f, err := configs.Parse([]byte(profiles))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := CheckFile(f, node); err != nil {
		t.Fatalf("CheckFile: %v", err)
	}
	// An A100-only profile on an H100 node selects no GPU: it is not
	// realisable there, rather than whole GPUs reported as done.
	if _, err := For(f, "a100", node); err == nil || !strings.Contains(err.Error(), "selects none of this node's GPUs (2 x H100-80GB): its entries are for model A100-40GB") {
		t.Fatalf("For(a100) on H100s = %v, want an error naming the GPUs and the entries' models", err)
	}
	if _, err := For(f, "nope", node); err == nil {
		t.Fatal("an unknown profile resolved")
	}
	want, err := For(f, "mixed", node)
	if err != nil {
		t.Fatal(err)
	}
	if want.Hash != f.ProfileHash("mixed") || want.Profile != "mixed" {
		t.Errorf("state names %s/%s, want mixed/%s", want.Profile, want.Hash, f.ProfileHash("mixed"))
	}
	if diff := cmp.Diff(map[int]partition.Target{0: {MIG: map[string]int{"3g.40gb": 2}}, 1: {}}, want.Targets); diff != "" {
		t.Errorf("targets (-want +got):\n%s", diff)
	}
	plan, err := want.Plan(node, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := want.Resources(node, plan)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int{"nvidia.com/mig-3g.40gb": 4, "nvidia.com/gpu": 4}, res.Counts()); diff != "" {
		t.Errorf("resources once planned (-want +got):\n%s", diff)
	}
}

// hybrid turns GPUs 2 and 3 of a node that holds 3g.40gb x2 on every GPU
// (static) into dynamic GPUs: one limited to two profiles, one with every
// profile of its model.
const hybrid = `version: v1
profiles:
  static:
    - gpus: all
      mig: {3g.40gb: 2}
  hybrid:
    - gpus: [0, 1]
      mig: {3g.40gb: 2}
    - gpus: [2]
      dynamic: {profiles: [3g.40gb, 1g.10gb]}
    - gpus: [3]
      dynamic: {}
`

// TestForDynamic: a dynamic GPU's target is MIG on with no instances, the
// state keeps the profiles its claims may be given, and a GPU turning
// dynamic has the instances it holds destroyed by the plan, nothing made.
func TestForDynamic(t *testing.T) {
	m, err := sim.New("h100-80gb*4")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Init(); err != nil {
		t.Fatal(err)
	}
	node, err := partition.ReadNode(m)
	if err != nil {
		t.Fatal(err)
	}
	f, err := configs.Parse([]byte(hybrid))
	if err != nil {
		t.Fatal(err)
	}
	static, err := For(f, "static", node)
	if err != nil {
		t.Fatal(err)
	}
	if static.Dynamic != nil || static.DynamicGPUs() != nil {
		t.Errorf("a static profile has dynamic GPUs %v", static.Dynamic)
	}
	plan, err := static.Plan(node, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, gp := range plan.GPUs {
		if err := (&partition.Applier{Lib: m}).Apply(t.Context(), gp); err != nil {
			t.Fatal(err)
		}
	}
	if node, err = partition.ReadNode(m); err != nil {
		t.Fatal(err)
	}

	want, err := For(f, "hybrid", node)
	if err != nil {
		t.Fatal(err)
	}
	two := map[string]int{"3g.40gb": 2}
	if diff := cmp.Diff(map[int]partition.Target{0: {MIG: two}, 1: {MIG: two}, 2: {MIG: map[string]int{}}, 3: {MIG: map[string]int{}}}, want.Targets); diff != "" {
		t.Errorf("targets (-want +got):\n%s", diff)
	}
	every := []string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}
	if diff := cmp.Diff(map[int][]string{2: {"3g.40gb", "1g.10gb"}, 3: every}, want.Dynamic); diff != "" {
		t.Errorf("dynamic GPUs and their profiles (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{2, 3}, want.DynamicGPUs()); diff != "" {
		t.Errorf("DynamicGPUs (-want +got):\n%s", diff)
	}
	plan, err = want.Plan(node, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[int][]partition.OpKind{}
	for _, gp := range plan.GPUs {
		for _, op := range gp.Ops {
			got[gp.Index] = append(got[gp.Index], op.Kind)
		}
	}
	destroyBoth := []partition.OpKind{partition.OpDestroyCI, partition.OpDestroyCI, partition.OpDestroyGI, partition.OpDestroyGI}
	if diff := cmp.Diff(map[int][]partition.OpKind{2: destroyBoth, 3: destroyBoth}, got); diff != "" {
		t.Errorf("ops of the change to hybrid (-want +got):\n%s", diff)
	}
	res, err := want.Resources(node, plan)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int{"nvidia.com/mig-3g.40gb": 4}, res.Counts()); diff != "" {
		t.Errorf("resources once planned (-want +got):\n%s", diff)
	}
}
