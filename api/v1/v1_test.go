package v1

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestLabelValue(t *testing.T) {
	tests := []struct{ in, want string }{
		{"NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"},
		{"NVIDIA A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB"},
		{"(weird) name!", "weird-name"},
		{"", ""},
		{strings.Repeat("x", 62) + "-yz", strings.Repeat("x", 62)}, // cut to 63, then trimmed
	}
	for _, tt := range tests {
		if got := LabelValue(tt.in); got != tt.want {
			t.Errorf("LabelValue(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestNames(t *testing.T) {
	tests := []struct {
		profile              string
		shared               bool
		resource, countLabel string
	}{
		{"", false, "nvidia.com/gpu", ""},
		{"", true, "nvidia.com/gpu.shared", ""},
		{"1g.10gb", false, "nvidia.com/mig-1g.10gb", "nvidia.com/mig-1g.10gb.count"},
		{"1g.10gb+me", false, "nvidia.com/mig-1g.10gb.me", "nvidia.com/mig-1g.10gb.me.count"},
		{"3g.40gb", true, "nvidia.com/mig-3g.40gb.shared", "nvidia.com/mig-3g.40gb.count"},
		// NVIDIA's variants as its device plugin names them: "+" becomes
		// ".", "-me" stays.
		{"1g.24gb+me.all", false, "nvidia.com/mig-1g.24gb.me.all", "nvidia.com/mig-1g.24gb.me.all.count"},
		{"2g.48gb+me.all", true, "nvidia.com/mig-2g.48gb.me.all.shared", "nvidia.com/mig-2g.48gb.me.all.count"},
		{"1g.24gb-me", false, "nvidia.com/mig-1g.24gb-me", "nvidia.com/mig-1g.24gb-me.count"},
		{"2g.48gb-me", true, "nvidia.com/mig-2g.48gb-me.shared", "nvidia.com/mig-2g.48gb-me.count"},
		{"1g.24gb+gfx", false, "nvidia.com/mig-1g.24gb.gfx", "nvidia.com/mig-1g.24gb.gfx.count"},
		{"4g.96gb+gfx", false, "nvidia.com/mig-4g.96gb.gfx", "nvidia.com/mig-4g.96gb.gfx.count"},
		{"1g.23gb+me", false, "nvidia.com/mig-1g.23gb.me", "nvidia.com/mig-1g.23gb.me.count"},
		{"7g.269gb", false, "nvidia.com/mig-7g.269gb", "nvidia.com/mig-7g.269gb.count"},
	}
	for _, tt := range tests {
		got := ResourceName(tt.profile, tt.shared)
		if got != tt.resource {
			t.Errorf("ResourceName(%q, %v) = %q, want %q", tt.profile, tt.shared, got, tt.resource)
		}
		// Resource names and label keys must be qualified names to the
		// API server.
		if errs := validation.IsQualifiedName(got); len(errs) > 0 {
			t.Errorf("resource name %q is invalid: %v", got, errs)
		}
		if tt.profile == "" {
			continue
		}
		key := MIGLabelKey(tt.profile, MIGLabelCount)
		if key != tt.countLabel {
			t.Errorf("MIGLabelKey(%q) = %q, want %q", tt.profile, key, tt.countLabel)
		}
		for _, suffix := range migLabelSuffixes {
			if errs := validation.IsQualifiedName(MIGLabelKey(tt.profile, suffix)); len(errs) > 0 {
				t.Errorf("label key %q is invalid: %v", MIGLabelKey(tt.profile, suffix), errs)
			}
		}
	}
}

// migLabelSuffixes are the per-MIG-profile labels GPU feature discovery
// writes (internal/lm of NVIDIA's k8s-device-plugin).
var migLabelSuffixes = []string{
	MIGLabelCount, MIGLabelReplicas, MIGLabelMemory, MIGLabelProduct, MIGLabelSharingStrategy,
	MIGLabelSlicesGI, MIGLabelSlicesCI, MIGLabelMultiprocessors,
	MIGLabelCopyEngines, MIGLabelDecoders, MIGLabelEncoders, MIGLabelJPEGs, MIGLabelOFAs,
}

func TestMIGLabelKeys(t *testing.T) {
	var got []string
	for _, suffix := range migLabelSuffixes {
		got = append(got, MIGLabelKey("1g.10gb+me", suffix))
	}
	want := []string{
		"nvidia.com/mig-1g.10gb.me.count", "nvidia.com/mig-1g.10gb.me.replicas", "nvidia.com/mig-1g.10gb.me.memory",
		"nvidia.com/mig-1g.10gb.me.product", "nvidia.com/mig-1g.10gb.me.sharing-strategy",
		"nvidia.com/mig-1g.10gb.me.slices.gi", "nvidia.com/mig-1g.10gb.me.slices.ci", "nvidia.com/mig-1g.10gb.me.multiprocessors",
		"nvidia.com/mig-1g.10gb.me.engines.copy", "nvidia.com/mig-1g.10gb.me.engines.decoder", "nvidia.com/mig-1g.10gb.me.engines.encoder",
		"nvidia.com/mig-1g.10gb.me.engines.jpeg", "nvidia.com/mig-1g.10gb.me.engines.ofa",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("MIG label keys (-want +got):\n%s", diff)
	}
	rec := &NodeRecord{Labels: slices.Sorted(slices.Values(got))} // sorted, as the record keeps them
	for _, k := range got {
		if !MayWrite(k) || !Owns(rec, k) || Owns(&NodeRecord{}, k) {
			t.Errorf("%s: MayWrite %v, owned with the record %v, without %v", k, MayWrite(k), Owns(rec, k), Owns(&NodeRecord{}, k))
		}
	}
}

func TestProductLabel(t *testing.T) {
	tests := []struct {
		product, profile string
		shared           bool
		want             string
	}{
		{"NVIDIA H100 80GB HBM3", "", false, "NVIDIA-H100-80GB-HBM3"},
		{"NVIDIA H100 80GB HBM3", "", true, "NVIDIA-H100-80GB-HBM3-SHARED"},
		{"NVIDIA H100 80GB HBM3", "1g.10gb", false, "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"},
		{"NVIDIA H100 80GB HBM3", "1g.10gb+me", true, "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb.me-SHARED"},
		{"NVIDIA RTX PRO 6000 Blackwell Server Edition", "1g.24gb-me", false, "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition-MIG-1g.24gb-me"},
		{"NVIDIA A100-SXM4-40GB", "", false, "NVIDIA-A100-SXM4-40GB"},
		{"", "", true, ""},
	}
	for _, tt := range tests {
		got := ProductLabel(tt.product, tt.profile, tt.shared)
		if got != tt.want {
			t.Errorf("ProductLabel(%q, %q, %v) = %q, want %q", tt.product, tt.profile, tt.shared, got, tt.want)
		}
		if errs := validation.IsValidLabelValue(got); len(errs) > 0 {
			t.Errorf("%q is no label value: %v", got, errs)
		}
	}
}

func TestMIGManagerState(t *testing.T) {
	got := map[string]string{}
	for _, s := range append(States(), "other") {
		got[s] = MIGManagerState(s)
	}
	want := map[string]string{
		StateSuccess: "success", StateAdopted: "success", StatePending: "pending", StateDraining: "pending", StateApplying: "pending",
		StateFailed: "failed", StateRebootRequired: "rebooting", StateHeld: "pending", StateDriverUpgrade: "pending", "other": "",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("MIGManagerState (-want +got):\n%s", diff)
	}
}

func TestOwnsAndMayWrite(t *testing.T) {
	rec := &NodeRecord{Labels: []string{LabelGPUCount, "nvidia.com/mig-1g.10gb.count"}}
	tests := []struct {
		key            string
		owns, mayWrite bool
	}{
		{LabelApplied, true, true},
		{LabelSource, true, true},
		{LabelWindow, true, true},
		{LabelState, true, true},
		{LabelGPUCount, true, true},
		{"nvidia.com/mig-1g.10gb.count", true, true},
		{"nvidia.com/mig-7g.80gb.count", false, true}, // GPU feature discovery's
		{LabelGPUProduct, false, true},
		{LabelProfile, false, false},          // the operator's pin
		{LabelHold, false, false},             // the operator's hold
		{LabelMIGManagerConfig, false, false}, // the operator's, with --profile-label
		{LabelDriverUpgrade, false, false},    // the GPU Operator's upgrade controller's
		{LabelMIGManagerState, false, true},
		{"kubernetes.io/hostname", false, false},
		{"pool", false, false},
	}
	for _, tt := range tests {
		if got := Owns(rec, tt.key); got != tt.owns {
			t.Errorf("Owns(%q) = %v, want %v", tt.key, got, tt.owns)
		}
		if got := MayWrite(tt.key); got != tt.mayWrite {
			t.Errorf("MayWrite(%q) = %v, want %v", tt.key, got, tt.mayWrite)
		}
	}
	if Owns(nil, LabelGPUCount) {
		t.Errorf("without a record, %s is owned", LabelGPUCount)
	}
}

// Only "true" holds; any other value is invalid, to be reported.
func TestHeld(t *testing.T) {
	type got struct {
		Held, Invalid bool
	}
	tests := []struct {
		labels map[string]string
		want   got
	}{
		{nil, got{}},
		{map[string]string{LabelProfile: "small"}, got{}},
		{map[string]string{LabelHold: "true"}, got{Held: true}},
		{map[string]string{LabelHold: "True"}, got{Invalid: true}},
		{map[string]string{LabelHold: "yes"}, got{Invalid: true}},
		{map[string]string{LabelHold: ""}, got{Invalid: true}},
	}
	for _, tt := range tests {
		var g got
		g.Held, g.Invalid = Held(tt.labels)
		if diff := cmp.Diff(tt.want, g); diff != "" {
			t.Errorf("Held(%v) (-want +got):\n%s", tt.labels, diff)
		}
	}
}

// A hold outranks the states of a change under way, not a failure.
func TestStateRankOfHeld(t *testing.T) {
	for _, s := range []string{StateSuccess, StateApplying, StatePending, StateDraining} {
		if StateRank(StateHeld) <= StateRank(s) {
			t.Errorf("held ranks %d, not above %s (%d)", StateRank(StateHeld), s, StateRank(s))
		}
	}
	for _, s := range []string{StateFailed, StateRebootRequired} {
		if StateRank(StateHeld) >= StateRank(s) {
			t.Errorf("held ranks %d, not below %s (%d)", StateRank(StateHeld), s, StateRank(s))
		}
	}
}

// A driver being replaced outranks a hold and the states of a change, not
// a failure.
func TestStateRankOfDriverUpgrade(t *testing.T) {
	for _, s := range []string{StateSuccess, StateApplying, StatePending, StateDraining, StateHeld} {
		if StateRank(StateDriverUpgrade) <= StateRank(s) {
			t.Errorf("driver-upgrade ranks %d, not above %s (%d)", StateRank(StateDriverUpgrade), s, StateRank(s))
		}
	}
	for _, s := range []string{StateFailed, StateRebootRequired} {
		if StateRank(StateDriverUpgrade) >= StateRank(s) {
			t.Errorf("driver-upgrade ranks %d, not below %s (%d)", StateRank(StateDriverUpgrade), s, StateRank(s))
		}
	}
}

// The driver is being replaced from the deletion of the GPU pods to the
// restart of the driver pod, and at no other value of the label.
func TestDriverReplacing(t *testing.T) {
	got := map[string]bool{}
	for _, v := range []string{"", DriverUpgradeRequired, DriverCordonRequired, DriverWaitForJobsRequired, DriverPodDeletionRequired,
		DriverDrainRequired, DriverNodeMaintenanceRequired, DriverPostMaintenanceRequired, DriverPodRestartRequired,
		DriverValidationRequired, DriverUncordonRequired, DriverUpgradeDone, DriverUpgradeFailed, "something-new"} {
		got[v] = DriverReplacing(map[string]string{LabelDriverUpgrade: v})
	}
	got["(no label)"] = DriverReplacing(nil)
	want := map[string]bool{
		"": false, DriverUpgradeRequired: false, DriverCordonRequired: false, DriverWaitForJobsRequired: false,
		DriverPodDeletionRequired: true, DriverDrainRequired: true, DriverNodeMaintenanceRequired: true,
		DriverPostMaintenanceRequired: true, DriverPodRestartRequired: true,
		DriverValidationRequired: false, DriverUncordonRequired: false, DriverUpgradeDone: false, DriverUpgradeFailed: false,
		"something-new": false, "(no label)": false,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DriverReplacing (-want +got):\n%s", diff)
	}
}

func TestNodeRecordRoundTrip(t *testing.T) {
	rec := NodeRecord{Profile: "balanced", ProfileHash: "abc", State: StateSuccess, Generation: 3,
		LastTransition: "2026-01-02T03:04:05Z", Selected: &SelectedProfile{Profile: "balanced", Source: "label"},
		GPUs:   []GPURecord{{Index: 0, UUID: "GPU-0", Model: "H100-80GB", MIGMode: "enabled", Instances: []InstanceRecord{{Profile: "1g.10gb", GIID: 9, UUID: "MIG-0"}}}},
		Labels: []string{LabelApplied, LabelGPUCount}}
	enc, err := rec.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeNodeRecord(enc)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rec, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	now := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
	if same := Next(&got, rec, now); same.Generation != 3 || same.LastTransition != rec.LastTransition {
		t.Errorf("Next of the same content = generation %d at %s, want 3 unchanged", same.Generation, same.LastTransition)
	}
	changed := rec
	changed.Labels = []string{LabelApplied}
	if next := Next(&rec, changed, now); next.Generation != 4 || next.LastTransition != "2026-02-01T00:00:00Z" {
		t.Errorf("Next after a change = generation %d at %s, want 4 now", next.Generation, next.LastTransition)
	}
}

func TestCheckpointVersion(t *testing.T) {
	b, err := Checkpoint{Profile: "p", Done: map[int]int{0: 2, 3: 1}}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	cp, err := DecodeCheckpoint(b)
	if err != nil {
		t.Fatal(err)
	}
	if cp.Version != CheckpointVersion || cp.OpsDone() != 3 {
		t.Errorf("decoded version %d, ops done %d; want %d, 3", cp.Version, cp.OpsDone(), CheckpointVersion)
	}
	for _, bad := range []struct{ data, mention string }{
		{`{"version":2}`, "format version 2"},
		{`{"version":1,"profile":"p","opsTotal":1}`, `unknown field "opsTotal"`},
		{string(b) + `}`, "after the JSON object"},
		{string(b) + string(b), "after the JSON object"},
	} {
		if _, err := DecodeCheckpoint([]byte(bad.data)); err == nil || !strings.Contains(err.Error(), bad.mention) {
			t.Errorf("DecodeCheckpoint(%s): err %v, want one saying %q", bad.data, err, bad.mention)
		}
	}
}

// TestReadsConfigMap: a record names the file its agent reads; a missing,
// unreadable or other file's record does not.
func TestReadsConfigMap(t *testing.T) {
	raw, err := NodeRecord{State: StateSuccess, ConfigMap: "carve-system/carve-profiles"}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		want        bool
	}{
		{"this file", map[string]string{AnnotationRecord: raw}, true},
		{"no record", nil, false},
		{"unreadable record", map[string]string{AnnotationRecord: "{"}, false},
	} {
		if got := ReadsConfigMap(tc.annotations, "carve-system/carve-profiles"); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if ReadsConfigMap(map[string]string{AnnotationRecord: raw}, "carve-system/other") {
		t.Error("a record of another file reads this one")
	}
}
