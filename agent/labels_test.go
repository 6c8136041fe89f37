package agent

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/timeslice"
)

func TestOwned(t *testing.T) {
	tests := []struct {
		key  string
		want bool
	}{
		{LabelApplied, true},
		{LabelSource, true},
		{LabelWindow, true},
		{LabelState, true},
		{LabelGPUCount, true},
		{LabelGPUProduct, true},
		{LabelGPUMemory, true},
		{LabelGPUReplicas, true},
		{LabelSharingStrategy, true},
		{LabelMIGCapable, true},
		{LabelMIGStrategy, true},
		{"nvidia.com/mig-1g.10gb.count", true},
		{"nvidia.com/mig-1g.10gb.me.replicas", true},
		{"nvidia.com/mig-3g.40gb.memory", true},
		{"carve.dev/profile", false}, // the user's pin
		{"nvidia.com/gpu.family", false},
		{"nvidia.com/mig-1g.10gb.slices.gi", false},
		{"nvidia.com/mig-.count", false},
		{"nvidia.com/mig.config", false},
		{"kubernetes.io/hostname", false},
		{"pool", false},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			if got := Owned(tt.key); got != tt.want {
				t.Errorf("Owned(%q) = %v, want %v", tt.key, got, tt.want)
			}
		})
	}
}

func h100(index int, uuid string) partition.GPU {
	return partition.GPU{Index: index, UUID: uuid, Product: "NVIDIA H100 80GB HBM3", Model: "H100-80GB", MemoryMiB: 81559, MIGCapable: true}
}

func migInstance(giID, start, size int, profile, uuid string, slices int, mem uint64) partition.Instance {
	return partition.Instance{
		GIID: giID, Profile: profile, Placement: partition.Placement{Start: start, Size: size},
		ComputeSlices: slices, MemoryMiB: mem,
		CIs: []partition.ComputeInstance{{ID: 0, GIID: giID, ComputeSlices: slices, UUID: uuid}},
	}
}

func TestLabels(t *testing.T) {
	whole := []partition.GPU{h100(1, "GPU-b"), h100(0, "GPU-a")}
	migGPU := h100(0, "GPU-a")
	migGPU.MIGMode, migGPU.PendingMIGMode = partition.MIGEnabled, partition.MIGEnabled
	migGPU.Instances = []partition.Instance{
		migInstance(1, 0, 1, "1g.10gb", "MIG-1", 1, 9984),
		migInstance(2, 1, 1, "1g.10gb", "MIG-2", 1, 9984),
		migInstance(3, 4, 4, "3g.40gb", "MIG-3", 3, 40448),
		{GIID: 4, Profile: "1g.10gb+me", Placement: partition.Placement{Start: 2, Size: 1}, ComputeSlices: 1, MemoryMiB: 9984}, // incomplete
	}
	l4 := partition.GPU{Index: 0, UUID: "GPU-l4", Product: "NVIDIA L4", Model: "L4-24GB", MemoryMiB: 23034}
	expand := func(t *testing.T, gpus []partition.GPU, sh map[int]timeslice.Sharing) timeslice.Resources {
		t.Helper()
		res, err := timeslice.Expand(gpus, sh)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	tests := []struct {
		name    string
		in      func(t *testing.T) LabelInput
		want    map[string]string
		wantNot []string
	}{
		{
			name: "whole GPUs time-sliced, in a window",
			in: func(t *testing.T) LabelInput {
				return LabelInput{Applied: "shared-4", Source: "window", Window: "nightly", State: StateSuccess, GPUs: whole,
					Resources: expand(t, whole, map[int]timeslice.Sharing{0: {Replicas: 4}, 1: {Replicas: 4}})}
			},
			want: map[string]string{
				LabelApplied: "shared-4", LabelSource: "window", LabelWindow: "nightly", LabelState: "success",
				LabelGPUCount: "2", LabelGPUProduct: "NVIDIA-H100-80GB-HBM3", LabelGPUMemory: "81559",
				LabelGPUReplicas: "4", LabelSharingStrategy: "time-slicing",
				LabelMIGCapable: "true", LabelMIGStrategy: "mixed",
			},
		},
		{
			name: "MIG with per-profile replicas, outside windows",
			in: func(t *testing.T) LabelInput {
				gpus := []partition.GPU{migGPU}
				return LabelInput{Applied: "balanced", Source: "label", State: StatePending, GPUs: gpus,
					Resources: expand(t, gpus, map[int]timeslice.Sharing{0: {MIGReplicas: map[string]int{"1g.10gb": 2}}})}
			},
			want: map[string]string{
				LabelApplied: "balanced", LabelSource: "label", LabelState: "pending",
				LabelGPUCount: "1", LabelGPUProduct: "NVIDIA-H100-80GB-HBM3", LabelGPUMemory: "81559",
				LabelGPUReplicas: "1", LabelSharingStrategy: "time-slicing",
				LabelMIGCapable: "true", LabelMIGStrategy: "mixed",
				"nvidia.com/mig-1g.10gb.count": "2", "nvidia.com/mig-1g.10gb.replicas": "2", "nvidia.com/mig-1g.10gb.memory": "9984",
				"nvidia.com/mig-3g.40gb.count": "1", "nvidia.com/mig-3g.40gb.replicas": "1", "nvidia.com/mig-3g.40gb.memory": "40448",
			},
			wantNot: []string{LabelWindow, "nvidia.com/mig-1g.10gb.me.count"},
		},
		{
			name: "GPU without MIG, nothing applied",
			in: func(t *testing.T) LabelInput {
				gpus := []partition.GPU{l4}
				return LabelInput{State: StateFailed, GPUs: gpus, Resources: expand(t, gpus, nil)}
			},
			want: map[string]string{
				LabelState: "failed", LabelGPUCount: "1", LabelGPUProduct: "NVIDIA-L4", LabelGPUMemory: "23034",
				LabelGPUReplicas: "1", LabelSharingStrategy: "none", LabelMIGCapable: "false", LabelMIGStrategy: "mixed",
			},
			wantNot: []string{LabelApplied, LabelSource, LabelWindow},
		},
		{
			name: "no GPUs",
			in: func(t *testing.T) LabelInput {
				return LabelInput{Applied: "full", Source: "default", State: StateSuccess}
			},
			want: map[string]string{LabelApplied: "full", LabelSource: "default", LabelState: "success"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Labels(tt.in(t))
			if !maps.Equal(got, tt.want) {
				t.Errorf("Labels() =\n%v\nwant\n%v", got, tt.want)
			}
			for k := range got {
				if !Owned(k) {
					t.Errorf("label %s is not owned", k)
				}
			}
		})
	}
}

func TestLabelValue(t *testing.T) {
	tests := []struct{ in, want string }{
		{"NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"},
		{"NVIDIA A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB"},
		{"(weird) name!", "weird-name"},
		{"", ""},
		{strings.Repeat("x", 62) + "-yz", strings.Repeat("x", 62)}, // cut to 63, then trimmed
	}
	for _, tt := range tests {
		if got := labelValue(tt.in); got != tt.want {
			t.Errorf("labelValue(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestMetadataPatch(t *testing.T) {
	tests := []struct {
		name            string
		cur, want       map[string]string
		curAnn, wantAnn map[string]string
		wantPatch       string // "" for nil
		wantErr         bool
	}{
		{
			name:   "nothing changes",
			cur:    map[string]string{LabelState: "success", "pool": "a", "nvidia.com/mig-1g.10gb.count": "2"},
			want:   map[string]string{LabelState: "success", "nvidia.com/mig-1g.10gb.count": "2"},
			curAnn: map[string]string{AnnotationPartition: "{}", "other": "x"}, wantAnn: map[string]string{AnnotationPartition: "{}"},
		},
		{
			name:      "changed and stale owned labels, unowned untouched",
			cur:       map[string]string{LabelState: "applying", "pool": "a", "carve.dev/profile": "x", "nvidia.com/mig-3g.40gb.count": "1", "nvidia.com/gpu.family": "hopper"},
			want:      map[string]string{LabelState: "success", LabelApplied: "x"},
			wantPatch: `{"metadata":{"labels":{"carve.dev/profile.applied":"x","carve.dev/state":"success","nvidia.com/mig-3g.40gb.count":null}}}`,
		},
		{
			name:      "annotation only",
			cur:       map[string]string{LabelState: "success"},
			want:      map[string]string{LabelState: "success"},
			curAnn:    map[string]string{AnnotationPartition: `{"generation":1}`},
			wantAnn:   map[string]string{AnnotationPartition: `{"generation":2}`},
			wantPatch: `{"metadata":{"annotations":{"carve.dev/partition":"{\"generation\":2}"}}}`,
		},
		{
			name:    "unowned label wanted",
			want:    map[string]string{"pool": "b"},
			wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := MetadataPatch(tt.cur, tt.want, tt.curAnn, tt.wantAnn)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if tt.wantPatch == "" {
				if got != nil {
					t.Fatalf("patch = %s, want nil", got)
				}
				return
			}
			if string(got) != tt.wantPatch {
				t.Fatalf("patch =\n%s\nwant\n%s", got, tt.wantPatch)
			}
			var v any
			if err := json.Unmarshal(got, &v); err != nil {
				t.Fatalf("patch is not JSON: %v", err)
			}
		})
	}
}
