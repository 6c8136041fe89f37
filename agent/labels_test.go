package agent

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/timeslice"
)

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
				t.Helper()
				return LabelInput{Applied: "shared-4", Source: "window", Window: "nightly", State: carvev1.StateSuccess, GPUs: whole,
					Resources: expand(t, whole, map[int]timeslice.Sharing{0: {Replicas: 4}, 1: {Replicas: 4}})}
			},
			want: map[string]string{
				carvev1.LabelApplied: "shared-4", carvev1.LabelSource: "window", carvev1.LabelWindow: "nightly", carvev1.LabelState: "success",
				carvev1.LabelGPUCount: "2", carvev1.LabelGPUProduct: "NVIDIA-H100-80GB-HBM3-SHARED", carvev1.LabelGPUMemory: "81559",
				carvev1.LabelGPUReplicas: "4", carvev1.LabelSharingStrategy: "time-slicing",
				carvev1.LabelMIGCapable: "true", carvev1.LabelMIGStrategy: "mixed",
			},
		},
		{
			name: "MIG with per-profile replicas, outside windows",
			in: func(t *testing.T) LabelInput {
				t.Helper()
				gpus := []partition.GPU{migGPU}
				return LabelInput{Applied: "balanced", Source: "label", State: carvev1.StatePending, GPUs: gpus,
					Resources: expand(t, gpus, map[int]timeslice.Sharing{0: {MIGReplicas: map[string]int{"1g.10gb": 2}}})}
			},
			want: map[string]string{
				carvev1.LabelApplied: "balanced", carvev1.LabelSource: "label", carvev1.LabelState: "pending",
				carvev1.LabelGPUCount: "1", carvev1.LabelGPUProduct: "NVIDIA-H100-80GB-HBM3", carvev1.LabelGPUMemory: "81559",
				carvev1.LabelGPUReplicas: "1", carvev1.LabelSharingStrategy: "time-slicing",
				carvev1.LabelMIGCapable: "true", carvev1.LabelMIGStrategy: "mixed",
				"nvidia.com/mig-1g.10gb.count": "2", "nvidia.com/mig-1g.10gb.replicas": "2", "nvidia.com/mig-1g.10gb.memory": "9984",
				"nvidia.com/mig-1g.10gb.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb-SHARED", "nvidia.com/mig-1g.10gb.sharing-strategy": "time-slicing",
				"nvidia.com/mig-1g.10gb.slices.gi": "1", "nvidia.com/mig-1g.10gb.slices.ci": "1",
				"nvidia.com/mig-3g.40gb.count": "1", "nvidia.com/mig-3g.40gb.replicas": "1", "nvidia.com/mig-3g.40gb.memory": "40448",
				"nvidia.com/mig-3g.40gb.product": "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb", "nvidia.com/mig-3g.40gb.sharing-strategy": "none",
				"nvidia.com/mig-3g.40gb.slices.gi": "3", "nvidia.com/mig-3g.40gb.slices.ci": "3",
				// No multiprocessors nor engines: the instances do not
				// know their profiles' figures.
			},
		},
		{
			name: "GPU without MIG, nothing applied",
			in: func(t *testing.T) LabelInput {
				t.Helper()
				gpus := []partition.GPU{l4}
				return LabelInput{State: carvev1.StateFailed, GPUs: gpus, Resources: expand(t, gpus, nil)}
			},
			want: map[string]string{
				carvev1.LabelState: "failed", carvev1.LabelGPUCount: "1", carvev1.LabelGPUProduct: "NVIDIA-L4", carvev1.LabelGPUMemory: "23034",
				carvev1.LabelGPUReplicas: "1", carvev1.LabelSharingStrategy: "none", carvev1.LabelMIGCapable: "false", carvev1.LabelMIGStrategy: "mixed",
			},
			wantNot: []string{carvev1.LabelApplied, carvev1.LabelSource, carvev1.LabelWindow},
		},
		{
			name: "MIG manager state mirrored, GFD keys left to GFD",
			in: func(t *testing.T) LabelInput {
				t.Helper()
				return LabelInput{Applied: "shared-4", Source: "label", State: carvev1.StateDraining, GPUs: whole,
					Resources: expand(t, whole, map[int]timeslice.Sharing{0: {Replicas: 4}}),
					Options:   LabelOptions{MIGManagerState: true, CarveOnly: true}}
			},
			want: map[string]string{
				carvev1.LabelApplied: "shared-4", carvev1.LabelSource: "label", carvev1.LabelState: "draining",
				carvev1.LabelMIGManagerState: "pending",
			},
		},
		{
			name: "MIG manager state with GFD keys",
			in: func(*testing.T) LabelInput {
				return LabelInput{State: carvev1.StateRebootRequired, GPUs: []partition.GPU{l4}, Options: LabelOptions{MIGManagerState: true}}
			},
			want: map[string]string{
				carvev1.LabelState: "reboot-required", carvev1.LabelMIGManagerState: "rebooting",
				carvev1.LabelGPUCount: "1", carvev1.LabelGPUProduct: "NVIDIA-L4", carvev1.LabelGPUMemory: "23034",
				carvev1.LabelGPUReplicas: "1", carvev1.LabelSharingStrategy: "none", carvev1.LabelMIGCapable: "false", carvev1.LabelMIGStrategy: "mixed",
			},
		},
		{
			name: "no GPUs",
			in: func(*testing.T) LabelInput {
				return LabelInput{Applied: "full", Source: "default", State: carvev1.StateSuccess}
			},
			want: map[string]string{carvev1.LabelApplied: "full", carvev1.LabelSource: "default", carvev1.LabelState: "success"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Labels(tt.in(t))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Labels() mismatch (-want +got):\n%s", diff)
			}
			for k := range got {
				if !carvev1.MayWrite(k) {
					t.Errorf("label %s is not one carve may write", k)
				}
			}
		})
	}
}

// withEngines gives an instance its profile's SMs and engines from the
// catalogue's H100 80GB, as NVML reports them.
func withEngines(t *testing.T, in partition.Instance) partition.Instance {
	t.Helper()
	m, _ := partition.LookupModel("H100-80GB")
	p, ok := m.Profile(in.Profile)
	if !ok {
		t.Fatalf("no %s on the H100", in.Profile)
	}
	in.Engines = p.Engines
	return in
}

// TestLabelsGFDParity: where carve writes GPU feature discovery's keys,
// it writes GFD's values: the product gets "-SHARED" when the resource is
// time-sliced under its own name, and every MIG profile its product,
// sharing strategy, slices, multiprocessors and engines.
func TestLabelsGFDParity(t *testing.T) {
	whole := []partition.GPU{h100(0, "GPU-a"), h100(1, "GPU-b")}
	migGPU := h100(0, "GPU-a")
	migGPU.MIGMode, migGPU.PendingMIGMode = partition.MIGEnabled, partition.MIGEnabled
	migGPU.Instances = []partition.Instance{
		withEngines(t, migInstance(1, 0, 1, "1g.10gb", "MIG-1", 1, 9984)),
		withEngines(t, migInstance(2, 1, 1, "1g.10gb+me", "MIG-2", 1, 9984)),
		withEngines(t, migInstance(3, 4, 4, "3g.40gb", "MIG-3", 3, 40448)),
	}
	mixed := []partition.GPU{migGPU, h100(1, "GPU-b")}
	gpuKeys := []string{carvev1.LabelGPUProduct, carvev1.LabelGPUReplicas, carvev1.LabelSharingStrategy}
	// mig lists the labels GFD writes for one MIG profile of migGPU.
	mig := func(profile, product, replicas, strategy, cs, sms, ce, dec, jpeg, ofa string) map[string]string {
		k := func(suffix string) string { return carvev1.MIGLabelKey(profile, suffix) }
		return map[string]string{
			k(".count"): "1", k(".replicas"): replicas, k(".sharing-strategy"): strategy, k(".product"): product,
			k(".memory"):    map[string]string{"1": "9984", "3": "40448"}[cs],
			k(".slices.gi"): cs, k(".slices.ci"): cs, k(".multiprocessors"): sms,
			k(".engines.copy"): ce, k(".engines.decoder"): dec, k(".engines.encoder"): "0", k(".engines.jpeg"): jpeg, k(".engines.ofa"): ofa,
		}
	}
	merge := func(ms ...map[string]string) map[string]string {
		out := map[string]string{}
		for _, m := range ms {
			maps.Copy(out, m)
		}
		return out
	}
	tests := []struct {
		name    string
		gpus    []partition.GPU
		sharing map[int]timeslice.Sharing
		want    map[string]string
	}{
		{
			name: "whole GPUs not shared",
			gpus: whole,
			want: map[string]string{carvev1.LabelGPUProduct: "NVIDIA-H100-80GB-HBM3", carvev1.LabelGPUReplicas: "1", carvev1.LabelSharingStrategy: "none"},
		},
		{
			name:    "whole GPUs shared",
			gpus:    whole,
			sharing: map[int]timeslice.Sharing{0: {Replicas: 4}, 1: {Replicas: 4}},
			want:    map[string]string{carvev1.LabelGPUProduct: "NVIDIA-H100-80GB-HBM3-SHARED", carvev1.LabelGPUReplicas: "4", carvev1.LabelSharingStrategy: "time-slicing"},
		},
		{
			name:    "whole GPUs shared and renamed",
			gpus:    whole,
			sharing: map[int]timeslice.Sharing{0: {Replicas: 4, RenameShared: true}, 1: {Replicas: 4, RenameShared: true}},
			want:    map[string]string{carvev1.LabelGPUProduct: "NVIDIA-H100-80GB-HBM3", carvev1.LabelGPUReplicas: "4", carvev1.LabelSharingStrategy: "time-slicing"},
		},
		{
			name:    "one whole GPU shared under nvidia.com/gpu, one renamed",
			gpus:    whole,
			sharing: map[int]timeslice.Sharing{0: {Replicas: 2, RenameShared: true}, 1: {Replicas: 3}},
			want:    map[string]string{carvev1.LabelGPUProduct: "NVIDIA-H100-80GB-HBM3-SHARED", carvev1.LabelGPUReplicas: "3", carvev1.LabelSharingStrategy: "time-slicing"},
		},
		{
			name: "MIG profiles not shared, beside a whole GPU",
			gpus: mixed,
			want: merge(
				map[string]string{carvev1.LabelGPUProduct: "NVIDIA-H100-80GB-HBM3", carvev1.LabelGPUReplicas: "1", carvev1.LabelSharingStrategy: "none"},
				mig("1g.10gb", "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", "1", "none", "1", "16", "1", "1", "1", "0"),
				mig("1g.10gb+me", "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb.me", "1", "none", "1", "16", "1", "1", "1", "1"),
				mig("3g.40gb", "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb", "1", "none", "3", "60", "3", "3", "3", "0"),
			),
		},
		{
			name: "MIG profiles shared by name, the whole GPU not shared",
			gpus: mixed,
			sharing: map[int]timeslice.Sharing{
				0: {MIGReplicas: map[string]int{"1g.10gb": 2, "3g.40gb": 4}},
				1: {Replicas: 1},
			},
			want: merge(
				map[string]string{carvev1.LabelGPUProduct: "NVIDIA-H100-80GB-HBM3", carvev1.LabelGPUReplicas: "1", carvev1.LabelSharingStrategy: "time-slicing"},
				mig("1g.10gb", "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb-SHARED", "2", "time-slicing", "1", "16", "1", "1", "1", "0"),
				mig("1g.10gb+me", "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb.me", "1", "none", "1", "16", "1", "1", "1", "1"),
				mig("3g.40gb", "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb-SHARED", "4", "time-slicing", "3", "60", "3", "3", "3", "0"),
			),
		},
		{
			name:    "MIG profiles shared and renamed, the whole GPU shared by name",
			gpus:    mixed,
			sharing: map[int]timeslice.Sharing{0: {Replicas: 2, RenameShared: true}, 1: {Replicas: 2}},
			want: merge(
				map[string]string{carvev1.LabelGPUProduct: "NVIDIA-H100-80GB-HBM3-SHARED", carvev1.LabelGPUReplicas: "2", carvev1.LabelSharingStrategy: "time-slicing"},
				mig("1g.10gb", "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", "2", "time-slicing", "1", "16", "1", "1", "1", "0"),
				mig("1g.10gb+me", "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb.me", "2", "time-slicing", "1", "16", "1", "1", "1", "1"),
				mig("3g.40gb", "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb", "2", "time-slicing", "3", "60", "3", "3", "3", "0"),
			),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := timeslice.Expand(tt.gpus, tt.sharing)
			if err != nil {
				t.Fatal(err)
			}
			all := Labels(LabelInput{State: carvev1.StateSuccess, GPUs: tt.gpus, Resources: res})
			got := map[string]string{}
			for k, v := range all {
				if slices.Contains(gpuKeys, k) || strings.HasPrefix(k, carvev1.MIGResourcePrefix) {
					got[k] = v
				}
				if !carvev1.MayWrite(k) {
					t.Errorf("label %s is not one carve may write", k)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("GFD labels (-want +got):\n%s", diff)
			}
			// With --gfd-labels=false none of them is written.
			carveOnly := Labels(LabelInput{State: carvev1.StateSuccess, GPUs: tt.gpus, Resources: res, Options: LabelOptions{CarveOnly: true}})
			for k := range carveOnly {
				if !strings.HasPrefix(k, carvev1.CarvePrefix) {
					t.Errorf("CarveOnly wrote %s", k)
				}
			}
		})
	}
}

func TestMetadataPatch(t *testing.T) {
	tests := []struct {
		name            string
		cur, want       map[string]string
		prev            *carvev1.NodeRecord
		curAnn, wantAnn map[string]string
		wantPatch       string // "" for nil
		wantErr         bool
	}{
		{
			name:   "nothing changes",
			cur:    map[string]string{carvev1.LabelState: "success", "pool": "a", "nvidia.com/mig-1g.10gb.count": "2"},
			want:   map[string]string{carvev1.LabelState: "success", "nvidia.com/mig-1g.10gb.count": "2"},
			curAnn: map[string]string{carvev1.AnnotationRecord: "{}", "other": "x"}, wantAnn: map[string]string{carvev1.AnnotationRecord: "{}"},
		},
		{
			name:      "changed and stale owned labels, unowned untouched",
			cur:       map[string]string{carvev1.LabelState: "applying", "pool": "a", "carve.dev/profile": "x", "nvidia.com/mig-3g.40gb.count": "1", "nvidia.com/gpu.family": "hopper"},
			want:      map[string]string{carvev1.LabelState: "success", carvev1.LabelApplied: "x"},
			prev:      &carvev1.NodeRecord{Labels: []string{carvev1.LabelState, "nvidia.com/mig-3g.40gb.count"}},
			wantPatch: `{"metadata":{"labels":{"carve.dev/profile.applied":"x","carve.dev/state":"success","nvidia.com/mig-3g.40gb.count":null}}}`,
		},
		{
			name:      "keys carve did not write stay, whatever their name",
			cur:       map[string]string{carvev1.LabelWindow: "night", "nvidia.com/mig-3g.40gb.count": "1", "nvidia.com/mig-1g.10gb.count": "7", "nvidia.com/gpu.product": "H100"},
			want:      map[string]string{carvev1.LabelState: "success"},
			prev:      &carvev1.NodeRecord{Labels: []string{"nvidia.com/mig-1g.10gb.count"}},
			wantPatch: `{"metadata":{"labels":{"carve.dev/state":"success","carve.dev/window":null,"nvidia.com/mig-1g.10gb.count":null}}}`,
		},
		{
			name:      "no record: only carve's own keys are removed",
			cur:       map[string]string{carvev1.LabelApplied: "x", "nvidia.com/mig-1g.10gb.count": "7", carvev1.LabelProfile: "x"},
			want:      map[string]string{},
			wantPatch: `{"metadata":{"labels":{"carve.dev/profile.applied":null}}}`,
		},
		{
			name:      "annotation only",
			cur:       map[string]string{carvev1.LabelState: "success"},
			want:      map[string]string{carvev1.LabelState: "success"},
			curAnn:    map[string]string{carvev1.AnnotationRecord: `{"generation":1}`},
			wantAnn:   map[string]string{carvev1.AnnotationRecord: `{"generation":2}`},
			wantPatch: `{"metadata":{"annotations":{"carve.dev/partition":"{\"generation\":2}"}}}`,
		},
		{
			name:    "unowned label wanted",
			want:    map[string]string{"pool": "b"},
			wantErr: true,
		},
		{
			name:    "the operator's pin wanted",
			want:    map[string]string{carvev1.LabelProfile: "b"},
			wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := MetadataPatch(tt.cur, tt.want, tt.prev, tt.curAnn, tt.wantAnn)
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
