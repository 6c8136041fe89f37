package timeslice

import (
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/partition"
)

func migGPU(index int, uuid string, instances ...partition.Instance) partition.GPU {
	return partition.GPU{Index: index, UUID: uuid, Product: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559,
		MIGCapable: true, MIGMode: partition.MIGEnabled, PendingMIGMode: partition.MIGEnabled, Instances: instances}
}

func inst(profile, uuid string, slices int, complete bool) partition.Instance {
	in := partition.Instance{Profile: profile, ComputeSlices: slices, MemoryMiB: 9856}
	if complete {
		in.CIs = []partition.ComputeInstance{{ComputeSlices: slices, UUID: uuid}}
	}
	return in
}

func wholeGPU(index int, uuid string) partition.GPU {
	return partition.GPU{Index: index, UUID: uuid, Product: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, MIGCapable: true}
}

func ids(devs []Device) []string {
	out := make([]string, len(devs))
	for i, d := range devs {
		out[i] = d.ID
	}
	return out
}

func TestExpand(t *testing.T) {
	tests := []struct {
		name    string
		gpus    []partition.GPU
		sharing map[int]Sharing
		want    map[string][]string
		wantErr string
	}{
		{
			name: "whole GPUs unshared",
			gpus: []partition.GPU{wholeGPU(1, "GPU-b"), wholeGPU(0, "GPU-a")},
			want: map[string][]string{"nvidia.com/gpu": {"GPU-a", "GPU-b"}},
		},
		{
			name:    "replicas 1 is not shared",
			gpus:    []partition.GPU{wholeGPU(0, "GPU-a")},
			sharing: map[int]Sharing{0: {Replicas: 1, RenameShared: true}},
			want:    map[string][]string{"nvidia.com/gpu": {"GPU-a"}},
		},
		{
			name:    "time-sliced whole GPU",
			gpus:    []partition.GPU{wholeGPU(0, "GPU-a"), wholeGPU(1, "GPU-b")},
			sharing: map[int]Sharing{0: {Replicas: 3}},
			want:    map[string][]string{"nvidia.com/gpu": {"GPU-a::0", "GPU-a::1", "GPU-a::2", "GPU-b"}},
		},
		{
			name:    "renameShared moves only the shared GPUs",
			gpus:    []partition.GPU{wholeGPU(0, "GPU-a"), wholeGPU(1, "GPU-b")},
			sharing: map[int]Sharing{1: {Replicas: 2, RenameShared: true}},
			want: map[string][]string{
				"nvidia.com/gpu":        {"GPU-a"},
				"nvidia.com/gpu.shared": {"GPU-b::0", "GPU-b::1"},
			},
		},
		{
			name: "MIG devices, +me renamed, incomplete skipped",
			gpus: []partition.GPU{migGPU(0, "GPU-a",
				inst("1g.10gb", "MIG-1", 1, true),
				inst("1g.10gb", "MIG-2", 1, true),
				inst("1g.10gb+me", "MIG-3", 1, true),
				inst("3g.40gb", "MIG-4", 3, false),
			)},
			want: map[string][]string{
				"nvidia.com/mig-1g.10gb":    {"MIG-1", "MIG-2"},
				"nvidia.com/mig-1g.10gb.me": {"MIG-3"},
			},
		},
		{
			name: "per-profile MIG replicas override the GPU-wide number",
			gpus: []partition.GPU{migGPU(0, "GPU-a",
				inst("1g.10gb", "MIG-1", 1, true),
				inst("2g.20gb", "MIG-2", 2, true),
			)},
			sharing: map[int]Sharing{0: {Replicas: 2, MIGReplicas: map[string]int{"1g.10gb": 3}}},
			want: map[string][]string{
				"nvidia.com/mig-1g.10gb": {"MIG-1::0", "MIG-1::1", "MIG-1::2"},
				"nvidia.com/mig-2g.20gb": {"MIG-2::0", "MIG-2::1"},
			},
		},
		{
			name:    "MIG GPU with no instances advertises nothing",
			gpus:    []partition.GPU{migGPU(0, "GPU-a")},
			sharing: map[int]Sharing{0: {Replicas: 4}},
			want:    map[string][]string{},
		},
		{
			name:    "replicas above the bound",
			gpus:    []partition.GPU{wholeGPU(0, "GPU-a")},
			sharing: map[int]Sharing{0: {Replicas: carvev1.MaxReplicas + 1}},
			wantErr: "GPU 0 (GPU-a) whole GPU: replicas 1025 out of range",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Expand(tt.gpus, tt.sharing)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := map[string][]string{}
			for name, devs := range res {
				got[name] = ids(devs)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("device IDs per resource (-want +got):\n%s", diff)
			}
		})
	}
}

func TestExpandDeviceFields(t *testing.T) {
	g := migGPU(3, "GPU-x", inst("1g.10gb", "MIG-9", 1, true))
	res, err := Expand([]partition.GPU{g}, map[int]Sharing{3: {Replicas: 2}})
	if err != nil {
		t.Fatal(err)
	}
	want := Device{ID: "MIG-9::1", UUID: "MIG-9", GPU: 3, GPUUUID: "GPU-x", Replica: 1, Replicas: 2, MIGProfile: "1g.10gb", MemoryMiB: 9856}
	if diff := cmp.Diff(want, res["nvidia.com/mig-1g.10gb"][1]); diff != "" {
		t.Fatalf("second replica (-want +got):\n%s", diff)
	}
	if c := res.Counts(); c["nvidia.com/mig-1g.10gb"] != 2 {
		t.Fatalf("counts %v", c)
	}
}

func TestReplicaOrderIsNumeric(t *testing.T) {
	res, err := Expand([]partition.GPU{wholeGPU(0, "GPU-a")}, map[int]Sharing{0: {Replicas: 12}})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]string, 12)
	for i := range want {
		want[i] = "GPU-a::" + strconv.Itoa(i)
	}
	if diff := cmp.Diff(want, ids(res[carvev1.GPUResource])); diff != "" {
		t.Fatalf("replicas not in numeric order (-want +got):\n%s", diff)
	}
}

func TestParseIDAndFold(t *testing.T) {
	tests := []struct {
		id      string
		uuid    string
		replica int
		wantErr bool
	}{
		{"GPU-a", "GPU-a", -1, false},
		{"GPU-a::0", "GPU-a", 0, false},
		{"MIG-b::17", "MIG-b", 17, false},
		{"GPU-a::x", "", 0, true},
		{"GPU-a::-1", "", 0, true},
		{"::3", "", 0, true},
		{"", "", 0, true},
	}
	for _, tt := range tests {
		uuid, n, err := ParseID(tt.id)
		if (err != nil) != tt.wantErr || uuid != tt.uuid || (!tt.wantErr && n != tt.replica) {
			t.Errorf("ParseID(%q) = %q, %d, %v", tt.id, uuid, n, err)
		}
	}
	got, err := Fold([]string{"GPU-a::1", "GPU-b", "GPU-a::0", "GPU-b", "MIG-c::2"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"GPU-a", "GPU-b", "MIG-c"}, got); diff != "" {
		t.Fatalf("Fold mismatch (-want +got):\n%s", diff)
	}
	if _, err := Fold([]string{"GPU-a::bad"}); err == nil {
		t.Fatal("Fold accepted a bad ID")
	}
}
