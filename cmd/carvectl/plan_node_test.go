package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	carvev1 "github.com/carve-dev/carve/api/v1"
)

const planNodeProfiles = `version: v1
defaultProfile: full
profiles:
  full:
    - gpus: all
  small:
    - gpus: all
      mig: {1g.10gb: 7}
`

// planNodeRecord is an H100 in MIG mode with one 7g.80gb instance, which a
// pod holds.
func planNodeRecord(t *testing.T) string {
	t.Helper()
	rec := carvev1.NodeRecord{
		State: carvev1.StateSuccess, Generation: 3, LastTransition: "2026-11-23T09:00:00Z", AgentVersion: "v1.4.0",
		GPUs: []carvev1.GPURecord{{Index: 0, UUID: "GPU-a", Model: "H100-80GB", Product: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559,
			MIGMode: "enabled", Instances: []carvev1.InstanceRecord{{
				Profile: "7g.80gb", Placement: carvev1.Placement{Start: 0, Size: 8}, GIID: 0, UUID: "MIG-7", Replicas: 1,
				ComputeInstances: []carvev1.ComputeInstanceRecord{{ID: 0, ComputeSlices: 7, UUID: "MIG-7"}},
			}}}},
		InUse: &carvev1.InUseRecord{Devices: []carvev1.DeviceInUse{{UUID: "MIG-7", Pods: []string{"ml/train"}}}},
	}
	s, err := rec.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func planNodeObjects(record string) []runtime.Object {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-a", Labels: map[string]string{carvev1.LabelHold: carvev1.HoldTrue}, Annotations: map[string]string{}}}
	if record != "" {
		node.Annotations[carvev1.AnnotationRecord] = record
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "carve-system", Name: "carve-profiles"},
		Data: map[string]string{carvev1.ConfigMapKey: planNodeProfiles}}
	return []runtime.Object{node, cm}
}

// TestPlanNode: the plan on a node from its record, with the profile its
// agent selects or the one asked for, blocked by the device a pod holds.
func TestPlanNode(t *testing.T) {
	cs := fake.NewClientset(planNodeObjects(planNodeRecord(t))...)
	code, stdout, stderr := runCarvectl(t, cs, "plan", "--node", "gpu-a")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"Node gpu-a, as its record of 2026-11-23T09:00:00Z says (generation 3); profile full (selected by default).",
		"MIG enabled -> disabled",
		"blocked by MIG-7 7g.80gb: ",
		"(pods ml/train)",
		"operations once unblocked:",
		"Devices in use:\n  MIG-7  ml/train",
		"The node is held (carve.dev/hold=true): its agent changes nothing until the label is removed.",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	code, stdout, stderr = runCarvectl(t, cs, "plan", "--node", "gpu-a", "--profile", "small", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var doc carvev1.PlanDocument
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("%v:\n%s", err, stdout)
	}
	g := doc.Plan.GPUs[0]
	got := []string{doc.Profile, doc.GPUs, g.Blocked[0].UUID}
	for _, op := range g.WouldDo {
		got = append(got, string(op.Kind))
	}
	want := []string{"small", "node:gpu-a", "MIG-7", "destroy-ci", "destroy-gi"}
	for range 7 {
		want = append(want, "create-gi")
	}
	for range 7 {
		want = append(want, "create-ci")
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("profile, gpus, blocker and ops (-want +got):\n%s", diff)
	}
}

// TestPlanNodeErrors: each thing a preview needs, missing, is named.
func TestPlanNodeErrors(t *testing.T) {
	old := `{"profile":"full","profileHash":"x","state":"success","generation":1,"lastTransition":"2026-01-01T00:00:00Z","agentVersion":"v1.2.0",` +
		`"gpus":[{"index":0,"uuid":"GPU-a","model":"H100-80GB","migMode":"disabled","replicas":1}]}`
	tests := []struct {
		name   string
		objs   []runtime.Object
		args   []string
		code   int
		stderr string
	}{
		{"no such node", planNodeObjects(planNodeRecord(t)), []string{"--node", "gpu-z"}, 2, "node gpu-z not found"},
		{"no record", planNodeObjects(""), []string{"--node", "gpu-a"}, 2, "node gpu-a has no carve record (annotation carve.dev/partition)"},
		{"record too old", planNodeObjects(old), []string{"--node", "gpu-a"}, 2,
			"node gpu-a: cannot plan from its record: GPU 0: no memory (gpus[].memoryMiB), written by carve-agent v1.2.0"},
		{"no ConfigMap", planNodeObjects(planNodeRecord(t))[:1], []string{"--node", "gpu-a"}, 2, "ConfigMap carve-system/carve-profiles not found"},
		{"another ConfigMap", planNodeObjects(planNodeRecord(t)), []string{"--node", "gpu-a", "--config-map", "gpu/profiles"}, 2, "ConfigMap gpu/profiles not found"},
		{"unknown profile", planNodeObjects(planNodeRecord(t)), []string{"--node", "gpu-a", "--profile", "huge"}, 2,
			"--profile huge: ConfigMap carve-system/carve-profiles has no such profile (it has full, small)"},
		{"with --gpus", planNodeObjects(planNodeRecord(t)), []string{"--node", "gpu-a", "--gpus", "nvml"}, 2, "-f, --gpus, --from and --sim-latency do not apply"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCarvectl(t, fake.NewClientset(tt.objs...), append([]string{"plan"}, tt.args...)...)
			if code != tt.code || !strings.Contains(stderr, tt.stderr) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr, tt.code, tt.stderr)
			}
		})
	}
}
