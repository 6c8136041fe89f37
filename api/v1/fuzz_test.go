package v1

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// equateEmptySlices treats nil and empty slices as equal, as omitempty
// encodes both the same way. Maps are compared as they are: a nil
// Target.MIG (MIG off) and an empty one (MIG on, no instances) differ.
func equateEmptySlices() cmp.Option {
	return cmp.FilterValues(func(x, y any) bool {
		vx, vy := reflect.ValueOf(x), reflect.ValueOf(y)
		return vx.Kind() == reflect.Slice && vy.Kind() == reflect.Slice && vx.Len() == 0 && vy.Len() == 0
	}, cmp.Comparer(func(_, _ any) bool { return true }))
}

// recordSeeds returns records as the agent writes them: the one of
// TestNodeRecordRoundTrip, an empty one, and one with every field set.
func recordSeeds() []NodeRecord {
	return []NodeRecord{
		{Profile: "balanced", ProfileHash: "abc", State: StateSuccess, Generation: 3,
			LastTransition: "2026-01-02T03:04:05Z", Selected: &SelectedProfile{Profile: "balanced", Source: "label"},
			GPUs:   []GPURecord{{Index: 0, UUID: "GPU-0", Model: "H100-80GB", MIGMode: "enabled", Instances: []InstanceRecord{{Profile: "1g.10gb", GIID: 9, UUID: "MIG-0"}}}},
			Labels: []string{LabelApplied, LabelGPUCount}},
		{},
		{Profile: "inference", ProfileHash: "0123456789abcdef", State: StateFailed, Generation: 1 << 40,
			LastTransition: "2026-02-01T00:00:00Z", LastError: "GPU 1: reset: in use <&>",
			Selected: &SelectedProfile{Profile: "training", Source: "window", Window: "nightly"},
			GPUs: []GPURecord{
				{Index: 0, UUID: "GPU-a", Model: "A100-40GB", MIGMode: "disabled", PendingMIGMode: "enabled", Replicas: 4, RenameShared: true, FailRequestsGreaterThanOne: true},
				{Index: 1, UUID: "GPU-b", Model: "H100-80GB", MIGMode: "enabled", Instances: []InstanceRecord{
					{Profile: "3g.40gb", Placement: Placement{Start: 4, Size: 4}, GIID: 2, UUID: "MIG-b2", Replicas: 2},
					{Profile: "1g.10gb+me", Placement: Placement{Start: 0, Size: 1}, GIID: 7},
				}},
				{Index: 2, UUID: "GPU-c", Model: "L4-24GB", MIGMode: "unsupported"},
			},
			Labels: []string{LabelGPUCount, "nvidia.com/mig-3g.40gb.count"}},
	}
}

// FuzzNodeRecord feeds arbitrary strings to DecodeNodeRecord, the decoder
// of the carve.dev/partition annotation. Invariants: it never panics; it
// refuses what is not JSON; what it accepts is what encoding/json reads
// from the input, and re-encodes (Encode) to compact JSON that decodes to
// an equal record (nil and empty lists aside, which encode alike) with the
// same content, and encodes again to the same bytes.
func FuzzNodeRecord(f *testing.F) {
	for _, r := range recordSeeds() {
		enc, err := r.Encode()
		if err != nil {
			f.Fatal(err)
		}
		back, err := DecodeNodeRecord(enc)
		if err != nil {
			f.Fatalf("seed %s: %v", enc, err)
		}
		if diff := cmp.Diff(r, back, equateEmptySlices()); diff != "" {
			f.Fatalf("seed changes through Encode and DecodeNodeRecord (-seed +decoded):\n%s", diff)
		}
		f.Add(enc)
	}
	for _, s := range []string{
		``,
		`{not json`,
		`null`,
		`[]`,
		`{"profile": 1}`,
		`{"gpus": [{"index": "0"}]}`,
		`{"gpus": [{"instances": [{"placement": {"start": 1e3}}]}]}`,
		`{"generation": 9223372036854775808}`,
		`{"profile": "a"} {"profile": "b"}`,
		`{"profile": "a"}}`,
		`{"PROFILE": "a", "profile": "b", "selected": {"profile": "x"}, "selected": {"source": "rule"}}`,
		`{"lastError": "\ud800 \u00e9 \xff"}`,
		`{"extra": true, "profile": "a"}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := DecodeNodeRecord(s)
		if err != nil {
			return
		}
		var plain NodeRecord
		if err := json.Unmarshal([]byte(s), &plain); err != nil {
			t.Fatalf("DecodeNodeRecord accepted what encoding/json refuses (%v): %q", err, s)
		}
		if diff := cmp.Diff(plain, r); diff != "" {
			t.Fatalf("DecodeNodeRecord differs from the JSON it read (-JSON +decoded):\n%s", diff)
		}
		enc := mustEncodeRecord(t, r)
		back, err := DecodeNodeRecord(enc)
		if err != nil {
			t.Fatalf("DecodeNodeRecord of its own Encode: %v\n%s", err, enc)
		}
		if diff := cmp.Diff(r, back, equateEmptySlices()); diff != "" {
			t.Fatalf("record changes through Encode (-decoded +again):\n%s", diff)
		}
		if !r.SameContent(back) {
			t.Fatalf("record and its re-decoding differ in content:\n%s", enc)
		}
		if again := mustEncodeRecord(t, back); again != enc {
			t.Fatalf("Encode is not stable:\n%s\n%s", enc, again)
		}
	})
}

// mustEncodeRecord encodes r, and checks the result is compact JSON.
func mustEncodeRecord(t *testing.T, r NodeRecord) string {
	t.Helper()
	enc, err := r.Encode()
	if err != nil {
		t.Fatalf("Encode of a decoded record: %v", err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(enc)); err != nil || compact.String() != enc {
		t.Fatalf("Encode gave no compact JSON (%v):\n%s", err, enc)
	}
	return enc
}

// checkpointSeeds returns checkpoints as the agent writes them: the one of
// TestCheckpointVersion, and one with a plan of every kind of op, instance
// status and blocker, a GPU going whole (nil MIG target) and one going MIG
// with no instances (empty target).
func checkpointSeeds() []Checkpoint {
	return []Checkpoint{
		{Profile: "p", Done: map[int]int{0: 2, 3: 1}},
		{Profile: "balanced", ProfileHash: "abc",
			Started: time.Date(2026, 3, 4, 5, 6, 7, 8, time.FixedZone("CET", 3600)),
			Done:    map[int]int{0: 0, 1: 5, 7: 1},
			Plan:    goldenNodePlan()},
	}
}

// FuzzCheckpoint feeds arbitrary bytes to DecodeCheckpoint. Invariants: it
// never panics; it refuses what is not JSON and any version but
// CheckpointVersion; what it accepts is what encoding/json reads from the
// input, and re-encodes (Encode) to a checkpoint that decodes to an equal
// one (times by Equal; nil and empty lists aside, but a nil MIG target
// stays apart from an empty one) with the same ops done, and encodes again
// to the same bytes; and the same encoding with any other version is
// refused.
func FuzzCheckpoint(f *testing.F) {
	for _, c := range checkpointSeeds() {
		enc, err := c.Encode()
		if err != nil {
			f.Fatal(err)
		}
		back, err := DecodeCheckpoint(enc)
		if err != nil {
			f.Fatalf("seed %s: %v", enc, err)
		}
		c.Version = CheckpointVersion
		if diff := cmp.Diff(c, back, equateEmptySlices()); diff != "" {
			f.Fatalf("seed changes through Encode and DecodeCheckpoint (-seed +decoded):\n%s", diff)
		}
		f.Add(enc)
	}
	for _, s := range []string{
		``,
		`{not json`,
		`null`,
		`{}`,
		`{"version": 2}`,
		`{"version": "1"}`,
		`{"version": 1.0}`,
		`{"version": 1, "started": "2026-13-01T00:00:00Z"}`,
		`{"version": 1, "started": "9999-12-31T23:59:59-23:59"}`,
		`{"version": 1, "done": {"x": 1}}`,
		`{"version": 1, "done": {"01": 1, "1": 2}}`,
		`{"version": 1, "plan": {"gpus": [{"target": {"mig": null}}, {"target": {"mig": {}}}]}}`,
		`{"version": 1} {"version": 1}`,
		`{"version": 1}}`,
		`{"version": 1, "extra": true}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := DecodeCheckpoint(data)
		if err != nil {
			return
		}
		var plain Checkpoint
		if err := json.Unmarshal(data, &plain); err != nil {
			t.Fatalf("DecodeCheckpoint accepted what encoding/json refuses (%v): %q", err, data)
		}
		if diff := cmp.Diff(plain, c); diff != "" {
			t.Fatalf("DecodeCheckpoint differs from the JSON it read (-JSON +decoded):\n%s", diff)
		}
		if c.Version != CheckpointVersion {
			t.Fatalf("DecodeCheckpoint accepted version %d", c.Version)
		}
		enc, err := c.Encode()
		if err != nil {
			t.Fatalf("Encode of a decoded checkpoint: %v", err)
		}
		back, err := DecodeCheckpoint(enc)
		if err != nil {
			t.Fatalf("DecodeCheckpoint of its own Encode: %v\n%s", err, enc)
		}
		if diff := cmp.Diff(c, back, equateEmptySlices()); diff != "" {
			t.Fatalf("checkpoint changes through Encode (-decoded +again):\n%s", diff)
		}
		if back.OpsDone() != c.OpsDone() {
			t.Fatalf("ops done %d, after Encode %d", c.OpsDone(), back.OpsDone())
		}
		again, err := back.Encode()
		if err != nil || !bytes.Equal(again, enc) {
			t.Fatalf("Encode is not stable (%v):\n%s\n%s", err, enc, again)
		}
		checkVersionRefused(t, enc)
	})
}

// checkVersionRefused checks that enc, a valid encoding, is refused with
// any other version.
func checkVersionRefused(t *testing.T, enc []byte) {
	t.Helper()
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(enc, &fields); err != nil {
		t.Fatalf("Encode gave no JSON object: %v\n%s", err, enc)
	}
	for _, v := range []string{"0", "2", "-1", "null", `"1"`} {
		fields["version"] = json.RawMessage(v)
		other, err := json.Marshal(fields)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeCheckpoint(other); err == nil {
			t.Fatalf("DecodeCheckpoint accepted version %s:\n%s", v, other)
		}
	}
}
