package v1

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// update rewrites the golden files from the values below: go test
// ./api/v1 -run Golden -update. Only do so on purpose, for a field added
// to a format; the diff of testdata is the change to the format.
var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden is one persisted or public format: a fully-populated value, its
// golden file, and how carve encodes and decodes it.
type golden struct {
	file   string
	value  any
	encode func() ([]byte, error)
	// decode reads data as carve reads the format and returns the value.
	decode func(data []byte) (any, error)
}

func goldens() []golden {
	rec, cp, plan, claims, xid := goldenRecord(), goldenCheckpoint(), goldenPlanDocument(), goldenPreparedClaims(), goldenXIDHealth()
	return []golden{
		{"record-v1.json", rec,
			func() ([]byte, error) { s, err := rec.Encode(); return []byte(s), err },
			func(d []byte) (any, error) { return DecodeNodeRecord(string(d)) }},
		{"checkpoint-v1.json", cp, cp.Encode,
			func(d []byte) (any, error) { return DecodeCheckpoint(d) }},
		{"plan-v1.json", plan,
			func() ([]byte, error) { return json.Marshal(plan) },
			func(d []byte) (any, error) { var p PlanDocument; err := decodeStrict(d, &p); return p, err }},
		{"claims-v1.json", claims, claims.Encode,
			func(d []byte) (any, error) { return DecodePreparedClaims(d) }},
		{"xid-health-v1.json", xid, xid.Encode,
			func(d []byte) (any, error) { return DecodeXIDHealth(d) }},
	}
}

// goldenXIDHealth is a record of devices critical XIDs made unhealthy: a
// whole GPU and a MIG device of another.
func goldenXIDHealth() XIDHealth {
	at := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	return XIDHealth{Version: XIDHealthVersion, BootID: "6c4f0d3e-7b0a-4d4e-9d1c-2a5b8f1e0c11", Devices: []XIDUnhealthy{
		{UUID: "GPU-11111111-2222-3333-4444-555555555555", GPU: "GPU-11111111-2222-3333-4444-555555555555", XID: 79, At: at},
		{UUID: "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", GPU: "GPU-66666666-7777-8888-9999-000000000000", XID: 94, At: at.Add(time.Minute)},
	}}
}

// TestGolden: each format's golden file decodes, as carve reads it, to the
// fully-populated value, and the value encodes to the golden file's JSON,
// byte for byte once indented. A field renamed, removed, retyped or
// reordered fails here; a field added fails until the golden file is
// updated (-update) and the value sets it (TestGoldenFullyPopulated).
func TestGolden(t *testing.T) {
	for _, g := range goldens() {
		t.Run(g.file, func(t *testing.T) {
			path := filepath.Join("testdata", g.file)
			enc, err := g.encode()
			if err != nil {
				t.Fatal(err)
			}
			var want bytes.Buffer
			if err := json.Indent(&want, enc, "", "  "); err != nil {
				t.Fatalf("encoding is no JSON: %v\n%s", err, enc)
			}
			want.WriteByte('\n')
			if *update {
				if err := os.WriteFile(path, want.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			got, err := g.decode(data)
			if err != nil {
				t.Fatalf("decode %s: %v", path, err)
			}
			if diff := cmp.Diff(g.value, got); diff != "" {
				t.Errorf("%s decodes to another value (-want +decoded):\n%s", path, diff)
			}
			if diff := cmp.Diff(string(data), want.String()); diff != "" {
				t.Errorf("the value encodes other than %s (-golden +encoded); run go test ./api/v1 -run Golden -update only if the format is meant to change:\n%s", path, diff)
			}
		})
	}
}

// TestGoldenFullyPopulated: the golden values set every field of their
// formats somewhere, so that the golden files pin every field.
func TestGoldenFullyPopulated(t *testing.T) {
	for _, g := range goldens() {
		v := reflect.ValueOf(g.value)
		all, set := map[string]bool{}, map[string]bool{}
		fieldPaths(v.Type(), v.Type().Name(), all)
		setPaths(v, v.Type().Name(), set)
		var missing []string
		for p := range all {
			if !set[p] {
				missing = append(missing, p)
			}
		}
		slices.Sort(missing)
		if len(missing) > 0 {
			t.Errorf("%s: the golden value leaves unset: %v", g.file, missing)
		}
	}
}

// ownStruct reports whether t is a struct of this package (time.Time and
// the like are leaves).
func ownStruct(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && t.PkgPath() == reflect.TypeFor[NodeRecord]().PkgPath()
}

// fieldPaths adds the path of every field reachable from t to out.
func fieldPaths(t reflect.Type, path string, out map[string]bool) {
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map:
		fieldPaths(t.Elem(), path+"[]", out)
		return
	}
	if !ownStruct(t) {
		return
	}
	for f := range t.Fields() {
		out[path+"."+f.Name] = true
		fieldPaths(f.Type, path+"."+f.Name, out)
	}
}

// setPaths adds the path of every field that is not zero somewhere in v
// to out.
func setPaths(v reflect.Value, path string, out map[string]bool) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			setPaths(v.Elem(), path+"[]", out)
		}
		return
	case reflect.Slice:
		for i := range v.Len() {
			setPaths(v.Index(i), path+"[]", out)
		}
		return
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			setPaths(it.Value(), path+"[]", out)
		}
		return
	}
	if !ownStruct(v.Type()) {
		return
	}
	for i := range v.NumField() {
		p := path + "." + v.Type().Field(i).Name
		if !v.Field(i).IsZero() {
			out[p] = true
		}
		setPaths(v.Field(i), p, out)
	}
}

// goldenRecord is a node record with every field set.
func goldenRecord() NodeRecord {
	return NodeRecord{
		Profile: "balanced", ProfileHash: "0123456789abcdef",
		Selected: &SelectedProfile{Profile: "training", Source: "window", Window: "nightly", PinLabel: "nvidia.com/mig.config"},
		State:    StateDraining, Generation: 7, LastTransition: "2026-02-01T00:00:00Z", ConfigMap: "carve-system/carve-profiles", AgentVersion: "v0.1.0",
		LastError: "GPU 1: reset: in use", Waiting: "a rollout slot: all 1 are taken",
		Change: &ChangeRecord{Since: "2026-02-01T00:00:00Z", Profile: "training", Slot: "carve-rollout-carve-profiles-0"},
		GPUs: []GPURecord{
			{Index: 0, UUID: "GPU-a", Model: "A100-40GB", Product: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960,
				MIGMode: "disabled", PendingMIGMode: "enabled",
				Replicas: 4, RenameShared: true, FailRequestsGreaterThanOne: true},
			{Index: 1, UUID: "GPU-b", Model: "H100-80GB", MIGMode: "enabled", Instances: []InstanceRecord{
				{Profile: "1g.10gb+me", Placement: Placement{Start: 0, Size: 1}, GIID: 7},
				{Profile: "3g.40gb", Placement: Placement{Start: 4, Size: 4}, GIID: 2, UUID: "MIG-b2", Replicas: 2,
					ComputeInstances: []ComputeInstanceRecord{{ID: 1, ComputeSlices: 3, UUID: "MIG-b2"}}},
			}},
			{Index: 2, UUID: "GPU-c", Model: "H100-80GB", MIGMode: "enabled", NotAdvertised: NotAdvertisedLost},
			{Index: 3, UUID: "GPU-d", Model: "H100-80GB", MIGMode: "enabled", Instances: []InstanceRecord{
				{Profile: "3g.40gb", Placement: Placement{Start: 4, Size: 4}, GIID: 1, UUID: "MIG-d1",
					ComputeInstances: []ComputeInstanceRecord{{ID: 0, ComputeSlices: 3, UUID: "MIG-d1"}},
					Claim:            &ClaimRecord{UID: "0b5c7e3a-uid", Namespace: "ml", Name: "dyn-big", State: InstanceMade}},
			}, Dynamic: &DynamicRecord{Profiles: []string{"1g.10gb", "3g.40gb"}, Offered: true}},
		},
		InUse:    &InUseRecord{Devices: []DeviceInUse{{UUID: "MIG-b2", Pods: []string{"ml/train-0"}}}},
		Applying: &ApplyRecord{Profile: "training", Started: "2026-02-01T00:00:00Z", OpsDone: 2, Ops: 6},
		Labels:   []string{LabelGPUCount, "nvidia.com/mig-3g.40gb.count"},
	}
}

// goldenNodePlan is a plan with every kind of op, instance status and
// blocker, a GPU going whole (null MIG target) and one going MIG with no
// instances (empty target).
func goldenNodePlan() NodePlan {
	gpuOp := func(k OpKind) Op { return Op{Kind: k, ProfileID: -1, GIID: -1, CIID: -1} }
	at := Placement{Start: 4, Size: 4}
	return NodePlan{GPUs: []GPUPlan{
		{Index: 0, UUID: "GPU-0", Model: "H100-80GB", Mode: "enabled", PendingMode: "enabled",
			Target: Target{MIG: map[string]int{"3g.40gb": 1, "1g.10gb": 2}},
			Instances: []PlannedInstance{
				{Profile: "1g.10gb", ProfileID: 19, Placement: Placement{Start: 0, Size: 1}, Status: StatusKept, GIID: 9, UUID: "MIG-9"},
				{Profile: "1g.10gb", ProfileID: 19, Placement: Placement{Start: 1, Size: 1}, Status: StatusRepair, GIID: 10},
				{Profile: "3g.40gb", ProfileID: 9, Placement: at, Status: StatusNew, GIID: -1},
			},
			Ops: []Op{
				{Kind: OpDestroyCI, Profile: "2g.20gb", ProfileID: 14, Placement: at, GIID: 3, CIID: 0, UUID: "MIG-3"},
				{Kind: OpDestroyGI, Profile: "2g.20gb", ProfileID: 14, Placement: at, GIID: 3, CIID: -1},
				{Kind: OpCreateGI, Profile: "3g.40gb", ProfileID: 9, Placement: at, GIID: -1, CIID: -1},
				{Kind: OpCreateCI, Profile: "3g.40gb", ProfileID: 9, Placement: at, GIID: -1, CIID: -1},
			}},
		{Index: 1, UUID: "GPU-1", Model: "A100-40GB", Mode: "disabled", PendingMode: "disabled",
			Target:    Target{MIG: map[string]int{}},
			Instances: []PlannedInstance{}, Ops: []Op{},
			Blocked: []Blocker{{UUID: "GPU-1", GIID: -1, Reason: "in use; enabling MIG resets the GPU"}},
			WouldDo: []Op{gpuOp(OpEnableMIG), gpuOp(OpResetGPU)}, NeedsReset: true},
		{Index: 2, UUID: "GPU-2", Model: "H100-80GB", Mode: "enabled", PendingMode: "enabled",
			Instances: []PlannedInstance{},
			Ops:       []Op{gpuOp(OpDisableMIG), gpuOp(OpResetGPU)}, NeedsReset: true},
		{Index: 3, UUID: "GPU-3", Model: "H100-80GB", Mode: "enabled", PendingMode: "enabled",
			Target:    Target{MIG: map[string]int{"7g.80gb": 1}},
			Instances: []PlannedInstance{{Profile: "7g.80gb", ProfileID: 0, Placement: Placement{Start: 0, Size: 8}, Status: StatusNew, GIID: -1}},
			Ops:       []Op{},
			Blocked:   []Blocker{{UUID: "MIG-7", Profile: "1g.10gb", Placement: Placement{Start: 6, Size: 1}, GIID: 7, Reason: "in use; the plan destroys it"}},
			WouldDo: []Op{
				{Kind: OpDestroyCI, Profile: "1g.10gb", ProfileID: 19, Placement: Placement{Start: 6, Size: 1}, GIID: 7, CIID: 0, UUID: "MIG-7"},
				{Kind: OpDestroyGI, Profile: "1g.10gb", ProfileID: 19, Placement: Placement{Start: 6, Size: 1}, GIID: 7, CIID: -1},
				{Kind: OpCreateGI, Profile: "7g.80gb", ProfileID: 0, Placement: Placement{Start: 0, Size: 8}, GIID: -1, CIID: -1},
				{Kind: OpCreateCI, Profile: "7g.80gb", ProfileID: 0, Placement: Placement{Start: 0, Size: 8}, GIID: -1, CIID: -1},
			}},
	}}
}

// goldenCheckpoint is a checkpoint with every field set.
func goldenCheckpoint() Checkpoint {
	return Checkpoint{
		Version: CheckpointVersion, Profile: "balanced", ProfileHash: "0123456789abcdef",
		Started: time.Date(2026, 3, 4, 5, 6, 7, 8, time.FixedZone("CET", 3600)),
		Plan:    goldenNodePlan(),
		Done:    map[int]int{0: 3, 2: 1},
		Paused:  map[string]string{OperandLabel("dcgm-exporter"): "true", OperandLabel("device-plugin"): "true"},
	}
}

// goldenPlanDocument is a plan document with every field set.
func goldenPlanDocument() PlanDocument {
	return PlanDocument{
		Profile: "balanced", GPUs: "sim:dgx-h100", Plan: goldenNodePlan(),
		Resources:  map[string]int{"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-3g.40gb": 1},
		NeedsReset: true,
	}
}

// goldenPreparedClaims is a record of prepared claims with every field
// set.
func goldenPreparedClaims() PreparedClaims {
	return PreparedClaims{Version: PreparedClaimsVersion, Claims: map[string]PreparedClaim{
		"0b5c7e3a-uid": {Namespace: "ml", Name: "train-gpu", CDISpec: "/var/run/cdi/carve-0b5c7e3a-uid.json",
			Devices: []PreparedDevice{
				{Request: "gpu", Device: "gpu-0", UUID: "GPU-0", CDIDevices: []string{"gpu.carve.dev/claim=0b5c7e3a-uid-gpu-0"}},
				{Request: "mig/small", Device: "gpu-1-mig-1g10gb-19-0", UUID: "MIG-1", ShareID: "2",
					CDIDevices: []string{"gpu.carve.dev/claim=0b5c7e3a-uid-gpu-1-mig"}},
			}},
	}, Instances: map[string]ClaimInstance{
		"gpu-4-dyn-3g40gb-4": {Claim: "0b5c7e3a-uid", GPU: "GPU-4", GPUIndex: 4, Profile: "3g.40gb", ProfileID: 2,
			Placement: Placement{Start: 4, Size: 4}, State: InstanceMade, UUID: "MIG-4-3g"},
	}}
}

// withUnknownFields returns the JSON object data with a field this version
// does not know added to it and, when deep, to every object in it, as a
// newer agent might write.
func withUnknownFields(t *testing.T, data []byte, deep bool) []byte {
	t.Helper()
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	var add func(any)
	add = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for _, e := range v {
				if deep {
					add(e)
				}
			}
			v["fromANewerAgent"] = map[string]any{"list": []any{1, "two"}}
		case []any:
			for _, e := range v {
				add(e)
			}
		}
	}
	add(v)
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestNodeRecordFromNewerAgent: an agent or carvectl reads the record a
// newer agent wrote, with fields it does not know at every level, as the
// record of the fields it knows (during a rolling upgrade, and after a
// rollback, the older agent reads the newer one's record); writing it back
// drops the unknown fields.
func TestNodeRecordFromNewerAgent(t *testing.T) {
	want := goldenRecord()
	enc, err := want.Encode()
	if err != nil {
		t.Fatal(err)
	}
	newer := withUnknownFields(t, []byte(enc), true)
	got, err := DecodeNodeRecord(string(newer))
	if err != nil {
		t.Fatalf("the newer record is refused: %v\n%s", err, newer)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the newer record reads other than the fields known (-want +got):\n%s", diff)
	}
	again, err := got.Encode()
	if err != nil || again != enc {
		t.Errorf("the newer record, written back (%v):\n%s\nwant\n%s", err, again, enc)
	}
}

// TestStateFilesFromNewerAgent: a checkpoint or a record of prepared
// claims that a newer agent wrote, with a field this version does not know
// (in its top-level object here; the decoder refuses one at any level) or
// another format version, is refused: the agent re-plans from the GPUs as
// they are instead of resuming the checkpoint, and the DRA driver does not
// start rather than forget claims it prepared (docs/versioning.md).
func TestStateFilesFromNewerAgent(t *testing.T) {
	cp, err := goldenCheckpoint().Encode()
	if err != nil {
		t.Fatal(err)
	}
	claims, err := goldenPreparedClaims().Encode()
	if err != nil {
		t.Fatal(err)
	}
	xid, err := goldenXIDHealth().Encode()
	if err != nil {
		t.Fatal(err)
	}
	decoders := map[string]func([]byte) error{
		"checkpoint":      func(d []byte) error { _, err := DecodeCheckpoint(d); return err },
		"prepared claims": func(d []byte) error { _, err := DecodePreparedClaims(d); return err },
		"XID health":      func(d []byte) error { _, err := DecodeXIDHealth(d); return err },
	}
	for name, data := range map[string][]byte{"checkpoint": cp, "prepared claims": claims, "XID health": xid} {
		if err := decoders[name](data); err != nil {
			t.Fatalf("%s: the golden value is refused: %v", name, err)
		}
		if err := decoders[name](withUnknownFields(t, data, false)); err == nil || !strings.Contains(err.Error(), "unknown field") {
			t.Errorf("%s with unknown fields: err %v, want one naming the unknown field", name, err)
		}
		next := bytes.Replace(data, []byte(`"version":1`), []byte(`"version":2`), 1)
		next = bytes.Replace(next, []byte(`"version": 1`), []byte(`"version": 2`), 1)
		if bytes.Equal(next, data) {
			t.Fatalf("%s: no version field in\n%s", name, data)
		}
		if err := decoders[name](next); err == nil || !strings.Contains(err.Error(), "format version 2") {
			t.Errorf("%s of format version 2: err %v, want one naming the version", name, err)
		}
	}
}

// TestNodeRecordFromOlderAgent: a record an agent wrote before the record
// held what a plan needs (products, memory, compute instances, devices in
// use) reads with those fields empty, so that a reader can tell it apart
// and name what is missing.
func TestNodeRecordFromOlderAgent(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "record-v1-no-inventory.json"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeNodeRecord(string(data))
	if err != nil {
		t.Fatal(err)
	}
	if got.InUse != nil || got.Applying != nil {
		t.Errorf("inUse %+v applying %+v, want both nil", got.InUse, got.Applying)
	}
	for _, g := range got.GPUs {
		if g.Product != "" || g.MemoryMiB != 0 {
			t.Errorf("GPU %d: product %q memory %d, want none", g.Index, g.Product, g.MemoryMiB)
		}
		for _, in := range g.Instances {
			if in.ComputeInstances != nil {
				t.Errorf("GPU %d instance %v: compute instances %v, want nil", g.Index, in.Placement, in.ComputeInstances)
			}
		}
	}
}
