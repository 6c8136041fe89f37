package sim_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
)

// FuzzStateFile feeds arbitrary bytes to the state file decoder
// (ParseState, NewFromState, LoadState). Invariants: it never panics; what
// ParseState refuses NewFromState refuses too; what ParseState accepts is
// exactly one JSON object, of the current version, naming a machine, is
// what encoding/json reads from it, and re-encodes (Marshal) to a state
// that parses to the same; what
// NewFromState accepts gives an internally consistent machine (every GPU
// of the spec, by index, with its model; MIG modes "enabled" or
// "disabled", none on GPUs without MIG; GPU instances only with MIG
// enabled now and pending, at allowed placements of known profiles, within
// the GPU, not overlapping, within the per-profile maxima, one "+me" at
// most, compute slices within the GPU's; GI IDs from 1 and CI IDs from 0,
// unique, in order; compute instances within their GPU instance; GPU and
// MIG device UUIDs unique), which LoadState accepts as well, and whose
// snapshot re-encodes and decodes to the same machine.
func FuzzStateFile(f *testing.F) {
	for _, seed := range validStates(f) {
		f.Add(seed)
	}
	for _, seed := range []string{
		`{"version": 1, "machine": "sim:a30x4", "gpus": [{"index": 2, "migMode": "Enabled", "rebootOnly": true, "instances": [
			{"giID": 3, "profile": "2g.12gb", "placement": {"start": 2}, "cis": [{"id": 0}]},
			{"giID": 1, "profileID": 0, "placement": {"start": 0, "size": 1}, "cis": [{"id": 2, "computeSlices": 1}]}]}]}`,
		`{"version": 1, "machine": "l4-24gb,a30-24gb*2", "gpus": [{"index": 0, "migMode": "disabled"}, {"index": 1, "migMode": "disabled", "pendingMIGMode": "enabled"}]}`,
		// Refused: these must stay refused.
		``,
		`{not json`,
		`{"version": 2, "machine": "a30x4", "gpus": []}`,
		`{"version": 1, "gpus": []}`,
		`{"version": 1, "machine": "a30x4", "gpus": [], "extra": 1}`,
		`{"version": 1, "machine": "a30x4", "gpus": []} {}`,
		// Accepted before the fix: a stray closing bracket after the object.
		`{"version": 1, "machine": "a30x4", "gpus": []}}`,
		`{"version": 1, "machine": "a30x4", "gpus": [{"index": 1}, {"index": 1}]}`,
		`{"version": 1, "machine": "a30x4", "gpus": [{"index": 0, "instances": [{"giID": 1, "profile": "4g.24gb", "placement": {"start": 0}}]}]}`,
		`{"version": 1, "machine": "a30x4", "gpus": [{"index": 0, "migMode": "enabled", "instances": [
			{"giID": 1, "profile": "2g.12gb", "placement": {"start": 0}}, {"giID": 2, "profile": "1g.6gb", "placement": {"start": 1}}]}]}`,
		`{"version": 1, "machine": "a30x4", "gpus": [{"index": 0, "migMode": "enabled", "instances": [
			{"giID": 1, "profile": "2g.12gb+me", "placement": {"start": 0}}, {"giID": 2, "profile": "1g.6gb+me", "placement": {"start": 2}}]}]}`,
		`{"version": 1, "machine": "a30x4", "gpus": [{"index": 0, "migMode": "enabled", "instances": [
			{"giID": 1, "profile": "2g.12gb", "placement": {"start": 0}}, {"giID": 1, "profile": "2g.12gb", "placement": {"start": 2}}]}]}`,
		`{"version": 1, "machine": "a30x4", "gpus": [{"index": 0, "migMode": "enabled", "instances": [
			{"giID": 1, "profile": "2g.12gb", "cis": [{"id": 0}, {"id": 1, "computeSlices": 1}]}]}]}`,
		`{"version": 1, "machine": "a30x4", "gpus": [{"index": 0, "migMode": "enabled", "pendingMIGMode": "disabled", "instances": [{"giID": 1, "profile": "4g.24gb"}]}]}`,
		`{"version": 1, "machine": "l4-24gb", "gpus": [{"index": 0, "migMode": "enabled"}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		st, parseErr := sim.ParseState(data)
		m, err := sim.NewFromState(data)
		if parseErr != nil {
			if err == nil {
				t.Fatalf("ParseState refused the state (%v) but NewFromState accepted it", parseErr)
			}
			return
		}
		checkParsed(t, data, st)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("NewFromState: empty error")
			}
			return
		}
		snap := m.Snapshot()
		checkConsistent(t, m.Spec(), snap)

		enc, err := snap.Marshal()
		if err != nil {
			t.Fatalf("Marshal of an accepted state: %v", err)
		}
		again, err := sim.NewFromState(enc)
		if err != nil {
			t.Fatalf("the re-encoded state is refused: %v\n%s", err, enc)
		}
		if diff := cmp.Diff(snap, again.Snapshot()); diff != "" {
			t.Fatalf("re-encoded state decodes to another machine (-first +again):\n%s", diff)
		}
		fresh, err := sim.New(m.Spec().Name)
		if err != nil {
			t.Fatalf("New(%q): %v", m.Spec().Name, err)
		}
		if err := fresh.LoadState(data); err != nil {
			t.Fatalf("NewFromState accepted the state, LoadState refused it: %v", err)
		}
		if diff := cmp.Diff(snap, fresh.Snapshot()); diff != "" {
			t.Fatalf("LoadState and NewFromState disagree (-NewFromState +LoadState):\n%s", diff)
		}
	})
}

// checkParsed checks what ParseState accepted: one JSON object, the right
// version, a machine, what encoding/json reads from it, and a Marshal that
// parses back to the same state.
func checkParsed(t *testing.T, data []byte, st sim.State) {
	t.Helper()
	if !json.Valid(data) || !strings.HasPrefix(strings.TrimSpace(string(data)), "{") {
		t.Fatalf("ParseState accepted input that is not one JSON object: %q", data)
	}
	if st.Version != sim.StateVersion || st.Machine == "" {
		t.Fatalf("ParseState accepted version %d, machine %q", st.Version, st.Machine)
	}
	var plain sim.State
	if err := json.Unmarshal(data, &plain); err != nil {
		t.Fatalf("ParseState accepted what encoding/json refuses (%v): %q", err, data)
	}
	if diff := cmp.Diff(plain, st); diff != "" {
		t.Fatalf("ParseState differs from the JSON it read (-JSON +parsed):\n%s", diff)
	}
	enc, err := st.Marshal()
	if err != nil {
		t.Fatalf("Marshal of a parsed state: %v", err)
	}
	back, err := sim.ParseState(enc)
	if err != nil {
		t.Fatalf("ParseState of its own Marshal: %v\n%s", err, enc)
	}
	if diff := cmp.Diff(st, back, cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("parsed state changes through Marshal (-parsed +again):\n%s", diff)
	}
}

// checkConsistent checks the invariants the simulator relies on in the
// snapshot of a machine of spec.
func checkConsistent(t *testing.T, spec sim.Spec, st sim.State) {
	t.Helper()
	if st.Version != sim.StateVersion || st.Machine != spec.Name || len(st.GPUs) != len(spec.GPUs) {
		t.Fatalf("snapshot version %d, machine %q, %d GPUs; spec %q has %d", st.Version, st.Machine, len(st.GPUs), spec.Name, len(spec.GPUs))
	}
	uuids := map[string]bool{}
	unique := func(what, uuid, prefix string) {
		t.Helper()
		if !strings.HasPrefix(uuid, prefix) || uuids[uuid] {
			t.Fatalf("%s: UUID %q is not a fresh %s... UUID", what, uuid, prefix)
		}
		uuids[uuid] = true
	}
	for i, g := range st.GPUs {
		m := spec.GPUs[i]
		if g.Index != i || g.Model != m.Key {
			t.Fatalf("GPU %d: index %d, model %s; the spec has %s", i, g.Index, g.Model, m.Key)
		}
		unique("GPU "+g.Model, g.UUID, "GPU-")
		if len(m.Profiles) == 0 {
			if g.MIGMode != "" || g.PendingMIGMode != "" || len(g.Instances) > 0 {
				t.Fatalf("GPU %d without MIG: modes %q/%q, %d instances", i, g.MIGMode, g.PendingMIGMode, len(g.Instances))
			}
			continue
		}
		for _, mode := range []string{g.MIGMode, g.PendingMIGMode} {
			if mode != partition.MIGEnabled.String() && mode != partition.MIGDisabled.String() {
				t.Fatalf("GPU %d: MIG mode %q", i, mode)
			}
		}
		if len(g.Instances) > 0 && (g.MIGMode != "enabled" || g.PendingMIGMode != "enabled") {
			t.Fatalf("GPU %d: %d GPU instances with MIG mode %s, pending %s", i, len(g.Instances), g.MIGMode, g.PendingMIGMode)
		}
		checkInstances(t, m, i, g.Instances, unique)
	}
}

// checkInstances checks the GPU instances of GPU i, of model m.
func checkInstances(t *testing.T, m partition.Model, i int, ins []sim.InstanceState, unique func(what, uuid, prefix string)) {
	t.Helper()
	count := map[string]int{}
	compute, me := 0, 0
	var media partition.Engines
	for k, in := range ins {
		p, ok := m.Profile(in.Profile)
		if !ok || in.ProfileID == nil || *in.ProfileID != p.ID {
			t.Fatalf("GPU %d: GPU instance %d: profile %q, ID %v, unknown to %s or mismatched", i, in.GIID, in.Profile, in.ProfileID, m.Key)
		}
		if in.GIID < 1 || (k > 0 && ins[k-1].GIID >= in.GIID) {
			t.Fatalf("GPU %d: GPU instance IDs not from 1, unique and in order: %d after %d", i, in.GIID, ins[max(k-1, 0)].GIID)
		}
		if !slices.Contains(p.Placements, in.Placement) || in.Placement.Start < 0 || in.Placement.End() > m.MemorySlices {
			t.Fatalf("GPU %d: GPU instance %d: %s at %s is not an allowed placement within the GPU", i, in.GIID, p.Name, in.Placement)
		}
		for _, other := range ins[:k] {
			if other.Placement.Overlaps(in.Placement) {
				t.Fatalf("GPU %d: GPU instances %d at %s and %d at %s overlap", i, other.GIID, other.Placement, in.GIID, in.Placement)
			}
		}
		count[p.Name]++
		compute += p.ComputeSlices
		if p.MediaExtensions {
			me++
		}
		media = media.Plus(p.Engines, 1)
		over := media.MediaBeyond(m.MediaEngines())
		if count[p.Name] > p.MaxCount || me > 1 || compute > m.ComputeSlices || len(over) > 0 {
			t.Fatalf("GPU %d: limits broken: %d %s (max %d), %d +me, %d of %d compute slices, media engines over: %v", i, count[p.Name], p.Name, p.MaxCount, me, compute, m.ComputeSlices, over)
		}
		used := 0
		for c, ci := range in.CIs {
			if ci.ID < 0 || (c > 0 && in.CIs[c-1].ID >= ci.ID) {
				t.Fatalf("GPU %d: GPU instance %d: compute instance IDs not from 0, unique and in order: %d", i, in.GIID, ci.ID)
			}
			if ci.ComputeSlices < 1 || ci.ComputeSlices > p.ComputeSlices {
				t.Fatalf("GPU %d: GPU instance %d: compute instance %d has %d compute slices of %d", i, in.GIID, ci.ID, ci.ComputeSlices, p.ComputeSlices)
			}
			used += ci.ComputeSlices
			unique("MIG device", ci.UUID, "MIG-")
		}
		if used > p.ComputeSlices {
			t.Fatalf("GPU %d: GPU instance %d: compute instances use %d of %d compute slices", i, in.GIID, used, p.ComputeSlices)
		}
	}
}

// validStates returns state files of machines built through the NVML
// calls: factory state, MIG on and pending, full and partial compute
// instances, a GPU instance without one, a reboot-only GPU, a GPU without
// MIG.
func validStates(tb testing.TB) [][]byte {
	tb.Helper()
	must := func(err error) {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
	}
	build := func(spec string, do func(m *sim.Machine, d func(int) partition.Device)) []byte {
		tb.Helper()
		m, err := sim.New(spec)
		must(err)
		must(m.Init())
		defer func() { must(m.Shutdown()) }()
		do(m, func(i int) partition.Device {
			tb.Helper()
			d, err := m.Device(i)
			must(err)
			return d
		})
		data, err := m.Snapshot().Marshal()
		must(err)
		return data
	}
	enable := func(d partition.Device) {
		tb.Helper()
		must(d.SetMIGMode(partition.MIGEnabled))
		must(d.Reset())
	}
	create := func(d partition.Device, profileID int, at partition.Placement, ci bool) partition.GPUInstance {
		tb.Helper()
		gi, err := d.CreateGPUInstance(profileID, at)
		must(err)
		if ci {
			_, err = d.CreateComputeInstance(gi.ID)
			must(err)
		}
		return gi
	}
	return [][]byte{
		build("a30x4", func(*sim.Machine, func(int) partition.Device) {}),
		build("a30x4", func(m *sim.Machine, d func(int) partition.Device) {
			enable(d(2))
			create(d(2), 1, partition.Placement{Start: 2, Size: 2}, true) // 2g.12gb
			gi := create(d(2), 0, partition.Placement{Start: 0, Size: 1}, false)
			_, err := m.CreateComputeInstanceSlices(2, gi.ID, 1)
			must(err)
			create(d(2), 7, partition.Placement{Start: 1, Size: 1}, false) // 1g.6gb+me, no CI
			must(d(3).SetMIGMode(partition.MIGEnabled))
			must(m.SetRebootOnly(1, true))
		}),
		build("dgx-h100", func(m *sim.Machine, d func(int) partition.Device) {
			enable(d(0))
			create(d(0), 2, partition.Placement{Start: 4, Size: 4}, true) // 3g.40gb
			create(d(0), 9, partition.Placement{Start: 2, Size: 2}, true) // 1g.20gb
			create(d(0), 0, partition.Placement{Start: 0, Size: 1}, true) // 1g.10gb
			gi := create(d(0), 7, partition.Placement{Start: 1, Size: 1}, true)
			must(d(0).DestroyComputeInstance(gi.ID, 0))
			enable(d(5))
			gi = create(d(5), 1, partition.Placement{Start: 0, Size: 2}, false) // 2g.20gb, two 1-slice CIs
			for range 2 {
				_, err := m.CreateComputeInstanceSlices(5, gi.ID, 1)
				must(err)
			}
			enable(d(6))
			must(d(6).SetMIGMode(partition.MIGDisabled)) // MIG on, pending off
		}),
		build("l4-24gb,h200-141gb*2", func(_ *sim.Machine, d func(int) partition.Device) {
			enable(d(2))
			create(d(2), 4, partition.Placement{Start: 0, Size: 8}, true) // 7g.141gb
		}),
	}
}

// TestValidStatesSeeds checks that FuzzStateFile's seeds built through the
// NVML calls are accepted, so that the fuzzer starts from valid states.
func TestValidStatesSeeds(t *testing.T) {
	for i, data := range validStates(t) {
		if _, err := sim.NewFromState(data); err != nil {
			t.Errorf("seed %d: %v\n%s", i, err, data)
		}
	}
}
