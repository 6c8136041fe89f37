package dra

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/carve-dev/carve/partition"
)

const h100 = "NVIDIA H100 80GB HBM3"

// migInstance is a MIG device of the given profile and placement; complete
// when uuid is not empty.
func migInstance(profile string, infoID, start, size int, memMiB uint64, sms int, uuid string) partition.Instance {
	in := partition.Instance{Profile: profile, InfoID: infoID, Placement: partition.Placement{Start: start, Size: size},
		ComputeSlices: 1, MemoryMiB: memMiB, Engines: partition.Engines{Multiprocessors: sms}}
	if uuid != "" {
		in.CIs = []partition.ComputeInstance{{ComputeSlices: 1, UUID: uuid}}
	}
	return in
}

func str(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: &s} }
func num(n int64) resourceapi.DeviceAttribute  { return resourceapi.DeviceAttribute{IntValue: &n} }
func bytesCap(n int64) resourceapi.DeviceCapacity {
	return resourceapi.DeviceCapacity{Value: *resource.NewQuantity(n, resource.BinarySI)}
}

// TestDevices: a whole GPU outside MIG mode is one device; a GPU in MIG
// mode is its complete MIG devices only, with NVIDIA-style names, the
// attributes claims select on, and memory in bytes.
func TestDevices(t *testing.T) {
	gpus := []partition.GPU{
		{Index: 0, UUID: "GPU-a", Product: h100, MemoryMiB: 81559, MIGCapable: true},
		{Index: 1, UUID: "GPU-b", Product: h100, MemoryMiB: 81559, MIGCapable: true, MIGMode: partition.MIGEnabled, Instances: []partition.Instance{
			migInstance("1g.10gb", 19, 2, 1, 9856, 16, "MIG-1"),
			migInstance("1g.10gb", 19, 3, 1, 9856, 16, ""), // no compute instance: not offered
			migInstance("3g.40gb", 9, 4, 4, 40192, 60, "MIG-3"),
		}},
		// MIG mode on, nothing made: no device at all.
		{Index: 2, UUID: "GPU-c", Product: h100, MemoryMiB: 81559, MIGCapable: true, MIGMode: partition.MIGEnabled},
	}
	got, err := Devices(gpus)
	if err != nil {
		t.Fatal(err)
	}
	want := []resourceapi.Device{
		{
			Name: "gpu-0",
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				AttrType: str(TypeGPU), AttrUUID: str("GPU-a"), AttrIndex: num(0), AttrProductName: str(h100),
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{CapMemory: bytesCap(81559 << 20)},
		},
		{
			Name: "gpu-1-mig-1g10gb-19-2",
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				AttrType: str(TypeMIG), AttrUUID: str("MIG-1"), AttrIndex: num(1), AttrProductName: str(h100),
				AttrProfile: str("1g.10gb"), AttrParentUUID: str("GPU-b"), AttrMIGPlacement: str("2:1"),
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				CapMemory: bytesCap(9856 << 20), CapMultiprocessors: {Value: *resource.NewQuantity(16, resource.DecimalSI)},
			},
		},
		{
			Name: "gpu-1-mig-3g40gb-9-4",
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				AttrType: str(TypeMIG), AttrUUID: str("MIG-3"), AttrIndex: num(1), AttrProductName: str(h100),
				AttrProfile: str("3g.40gb"), AttrParentUUID: str("GPU-b"), AttrMIGPlacement: str("4:4"),
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				CapMemory: bytesCap(40192 << 20), CapMultiprocessors: {Value: *resource.NewQuantity(60, resource.DecimalSI)},
			},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Devices (-want +got):\n%s", diff)
	}
}

// TestNameOfProfile: every MIG profile variant gives a DNS-label part, and
// variants stay apart (with the profile ID the name also carries).
func TestNameOfProfile(t *testing.T) {
	for _, tc := range []struct{ profile, want string }{
		{"1g.10gb", "1g10gb"},
		{"1g.10gb+me", "1g10gb-me"},
		{"1g.24gb-me", "1g24gb-me"},
		{"1g.24gb+me.all", "1g24gb-meall"},
		{"1g.24gb+gfx", "1g24gb-gfx"},
		{"7g.80gb", "7g80gb"},
	} {
		if got := nameOfProfile(tc.profile); got != tc.want {
			t.Errorf("nameOfProfile(%q) = %q, want %q", tc.profile, got, tc.want)
		}
	}
}

// TestDevicesRejectsClashes: two MIG devices that would get one name (an
// inventory no GPU reports) are an error, not a slice the API refuses.
func TestDevicesRejectsClashes(t *testing.T) {
	gpus := []partition.GPU{{Index: 0, UUID: "GPU-a", MIGMode: partition.MIGEnabled, Instances: []partition.Instance{
		migInstance("1g.10gb", 19, 0, 1, 9856, 16, "MIG-1"),
		migInstance("1g.10gb", 19, 0, 1, 9856, 16, "MIG-2"),
	}}}
	if _, err := Devices(gpus); err == nil || !strings.Contains(err.Error(), "gpu-0-mig-1g10gb-19-0") {
		t.Errorf("Devices = %v, want an error naming gpu-0-mig-1g10gb-19-0", err)
	}
}

// TestDeviceNameWithoutInfoID: an instance whose profile the GPU does not
// list has no profile ID to name; its name leaves the ID out rather than
// making one up.
func TestDeviceNameWithoutInfoID(t *testing.T) {
	gpus := []partition.GPU{{Index: 3, UUID: "GPU-a", MIGMode: partition.MIGEnabled, Instances: []partition.Instance{
		migInstance("profile-21", partition.UnknownInfoID, 2, 1, 9856, 16, "MIG-1"),
	}}}
	got, err := Devices(gpus)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"gpu-3-mig-profile-21-2"}, names(got)); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
}
