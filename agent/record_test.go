package agent

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/plugin"
)

// recordedNode builds a machine whose GPUs are in every state a plan
// starts from: GPU 0 in MIG mode with a complete instance, a GPU instance
// without compute instances and one whose compute instance does not fill
// it; GPU 1 with MIG enabled pending a reset; GPU 2 (an A100) whole.
func recordedNode(t *testing.T) (partition.Node, string) {
	t.Helper()
	m, err := sim.New("h100-80gb*2,a100-40gb*1")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Init(); err != nil {
		t.Fatal(err)
	}
	dev := func(i int) partition.Device {
		d, err := m.Device(i)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	d0 := dev(0)
	must(d0.SetMIGMode(partition.MIGEnabled))
	must(d0.Reset())
	model, err := partition.ModelFromDevice(d0)
	must(err)
	gi := func(profile string, start, size int) int {
		t.Helper()
		p, ok := model.Profile(profile)
		if !ok {
			t.Fatalf("no profile %s", profile)
		}
		g, err := d0.CreateGPUInstance(p.ID, partition.Placement{Start: start, Size: size})
		must(err)
		return g.ID
	}
	full := gi("3g.40gb", 4, 4)
	ci, err := d0.CreateComputeInstance(full)
	must(err)
	gi("1g.10gb", 0, 1)
	_, err = m.CreateComputeInstanceSlices(0, gi("2g.20gb", 2, 2), 1)
	must(err)
	must(dev(1).SetMIGMode(partition.MIGEnabled))
	node, err := partition.ReadNode(m)
	must(err)
	return node, ci.UUID
}

// TestNodeFromRecordPlansAsTheNode: the GPUs rebuilt from the node record
// plan, for every target, exactly as the GPUs read on the node, with the
// devices in use the record lists.
func TestNodeFromRecordPlansAsTheNode(t *testing.T) {
	node, busy := recordedNode(t)
	rec := carvev1.NodeRecord{AgentVersion: "v1", GPUs: GPURecords(node.GPUs, nil, nil),
		InUse: &carvev1.InUseRecord{Devices: []carvev1.DeviceInUse{{UUID: busy, Pods: []string{"ml/train"}}}}}
	enc, err := rec.Encode()
	if err != nil {
		t.Fatal(err)
	}
	decoded, err := carvev1.DecodeNodeRecord(enc)
	if err != nil {
		t.Fatal(err)
	}
	back, err := partition.NodeFromRecord(decoded)
	if err != nil {
		t.Fatal(err)
	}
	inUse, err := partition.InUseFromRecord(decoded)
	if err != nil {
		t.Fatal(err)
	}
	mig := func(m map[string]int) partition.Target { return partition.Target{MIG: m} }
	targets := []map[int]partition.Target{
		{0: mig(map[string]int{"3g.40gb": 1, "1g.10gb": 2, "2g.20gb": 1}), 1: mig(map[string]int{"7g.80gb": 1}), 2: mig(map[string]int{"1g.5gb": 7})},
		{0: {}, 1: {}, 2: {}},
		{0: mig(map[string]int{"1g.10gb": 7}), 1: mig(map[string]int{}), 2: {}},
		{0: mig(map[string]int{"2g.20gb": 1, "1g.10gb": 1}), 1: {}, 2: mig(map[string]int{"3g.20gb": 2})},
	}
	for i, tg := range targets {
		for _, busySet := range []map[string]bool{nil, {busy: true}} {
			want, werr := partition.PlanNode(node.GPUs, node.Models, tg, busySet)
			gotBusy := map[string]bool{}
			if busySet != nil {
				gotBusy = inUse
			}
			got, gerr := partition.PlanNode(back.GPUs, back.Models, tg, gotBusy)
			if (werr == nil) != (gerr == nil) {
				t.Fatalf("target %d: errors %v and %v", i, werr, gerr)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("target %d (in use %v): the plan from the record differs (-node +record):\n%s", i, busySet, diff)
			}
		}
	}
}

// TestNodeFromRecordTooOld: a record an older agent wrote names what it
// lacks.
func TestNodeFromRecordTooOld(t *testing.T) {
	old := carvev1.NodeRecord{AgentVersion: "v0.9.0", GPUs: []carvev1.GPURecord{{Index: 0, UUID: "GPU-a", Model: "H100-80GB", MIGMode: "disabled"}}}
	_, err := partition.NodeFromRecord(old)
	if !errors.Is(err, partition.ErrRecordTooOld) || !strings.Contains(err.Error(), "GPU 0: no memory (gpus[].memoryMiB), written by carve-agent v0.9.0") {
		t.Errorf("NodeFromRecord = %v, want it to name gpus[].memoryMiB and the agent", err)
	}
	if _, err := partition.InUseFromRecord(old); !errors.Is(err, partition.ErrRecordTooOld) || !strings.Contains(err.Error(), "(inUse)") {
		t.Errorf("InUseFromRecord = %v, want it to name inUse", err)
	}
}

// TestInUseRecord: each device once, by UUID, with its pods sorted, each
// once; a claim that holds a device for no pod is named by the claim.
func TestInUseRecord(t *testing.T) {
	u := &plugin.InUse{
		Assignments: []plugin.Assignment{
			{Namespace: "ml", Pod: "train", Container: "a", UUIDs: []string{"MIG-b"}},
			{Namespace: "ml", Pod: "train", Container: "b", UUIDs: []string{"MIG-b"}},
			{Namespace: "ml", Pod: "eval", UUIDs: []string{"MIG-b", "GPU-a"}},
			{Namespace: "ml", Resource: "resourceclaim/spare", UUIDs: []string{"MIG-c"}},
		},
		UUIDs: []string{"GPU-a", "MIG-b", "MIG-c"},
	}
	want := &carvev1.InUseRecord{Devices: []carvev1.DeviceInUse{
		{UUID: "GPU-a", Pods: []string{"ml/eval"}},
		{UUID: "MIG-b", Pods: []string{"ml/eval", "ml/train"}},
		{UUID: "MIG-c", Pods: []string{"ml/resourceclaim/spare"}},
	}}
	if diff := cmp.Diff(want, InUseRecord(u)); diff != "" {
		t.Errorf("InUseRecord (-want +got):\n%s", diff)
	}
}
