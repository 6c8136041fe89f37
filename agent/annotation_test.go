package agent

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/timeslice"
)

func TestGPURecordsAndSharingRoundTrip(t *testing.T) {
	mig := h100(1, "GPU-b")
	mig.MIGMode, mig.PendingMIGMode = partition.MIGEnabled, partition.MIGEnabled
	mig.Instances = []partition.Instance{
		migInstance(3, 4, 4, "3g.40gb", "MIG-3", 3, 40448),
		migInstance(1, 0, 1, "1g.10gb", "MIG-1", 1, 9984),
	}
	whole := h100(0, "GPU-a")
	whole.PendingMIGMode = partition.MIGEnabled
	gpus := []partition.GPU{mig, whole}
	sharing := map[int]timeslice.Sharing{
		0: {Replicas: 3, RenameShared: true, FailRequestsGreaterThanOne: true},
		1: {Replicas: 1, MIGReplicas: map[string]int{"1g.10gb": 2}},
	}
	res, err := timeslice.Expand(gpus, sharing)
	if err != nil {
		t.Fatal(err)
	}
	recs := GPURecords(gpus, res, sharing)
	const product, mem = "NVIDIA H100 80GB HBM3", 81559
	want := []carvev1.GPURecord{
		{Index: 0, UUID: "GPU-a", Model: "H100-80GB", Product: product, MemoryMiB: mem, MIGMode: "disabled", PendingMIGMode: "enabled",
			Replicas: 3, RenameShared: true, FailRequestsGreaterThanOne: true},
		{Index: 1, UUID: "GPU-b", Model: "H100-80GB", Product: product, MemoryMiB: mem, MIGMode: "enabled", Instances: []carvev1.InstanceRecord{
			{Profile: "1g.10gb", Placement: carvev1.Placement{Start: 0, Size: 1}, GIID: 1, UUID: "MIG-1", Replicas: 2,
				ComputeInstances: []carvev1.ComputeInstanceRecord{{ID: 0, ComputeSlices: 1, UUID: "MIG-1"}}},
			{Profile: "3g.40gb", Placement: carvev1.Placement{Start: 4, Size: 4}, GIID: 3, UUID: "MIG-3", Replicas: 1,
				ComputeInstances: []carvev1.ComputeInstanceRecord{{ID: 0, ComputeSlices: 3, UUID: "MIG-3"}}},
		}},
	}
	if diff := cmp.Diff(want, recs); diff != "" {
		t.Fatalf("GPURecords mismatch (-want +got):\n%s", diff)
	}
	// The sharing read back advertises the same devices.
	back, err := timeslice.Expand(gpus, SharingFromRecords(recs))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(res, back); diff != "" {
		t.Fatalf("resources from recovered sharing differ (-want +got):\n%s", diff)
	}
}

func TestPartitionEncodeStable(t *testing.T) {
	gpus := []carvev1.GPURecord{{Index: 0, UUID: "GPU-a", Model: "H100-80GB", MIGMode: "enabled", Instances: []carvev1.InstanceRecord{{Profile: "7g.80gb", GIID: 0, UUID: "MIG-x", Replicas: 1, Placement: carvev1.Placement{Size: 8}}}}}
	const gpusJSON = `"gpus":[{"index":0,"uuid":"GPU-a","model":"H100-80GB","migMode":"enabled","instances":[{"profile":"7g.80gb","placement":{"start":0,"size":8},"giID":0,"uuid":"MIG-x","replicas":1}]}]`
	tests := []struct {
		name string
		p    carvev1.NodeRecord
		want string
	}{
		{
			name: "nothing selected",
			p:    carvev1.NodeRecord{Profile: "balanced", ProfileHash: "abc", State: carvev1.StateSuccess, Generation: 3, LastTransition: "2026-01-02T03:04:05Z", GPUs: gpus},
			want: `{"profile":"balanced","profileHash":"abc","state":"success","generation":3,"lastTransition":"2026-01-02T03:04:05Z",` + gpusJSON + `}`,
		},
		{
			name: "selected by a label",
			p: carvev1.NodeRecord{Profile: "balanced", ProfileHash: "abc", Selected: &carvev1.SelectedProfile{Profile: "small", Source: "label"}, State: carvev1.StateDraining,
				Generation: 4, LastTransition: "2026-01-02T03:04:05Z", GPUs: gpus},
			want: `{"profile":"balanced","profileHash":"abc","selected":{"profile":"small","source":"label"},"state":"draining","generation":4,"lastTransition":"2026-01-02T03:04:05Z",` + gpusJSON + `}`,
		},
		{
			name: "selected by a window",
			p: carvev1.NodeRecord{Profile: "balanced", ProfileHash: "abc", Selected: &carvev1.SelectedProfile{Profile: "full", Source: "window", Window: "nightly"}, State: carvev1.StatePending,
				Generation: 5, LastTransition: "2026-01-02T03:04:05Z", GPUs: gpus},
			want: `{"profile":"balanced","profileHash":"abc","selected":{"profile":"full","source":"window","window":"nightly"},"state":"pending","generation":5,"lastTransition":"2026-01-02T03:04:05Z",` + gpusJSON + `}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := tt.p.Encode()
			if err != nil {
				t.Fatal(err)
			}
			if a != tt.want {
				t.Fatalf("Encode =\n%s\nwant\n%s", a, tt.want)
			}
			back, err := carvev1.DecodeNodeRecord(a)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.p, back); diff != "" {
				t.Fatalf("decoded record mismatch (-want +got):\n%s", diff)
			}
			b, _ := back.Encode()
			if a != b {
				t.Fatalf("decode+encode changed the bytes:\n%s\n%s", a, b)
			}
		})
	}
	if empty, _ := (carvev1.NodeRecord{}).Encode(); empty != `{"profile":"","profileHash":"","state":"","generation":0,"lastTransition":"","gpus":[]}` {
		t.Fatalf("empty record encodes as %s", empty)
	}
	if _, err := carvev1.DecodeNodeRecord("{not json"); err == nil {
		t.Fatal("carvev1.DecodeNodeRecord accepted bad JSON")
	}
}

func TestNext(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.FixedZone("X", 3600))
	t1 := t0.Add(time.Hour)
	base := carvev1.NodeRecord{Profile: "full", State: carvev1.StateSuccess, Selected: &carvev1.SelectedProfile{Profile: "full", Source: "default"}, GPUs: []carvev1.GPURecord{{Index: 0, UUID: "GPU-a"}}}
	changed := base
	changed.State = carvev1.StateDraining
	sameSelection := base
	sameSelection.Selected = &carvev1.SelectedProfile{Profile: "full", Source: "default"} // another pointer, same content
	otherSource := base
	otherSource.Selected = &carvev1.SelectedProfile{Profile: "full", Source: "label"}
	otherProfile := base
	otherProfile.Selected = &carvev1.SelectedProfile{Profile: "small", Source: "default"}
	otherWindow := base
	otherWindow.Selected = &carvev1.SelectedProfile{Profile: "full", Source: "window", Window: "nightly"}
	noSelection := base
	noSelection.Selected = nil
	prev := carvev1.Next(nil, base, t0)
	tests := []struct {
		name     string
		prev     *carvev1.NodeRecord
		next     carvev1.NodeRecord
		now      time.Time
		wantGen  int64
		wantTime string
	}{
		{"first record", nil, base, t0, 1, "2026-01-01T09:00:00Z"},
		{"same content keeps generation and time", &prev, base, t1, 1, "2026-01-01T09:00:00Z"},
		{"changed content bumps", &prev, changed, t1, 2, "2026-01-01T10:00:00Z"},
		{"same selection keeps generation and time", &prev, sameSelection, t1, 1, "2026-01-01T09:00:00Z"},
		{"selection source alone changed bumps", &prev, otherSource, t1, 2, "2026-01-01T10:00:00Z"},
		{"selected profile alone changed bumps", &prev, otherProfile, t1, 2, "2026-01-01T10:00:00Z"},
		{"window alone changed bumps", &prev, otherWindow, t1, 2, "2026-01-01T10:00:00Z"},
		{"selection gone bumps", &prev, noSelection, t1, 2, "2026-01-01T10:00:00Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := carvev1.Next(tt.prev, tt.next, tt.now)
			if got.Generation != tt.wantGen || got.LastTransition != tt.wantTime {
				t.Fatalf("Next = generation %d at %s, want %d at %s", got.Generation, got.LastTransition, tt.wantGen, tt.wantTime)
			}
		})
	}
}

func TestSelectedFrom(t *testing.T) {
	tests := []struct {
		name     string
		sel      configs.Selection
		pinLabel string
		want     *carvev1.SelectedProfile
	}{
		{"nothing selected", configs.Selection{Source: configs.SourceNone, Rule: -1}, "", nil},
		{"zero selection", configs.Selection{}, "", nil},
		{"default", configs.Selection{Profile: "full", Source: configs.SourceDefault, Rule: -1}, "", &carvev1.SelectedProfile{Profile: "full", Source: "default"}},
		{"rule", configs.Selection{Profile: "balanced", Source: configs.SourceRule, Rule: 2}, "", &carvev1.SelectedProfile{Profile: "balanced", Source: "rule"}},
		{"window", configs.Selection{Profile: "full", Source: configs.SourceWindow, Window: "nightly", Rule: -1}, "", &carvev1.SelectedProfile{Profile: "full", Source: "window", Window: "nightly"}},
		{"carve's own pin label is not recorded", configs.Selection{Profile: "full", Source: configs.SourceLabel, Rule: -1}, carvev1.LabelProfile,
			&carvev1.SelectedProfile{Profile: "full", Source: "label"}},
		{"another pin label is", configs.Selection{Profile: "all-1g.10gb", Source: configs.SourceLabel, Rule: -1}, carvev1.LabelMIGManagerConfig,
			&carvev1.SelectedProfile{Profile: "all-1g.10gb", Source: "label", PinLabel: carvev1.LabelMIGManagerConfig}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, SelectedFrom(tt.sel, tt.pinLabel)); diff != "" {
				t.Fatalf("SelectedFrom(%+v) mismatch (-want +got):\n%s", tt.sel, diff)
			}
		})
	}
}

// TestRecordFromNewerAgent: an agent that starts on a node whose record a
// newer agent wrote, with fields it does not know (a rollback, or the
// older side of a rolling upgrade), takes it as its previous record: the
// GPUs are left as they are, the same devices are advertised, the
// generation goes on, and the record it writes back is its own, without
// the fields it does not know (docs/versioning.md).
func TestRecordFromNewerAgent(t *testing.T) {
	h := newHarness(t, "h100-80gb*2")
	f := h.parse(testProfiles)
	first := h.reconcile(f, nil, "balanced")
	enc, err := first.Annotation.Encode()
	if err != nil {
		t.Fatal(err)
	}
	newer := strings.Replace(enc, `{"profile":`, `{"fromANewerAgent":{"x":[1]},"profile":`, 1)
	newer = strings.ReplaceAll(newer, `"giID":`, `"newerInstanceField":true,"giID":`)
	if !strings.Contains(newer, "newerInstanceField") {
		t.Fatalf("no instance in the record: %s", enc)
	}
	rec, err := carvev1.DecodeNodeRecord(newer)
	if err != nil {
		t.Fatalf("the newer record is refused: %v", err)
	}
	advertised := h.adv.counts()
	h.prev, h.adv = &rec, &fakeAdvertiser{}
	h.r = h.newReconciler()
	h.m.ResetOpLog()
	h.now = h.now.Add(time.Hour)
	second := h.reconcile(f, nil, "balanced")
	if ops := h.mutations(); len(ops) != 0 {
		t.Errorf("the agent touched the GPUs: %v", ops)
	}
	if diff := cmp.Diff(advertised, h.adv.counts()); diff != "" {
		t.Errorf("advertised (-before +after):\n%s", diff)
	}
	again, err := second.Annotation.Encode()
	if err != nil || again != enc {
		t.Errorf("record written back (%v):\n%s\nwant the agent's own:\n%s", err, again, enc)
	}
}

// TestRecordInUseWrittenWhenItChanges: the record lists the devices pods
// hold, with their pods, so that a plan can be previewed from it; a pass at
// rest with the same devices held writes the same record (nothing to
// patch), a pod that starts or ends changes it, and a kubelet that does not
// answer leaves the list as it was.
func TestRecordInUseWrittenWhenItChanges(t *testing.T) {
	h := newHarness(t, "h100-80gb*1")
	f := h.parse(testProfiles)
	first := h.reconcile(f, nil, "balanced").Annotation
	if diff := cmp.Diff(&carvev1.InUseRecord{Devices: []carvev1.DeviceInUse{}}, first.InUse); diff != "" {
		t.Fatalf("in use once applied (-want +got):\n%s", diff)
	}
	same := func(step string, want carvev1.NodeRecord) {
		t.Helper()
		got := h.reconcile(f, nil, "balanced").Annotation
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("%s: the record changed at rest (-before +after):\n%s", step, diff)
		}
	}
	same("at rest", first)
	busy := h.migUUID(0, "3g.40gb")
	h.inUse.hold(busy, "trainer")
	held := h.reconcile(f, nil, "balanced").Annotation
	wantHeld := &carvev1.InUseRecord{Devices: []carvev1.DeviceInUse{{UUID: busy, Pods: []string{"default/trainer"}}}}
	if diff := cmp.Diff(wantHeld, held.InUse); diff != "" {
		t.Fatalf("in use once a pod holds %s (-want +got):\n%s", busy, diff)
	}
	if held.Generation != first.Generation+1 {
		t.Fatalf("generation %d after a pod started, want %d", held.Generation, first.Generation+1)
	}
	same("at rest with a pod", held)
	h.inUse.err = errors.New("kubelet unreachable")
	same("kubelet unreachable", held)
	h.inUse.err = nil
	h.inUse.release(busy)
	if got := h.reconcile(f, nil, "balanced").Annotation; got.Generation != held.Generation+1 || len(got.InUse.Devices) != 0 {
		t.Fatalf("after the pod ended: generation %d in use %+v, want %d and none", got.Generation, got.InUse, held.Generation+1)
	}
}

// TestRecordApplying: an apply that failed part-way leaves its checkpoint,
// and the record says so (profile, ops done of ops) until the node is as
// wanted.
func TestRecordApplying(t *testing.T) {
	h := newHarness(t, "h100-80gb*1")
	f := h.parse(testProfiles)
	if a := h.reconcile(f, nil, "balanced").Annotation.Applying; a != nil {
		t.Fatalf("applying %+v after a complete apply, want nil", a)
	}
	if err := h.m.InjectFault(sim.Fault{Call: "CreateGPUInstance", GPU: 0, Err: partition.ErrInsufficientResources, Times: 1}); err != nil {
		t.Fatal(err)
	}
	res := h.reconcile(f, nil, "small")
	a := res.Annotation.Applying
	if res.State != carvev1.StateFailed || a == nil {
		t.Fatalf("the failing apply: state %s, applying %+v; want failed and an unfinished apply", res.State, a)
	}
	if a.Profile != "small" || a.OpsDone == 0 || a.OpsDone >= a.Ops || a.Started == "" {
		t.Errorf("applying %+v, want profile small, some of its ops done, a start", a)
	}
	if a := h.reconcile(f, nil, "small").Annotation.Applying; a != nil {
		t.Errorf("applying %+v once the node is as wanted, want nil", a)
	}
}
