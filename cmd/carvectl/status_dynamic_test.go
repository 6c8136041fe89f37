package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	carvev1 "github.com/carve-dev/carve/api/v1"
)

// dynamicRecord is a node of three H100s: GPU 0 static, GPU 1 dynamic and
// offered with two MIG devices made for claims (one still being made),
// GPU 2 turning dynamic, not yet offered.
func dynamicRecord() carvev1.NodeRecord {
	mig := func(profile string, start, size, giID int, uuid string, claim *carvev1.ClaimRecord) carvev1.InstanceRecord {
		in := carvev1.InstanceRecord{Profile: profile, Placement: carvev1.Placement{Start: start, Size: size}, GIID: giID, UUID: uuid, Claim: claim}
		if uuid != "" {
			in.ComputeInstances = []carvev1.ComputeInstanceRecord{{ID: 0, ComputeSlices: size, UUID: uuid}}
		}
		return in
	}
	h100 := func(i int, uuid string) carvev1.GPURecord {
		return carvev1.GPURecord{Index: i, UUID: uuid, Model: "H100-80GB", Product: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, MIGMode: "enabled"}
	}
	g0, g1, g2 := h100(0, "GPU-0"), h100(1, "GPU-1"), h100(2, "GPU-2")
	g0.Instances = []carvev1.InstanceRecord{mig("7g.80gb", 0, 8, 0, "MIG-0", nil)}
	g1.Instances = []carvev1.InstanceRecord{
		mig("1g.10gb", 3, 1, 5, "", &carvev1.ClaimRecord{UID: "u-small", State: carvev1.InstanceMaking}),
		mig("3g.40gb", 4, 4, 1, "MIG-1", &carvev1.ClaimRecord{UID: "u-big", Namespace: "default", Name: "dyn-big", State: carvev1.InstanceMade}),
	}
	g1.Dynamic = &carvev1.DynamicRecord{Profiles: []string{"1g.10gb", "3g.40gb"}, Offered: true}
	g2.Dynamic = &carvev1.DynamicRecord{Profiles: []string{"7g.80gb"}}
	return carvev1.NodeRecord{Profile: "hybrid", State: carvev1.StateSuccess, Generation: 4, LastTransition: "2026-11-23T09:00:00Z", AgentVersion: "v1.5.0",
		Selected: &carvev1.SelectedProfile{Profile: "hybrid", Source: "label"},
		GPUs:     []carvev1.GPURecord{g0, g1, g2},
		InUse:    &carvev1.InUseRecord{Devices: []carvev1.DeviceInUse{{UUID: "MIG-1", Pods: []string{"default/trainer"}}}},
	}
}

// TestStatusShowsDynamicGPUs: under the node table, each dynamic GPU with
// its profiles and the MIG devices made there for claims, a device still
// being made named by its claim's UID; a GPU turning dynamic says it is
// not offered yet; a static GPU is not listed; nodes without dynamic GPUs
// add no section.
func TestStatusShowsDynamicGPUs(t *testing.T) {
	node := gpuNode("gpu-dyn", map[string]string{carvev1.LabelState: carvev1.StateSuccess, carvev1.LabelApplied: "hybrid", carvev1.LabelSource: "label"},
		annotation(t, dynamicRecord()), nil)
	cs := fake.NewClientset(append(statusNodes(t), node)...)
	var out strings.Builder
	if err := status(context.Background(), cs, "https://test", statusQuery{output: "table", namespace: "carve-system", configMap: "carve-profiles", now: time.Now()}, &out); err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(out.String(), "\n\nDynamic GPUs (MIG devices made for claims):\n")
	if !ok {
		t.Fatalf("no dynamic GPUs section:\n%s", out.String())
	}
	section, _, _ = strings.Cut(section, "\n\n")
	want := []string{
		"gpu-dyn GPU 1 1g.10gb,3g.40gb 1g.10gb@3:1 claim u-small (making), 3g.40gb@4:4 default/dyn-big",
		"gpu-dyn GPU 2 7g.80gb (not offered yet) none",
	}
	var got []string
	for l := range strings.Lines(section) {
		got = append(got, strings.Join(strings.Fields(l), " "))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("dynamic GPUs section (-want +got):\n%s\nwhole output:\n%s", diff, out.String())
	}

	out.Reset()
	if err := status(context.Background(), fake.NewClientset(statusNodes(t)...), "https://test", statusQuery{output: "table", namespace: "carve-system", configMap: "carve-profiles", now: time.Now()}, &out); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "Dynamic GPUs") {
		t.Errorf("a cluster without dynamic GPUs shows the section:\n%s", out.String())
	}
}

// TestStatusShowsClaimDevicesOfAGPUTurningStatic: a GPU no longer
// dynamic that still holds a device made for a claim is listed as
// changing to static, with the device.
func TestStatusShowsClaimDevicesOfAGPUTurningStatic(t *testing.T) {
	rec := dynamicRecord()
	rec.GPUs[1].Dynamic = nil
	got, ok := dynamicLine(rec.GPUs[1])
	if want := "changing to static\t1g.10gb@3:1 claim u-small (making), 3g.40gb@4:4 default/dyn-big"; !ok || got != want {
		t.Errorf("dynamicLine = %q, %t; want %q", got, ok, want)
	}
	if _, ok := dynamicLine(rec.GPUs[0]); ok {
		t.Error("a static GPU without devices made for claims is listed")
	}
}

const planDynamicProfiles = `version: v1
defaultProfile: hybrid
profiles:
  hybrid:
    - gpus: [0]
      mig: {7g.80gb: 1}
    - gpus: [1, 2]
      dynamic: {profiles: [1g.10gb, 3g.40gb]}
  static:
    - gpus: all
      mig: {7g.80gb: 1}
`

// TestPlanNodeLeavesClaimDevicesOfDynamicGPUs: a preview plans a dynamic
// GPU as its agent does, without the MIG devices made there for claims: no
// operation on GPU 1; under a profile that makes GPU 1 static, they are
// destroyed (the one a pod holds blocks it).
func TestPlanNodeLeavesClaimDevicesOfDynamicGPUs(t *testing.T) {
	s, err := dynamicRecord().Encode()
	if err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-dyn", Annotations: map[string]string{carvev1.AnnotationRecord: s}}}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "carve-system", Name: "carve-profiles"},
		Data: map[string]string{carvev1.ConfigMapKey: planDynamicProfiles}}
	cs := fake.NewClientset(node, cm)
	code, stdout, stderr := runCarvectl(t, cs, "plan", "--node", "gpu-dyn")
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
	_, gpu1, _ := strings.Cut(stdout, "\nGPU 1 ")
	gpu1, _, _ = strings.Cut(gpu1, "\nGPU 2 ")
	if !strings.Contains(gpu1, "no operations: already as wanted") || strings.Contains(gpu1, "destroy") || strings.Contains(gpu1, "blocked") {
		t.Errorf("GPU 1, dynamic, is planned with its claims' devices:\n%s", stdout)
	}
	code, stdout, stderr = runCarvectl(t, cs, "plan", "--node", "gpu-dyn", "--profile", "static")
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "blocked by MIG-1 3g.40gb") {
		t.Errorf("GPU 1 turning static is not blocked by the device a pod holds:\n%s", stdout)
	}
}
