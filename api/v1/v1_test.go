package v1

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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
	}
	for _, tt := range tests {
		if got := ResourceName(tt.profile, tt.shared); got != tt.resource {
			t.Errorf("ResourceName(%q, %v) = %q, want %q", tt.profile, tt.shared, got, tt.resource)
		}
		if tt.profile == "" {
			continue
		}
		if got := MIGLabelKey(tt.profile, MIGLabelCount); got != tt.countLabel {
			t.Errorf("MIGLabelKey(%q) = %q, want %q", tt.profile, got, tt.countLabel)
		}
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
		{LabelProfile, false, false}, // the operator's pin
		{"nvidia.com/mig.config", false, true},
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
