package sim_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
)

// openState opens an initialised machine with a state file.
func openState(t *testing.T, spec, path string) *sim.Machine {
	t.Helper()
	m, err := sim.Open(spec, path)
	if err != nil {
		t.Fatalf("Open(%q, %s): %v", spec, path, err)
	}
	initMachine(t, m)
	return m
}

// readState parses the state file at path.
func readState(t *testing.T, path string) sim.State {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sim.ParseState(data)
	if err != nil {
		t.Fatalf("state file: %v\n%s", err, data)
	}
	return st
}

func TestStateFileFollowsEveryChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sim.json")
	m := openState(t, "dgx-h100", path)
	if st := readState(t, path); !reflect.DeepEqual(st, m.Snapshot()) {
		t.Fatalf("fresh state file differs from the machine")
	}
	d := device(t, m, 1)
	var gi partition.GPUInstance
	var ci partition.ComputeInstance
	steps := []struct {
		name string
		do   func() error
	}{
		{"SetMIGMode", func() error { return d.SetMIGMode(partition.MIGEnabled) }},
		{"Reset", d.Reset},
		{"CreateGPUInstance", func() (err error) {
			gi, err = d.CreateGPUInstance(2, partition.Placement{Start: 4, Size: 4})
			return err
		}},
		{"CreateComputeInstance", func() (err error) { ci, err = d.CreateComputeInstance(gi.ID); return err }},
		{"SetRebootOnly", func() error { return m.SetRebootOnly(1, true) }},
		{"DestroyComputeInstance", func() error { return d.DestroyComputeInstance(gi.ID, ci.ID) }},
		{"DestroyGPUInstance", func() error { return d.DestroyGPUInstance(gi.ID) }},
		{"SetMIGMode off", func() error { return d.SetMIGMode(partition.MIGDisabled) }},
		{"Reboot", m.Reboot},
	}
	for _, s := range steps {
		before := readState(t, path)
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		after := readState(t, path)
		if reflect.DeepEqual(before, after) {
			t.Errorf("%s: state file unchanged", s.name)
		}
		if !reflect.DeepEqual(after, m.Snapshot()) {
			t.Errorf("%s: state file differs from the machine", s.name)
		}
	}
	// A failed call leaves the file alone.
	before, _ := os.ReadFile(path)
	_, err := d.CreateGPUInstance(2, partition.Placement{Start: 4, Size: 4})
	wantErr(t, "create with MIG off", err, partition.ErrNotSupported)
	if after, _ := os.ReadFile(path); string(before) != string(after) {
		t.Errorf("failed call rewrote the state file")
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("state dir holds %d entries, want only the state file", len(entries))
	}
}

func TestStateSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "sim.json")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	m := openState(t, "sim:hgx-h200", path)
	d0, d3 := device(t, m, 0), device(t, m, 3)
	enableMIG(t, d0)
	_, ci := mustCreate(t, d0, "3g.71gb", 4)
	gi2, _ := mustCreate(t, d0, "1g.18gb", 0)
	gi3, err := d0.CreateGPUInstance(0, partition.Placement{Start: 1, Size: 1}) // no CI
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateComputeInstanceSlices(0, gi2.ID+10, 1); err == nil {
		t.Fatal("partial CI in unknown GI accepted")
	}
	giP, err := d0.CreateGPUInstance(1, partition.Placement{Start: 2, Size: 2}) // 2g, partial CI
	if err != nil {
		t.Fatal(err)
	}
	partial, err := m.CreateComputeInstanceSlices(0, giP.ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := d3.SetMIGMode(partition.MIGEnabled); err != nil { // pending only
		t.Fatal(err)
	}
	if err := m.SetBusy(ci.UUID, true); err != nil {
		t.Fatal(err)
	}
	want, err := partition.ReadInventory(m)
	if err != nil {
		t.Fatal(err)
	}

	m2 := openState(t, "HGX-H200", path)
	got, err := partition.ReadInventory(m2)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("reopened inventory differs:\n got %+v\nwant %+v", got, want)
	}
	if cur, pending := modes(t, device(t, m2, 3)); cur != partition.MIGDisabled || pending != partition.MIGEnabled {
		t.Errorf("GPU 3 modes %v/%v after reopen, want disabled/enabled", cur, pending)
	}
	if n, _ := device(t, m2, 0).Processes(); n != 0 {
		t.Errorf("busy marks persisted: %d processes", n)
	}
	cis, _ := device(t, m2, 0).ComputeInstances(giP.ID)
	if len(cis) != 1 || cis[0] != partial {
		t.Errorf("partial CI after reopen %v, want %v", cis, partial)
	}
	if cis, _ := device(t, m2, 0).ComputeInstances(gi3.ID); len(cis) != 0 {
		t.Errorf("GI without CI got %v", cis)
	}
	// The reopened machine keeps writing to the file.
	if err := device(t, m2, 0).DestroyGPUInstance(gi3.ID); err != nil {
		t.Fatal(err)
	}
	if st := readState(t, path); len(st.GPUs[0].Instances) != 3 {
		t.Errorf("state after destroy has %d instances, want 3", len(st.GPUs[0].Instances))
	}
}

func TestStateRefusesOtherMachine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sim.json")
	openState(t, "dgx-a100", path)
	for _, spec := range []string{"dgx-a100-80", "a100-40gb*8", "a30x4"} {
		_, err := sim.Open(spec, path)
		if err == nil || !strings.Contains(err.Error(), `"dgx-a100"`) || !strings.Contains(err.Error(), spec) {
			t.Errorf("Open(%s) on a dgx-a100 state: %v, want a refusal naming both", spec, err)
		}
	}
	if st := readState(t, path); st.Machine != "dgx-a100" {
		t.Errorf("refused Open changed the file to %s", st.Machine)
	}
}

func TestStateFileErrors(t *testing.T) {
	cases := []struct {
		name, content, mention string
	}{
		{"empty", "", "decode"},
		{"garbage", "{not json", "decode"},
		{"version 2", `{"version": 2, "machine": "a30x4", "gpus": []}`, "version 2"},
		{"no machine", `{"version": 1, "gpus": []}`, "no machine"},
		{"unknown field", `{"version": 1, "machine": "a30x4", "gpus": [], "extra": 1}`, "extra"},
		{"trailing data", `{"version": 1, "machine": "a30x4", "gpus": []} {}`, "after"},
		{"unknown machine", `{"version": 1, "machine": "a31x4", "gpus": []}`, "a31x4"},
		{"GPU out of range", `{"version": 1, "machine": "a30x4", "gpus": [{"index": 4}]}`, "GPU 4"},
		{"GPU twice", `{"version": 1, "machine": "a30x4", "gpus": [{"index": 1}, {"index": 1}]}`, "twice"},
		{"wrong model", `{"version": 1, "machine": "a30x4", "gpus": [{"index": 0, "model": "H100-80GB"}]}`, "H100-80GB"},
		{"bad mode", `{"version": 1, "machine": "a30x4", "gpus": [{"index": 0, "migMode": "on"}]}`, "neither"},
		{"instances with MIG off", `{"version": 1, "machine": "a30x4", "gpus": [{"index": 0, "instances": [{"giID": 1, "profile": "4g.24gb", "placement": {"start": 0}}]}]}`, "disabled"},
		{"overlap", `{"version": 1, "machine": "a30x4", "gpus": [{"index": 0, "migMode": "enabled", "instances": [
			{"giID": 1, "profile": "2g.12gb", "placement": {"start": 0}}, {"giID": 2, "profile": "1g.6gb", "placement": {"start": 1}}]}]}`, "overlaps"},
		{"two +me", `{"version": 1, "machine": "a30x4", "gpus": [{"index": 0, "migMode": "enabled", "instances": [
			{"giID": 1, "profile": "2g.12gb+me", "placement": {"start": 0}}, {"giID": 2, "profile": "1g.6gb+me", "placement": {"start": 2}}]}]}`, "media"},
		{"unknown profile", `{"version": 1, "machine": "a30x4", "gpus": [{"index": 0, "migMode": "enabled", "instances": [{"giID": 1, "profile": "3g.20gb"}]}]}`, "3g.20gb"},
		{"profile ID mismatch", `{"version": 1, "machine": "a30x4", "gpus": [{"index": 0, "migMode": "enabled", "instances": [{"giID": 1, "profile": "4g.24gb", "profileID": 0}]}]}`, "ID 3"},
		{"GI ID 0", `{"version": 1, "machine": "a30x4", "gpus": [{"index": 0, "migMode": "enabled", "instances": [{"giID": 0, "profile": "4g.24gb"}]}]}`, "start at 1"},
		{"duplicate GI ID", `{"version": 1, "machine": "a30x4", "gpus": [{"index": 0, "migMode": "enabled", "instances": [
			{"giID": 1, "profile": "2g.12gb", "placement": {"start": 0}}, {"giID": 1, "profile": "2g.12gb", "placement": {"start": 2}}]}]}`, "taken"},
		{"CIs too big", `{"version": 1, "machine": "a30x4", "gpus": [{"index": 0, "migMode": "enabled", "instances": [
			{"giID": 1, "profile": "2g.12gb", "cis": [{"id": 0}, {"id": 1, "computeSlices": 1}]}]}]}`, "in use"},
		{"pending off with GIs", `{"version": 1, "machine": "a30x4", "gpus": [{"index": 0, "migMode": "enabled", "pendingMIGMode": "disabled", "instances": [{"giID": 1, "profile": "4g.24gb"}]}]}`, "pending disabled"},
		{"MIG on an L4", `{"version": 1, "machine": "l4-24gb", "gpus": [{"index": 0, "migMode": "enabled"}]}`, "no MIG"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sim.json")
			if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			var spec string
			if err := json.Unmarshal([]byte(tc.content), &struct {
				Machine *string `json:"machine"`
			}{&spec}); err != nil || spec == "" || spec == "a31x4" {
				spec = "a30x4"
			}
			_, err := sim.Open(spec, path)
			if err == nil || !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("Open: %v, want an error mentioning %q", err, tc.mention)
			}
			m := open(t, spec)
			before := m.Snapshot()
			if err := m.LoadState([]byte(tc.content)); err == nil {
				t.Errorf("LoadState accepted it")
			}
			if !reflect.DeepEqual(before, m.Snapshot()) {
				t.Errorf("failed LoadState changed the machine")
			}
		})
	}
}

func TestHandWrittenState(t *testing.T) {
	content := `{
	  "version": 1,
	  "machine": "sim:a30x4",
	  "gpus": [
	    {"index": 2, "migMode": "Enabled", "rebootOnly": true, "instances": [
	      {"giID": 3, "profile": "2g.12gb", "placement": {"start": 2}, "cis": [{"id": 0}]},
	      {"giID": 1, "profileID": 0, "placement": {"start": 0, "size": 1}, "cis": [{"id": 2, "computeSlices": 1}]}
	    ]}
	  ]
	}`
	m, err := sim.NewFromState([]byte(content))
	if err != nil {
		t.Fatal(err)
	}
	initMachine(t, m)
	if m.Spec().Name != "a30x4" {
		t.Errorf("machine %s", m.Spec().Name)
	}
	gpus, err := partition.ReadInventory(m)
	if err != nil {
		t.Fatal(err)
	}
	g := gpus[2]
	if g.MIGMode != partition.MIGEnabled || g.PendingMIGMode != partition.MIGEnabled || len(g.Instances) != 2 {
		t.Fatalf("GPU 2 = %+v", g)
	}
	if in := g.Instances[0]; in.GIID != 1 || in.Profile != "1g.6gb" || in.CIs[0].ID != 2 || !in.Complete() {
		t.Errorf("instance at 0 = %+v", in)
	}
	if in := g.Instances[1]; in.GIID != 3 || in.Profile != "2g.12gb" || in.Placement.Size != 2 || !in.Complete() {
		t.Errorf("instance at 2 = %+v", in)
	}
	wantErr(t, "reboot-only restored", device(t, m, 2).Reset(), partition.ErrNotSupported)
	if gpus[0].MIGMode != partition.MIGDisabled || len(gpus[0].Instances) != 0 {
		t.Errorf("GPU 0 left out of the file is not in factory state: %+v", gpus[0])
	}
	// The same layout made through NVML calls yields the same UUIDs.
	m2 := open(t, "a30x4")
	d := device(t, m2, 2)
	enableMIG(t, d)
	_, ci := mustCreate(t, d, "2g.12gb", 2)
	if ci.UUID != g.Instances[1].UUID() {
		t.Errorf("UUID from state %s, from NVML calls %s", g.Instances[1].UUID(), ci.UUID)
	}
	_, err = sim.NewFromState([]byte(`{"version": 1, "machine": "nope", "gpus": []}`))
	wantErr(t, "NewFromState unknown machine", err, partition.ErrInvalidArgument)
}

func TestSaveAndLoadState(t *testing.T) {
	m := open(t, "dgx-a100")
	d := device(t, m, 7)
	enableMIG(t, d)
	mustCreate(t, d, "4g.20gb", 0)
	mustCreate(t, d, "2g.10gb", 4)
	path := filepath.Join(t.TempDir(), "saved.json")
	if err := m.Save(path); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"version": 1`) || !strings.Contains(string(data), `"4g.20gb"`) {
		t.Errorf("saved file lacks version or profile:\n%s", data)
	}
	m2 := open(t, "dgx-a100")
	if err := m2.LoadState(data); err != nil {
		t.Fatal(err)
	}
	a, _ := partition.ReadInventory(m)
	b, _ := partition.ReadInventory(m2)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("loaded machine differs:\n%+v\n%+v", a, b)
	}
	if err := open(t, "dgx-a100-80").LoadState(data); err == nil {
		t.Errorf("LoadState accepted a state of another machine")
	}
	wantErr(t, "Save to a missing dir", m.Save(filepath.Join(t.TempDir(), "no", "such.json")), os.ErrNotExist)
}

func TestPersistFailureUndoesTheChange(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	m := openState(t, "a30x4", filepath.Join(dir, "sim.json"))
	d := device(t, m, 0)
	enableMIG(t, d)
	mustCreate(t, d, "2g.12gb", 2)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	gis := func() int {
		t.Helper()
		gis, err := d.GPUInstances()
		if err != nil {
			t.Fatal(err)
		}
		return len(gis)
	}
	_, err := d.CreateGPUInstance(1, partition.Placement{Start: 0, Size: 2})
	wantErr(t, "CreateGPUInstance", err, os.ErrNotExist)
	if n := gis(); n != 1 {
		t.Errorf("unsaved creation kept: %d GPU instances", n)
	}
	wantErr(t, "DestroyComputeInstance", d.DestroyComputeInstance(1, 0), os.ErrNotExist)
	if cis, _ := d.ComputeInstances(1); len(cis) != 1 {
		t.Errorf("unsaved destruction kept")
	}
	wantErr(t, "Reset", d.Reset(), os.ErrNotExist)
	if n := gis(); n != 1 {
		t.Errorf("unsaved Reset destroyed the GPU instances")
	}
	if ops := m.OpLog(); ops[len(ops)-1].Call != "Reset" || ops[len(ops)-1].Err == nil {
		t.Errorf("Reset that could not be saved logged as %v", ops[len(ops)-1])
	}
	if err := m.Reboot(); err == nil {
		t.Errorf("Reboot succeeded although the state could not be written")
	}
	if n := gis(); n != 1 {
		t.Errorf("unsaved Reboot destroyed the GPU instances")
	}
	wantErr(t, "SetRebootOnly", m.SetRebootOnly(0, true), os.ErrNotExist)
	wantErr(t, "Reset not reboot-only", d.Reset(), os.ErrNotExist)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := d.CreateGPUInstance(1, partition.Placement{Start: 0, Size: 2}); err != nil {
		t.Errorf("create after the directory came back: %v", err)
	}
}

// crashEnv names the state file for the crash helper process; crashStopEnv,
// when set, the number of steps after which it stops changing the machine
// and waits to be killed.
const (
	crashEnv     = "CARVE_SIM_CRASH_STATE"
	crashStopEnv = "CARVE_SIM_CRASH_STOP"
)

// crashScript is the sequence of changes the crash helper makes to an
// a30x4 machine. Its first steps (the prefix) move the machine away from
// the factory state in every aspect the state file holds: MIG on (GPU 0),
// a pending mode apart from the current one (GPU 1), reboot-only with a +me
// instance (GPU 2), GPU instance IDs with a gap and compute instance IDs
// that do not start at 0, partial compute instances. After the prefix it
// churns GPU 3 forever without undoing any of that.
type crashScript struct {
	prefix []func() error
	churn  []func() error
}

func newCrashScript(m *sim.Machine) (*crashScript, error) {
	var devs [4]partition.Device
	for i := range devs {
		d, err := m.Device(i)
		if err != nil {
			return nil, err
		}
		devs[i] = d
	}
	d0, d1, d2, d3 := devs[0], devs[1], devs[2], devs[3]
	create := func(d partition.Device, profileID, start, size int) func() error {
		return func() error {
			_, err := d.CreateGPUInstance(profileID, partition.Placement{Start: start, Size: size})
			return err
		}
	}
	const p1g, p2g, p2gMe = 0, 1, 8 // A30 profile IDs: 1g.6gb, 2g.12gb, 2g.12gb+me
	var churnGI partition.GPUInstance
	return &crashScript{
		prefix: []func() error{
			func() error { return d0.SetMIGMode(partition.MIGEnabled) },
			d0.Reset,
			create(d0, p1g, 0, 1), // GI 1
			create(d0, p1g, 1, 1), // GI 2
			create(d0, p2g, 2, 2), // GI 3
			func() error { _, err := d0.CreateComputeInstance(2); return err },
			func() error { return d0.DestroyGPUInstance(1) },                              // GIs 2, 3 left
			func() error { _, err := m.CreateComputeInstanceSlices(0, 3, 1); return err }, // CI 0
			func() error { _, err := m.CreateComputeInstanceSlices(0, 3, 1); return err }, // CI 1
			func() error { return d0.DestroyComputeInstance(3, 0) },                       // CI 1 left
			func() error { return d1.SetMIGMode(partition.MIGEnabled) },                   // pending only
			func() error { return d2.SetMIGMode(partition.MIGEnabled) },
			d2.Reset,
			create(d2, p2gMe, 2, 2),
			func() error { _, err := d2.CreateComputeInstance(1); return err },
			func() error { return m.SetRebootOnly(2, true) },
		},
		churn: []func() error{
			func() error { return d3.SetMIGMode(partition.MIGEnabled) },
			d3.Reset,
			func() (err error) {
				churnGI, err = d3.CreateGPUInstance(p2g, partition.Placement{Start: 2, Size: 2})
				return err
			},
			func() error { _, err := d3.CreateComputeInstance(churnGI.ID); return err },
			func() error { return d3.DestroyComputeInstance(churnGI.ID, 0) },
			func() error { return d3.DestroyGPUInstance(churnGI.ID) },
			func() error { return d3.SetMIGMode(partition.MIGDisabled) },
		},
	}, nil
}

// run makes change i of the script.
func (s *crashScript) run(i int) error {
	if i < len(s.prefix) {
		return s.prefix[i]()
	}
	return s.churn[(i-len(s.prefix))%len(s.churn)]()
}

// crashStates replays the script in memory and returns the machine's state
// after each of the first n changes (index 0: factory state).
func crashStates(t *testing.T, n int) []sim.State {
	t.Helper()
	m := open(t, "a30x4")
	s, err := newCrashScript(m)
	if err != nil {
		t.Fatal(err)
	}
	states := []sim.State{m.Snapshot()}
	for i := range n {
		if err := s.run(i); err != nil {
			t.Fatalf("replay step %d: %v", i, err)
		}
		states = append(states, m.Snapshot())
	}
	return states
}

// TestCrashHelper is not a test: run by TestStateSurvivesKill in a child
// process, it runs the crash script until killed (or, with crashStopEnv,
// for that many steps, then waits for its stdin to close), printing a line
// after each change.
func TestCrashHelper(t *testing.T) {
	path := os.Getenv(crashEnv)
	if path == "" {
		t.Skip("helper process for TestStateSurvivesKill")
	}
	out := bufio.NewWriter(os.Stdout)
	say := func(line string) {
		fmt.Fprintln(out, line)
		_ = out.Flush()
	}
	fail := func(err error) {
		say("error: " + err.Error())
		os.Exit(2)
	}
	stop := -1
	if s := os.Getenv(crashStopEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			fail(err)
		}
		stop = n
	}
	m, err := sim.Open("a30x4", path)
	if err != nil {
		fail(err)
	}
	if err := m.Init(); err != nil {
		fail(err)
	}
	s, err := newCrashScript(m)
	if err != nil {
		fail(err)
	}
	for i := 0; stop < 0 || i < stop; i++ {
		if err := s.run(i); err != nil {
			fail(fmt.Errorf("step %d: %w", i, err))
		}
		say("ok")
	}
	say("stopped")
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// stateAspects are the aspects of a state file in which the crash script's
// prefix leaves the machine unlike the factory state; a reload that lost
// any of them fails.
var stateAspects = []struct {
	name  string
	holds func(sim.State) bool
}{
	{"a GPU with MIG on", func(st sim.State) bool {
		return slices.ContainsFunc(st.GPUs, func(g sim.GPUState) bool { return g.MIGMode == "enabled" })
	}},
	{"a pending MIG mode unlike the current one", func(st sim.State) bool {
		return slices.ContainsFunc(st.GPUs, func(g sim.GPUState) bool { return g.PendingMIGMode != g.MIGMode })
	}},
	{"a reboot-only GPU", func(st sim.State) bool {
		return slices.ContainsFunc(st.GPUs, func(g sim.GPUState) bool { return g.RebootOnly })
	}},
	{"a media-extensions instance", func(st sim.State) bool {
		return slices.ContainsFunc(st.GPUs, func(g sim.GPUState) bool {
			return slices.ContainsFunc(g.Instances, func(in sim.InstanceState) bool { return strings.HasSuffix(in.Profile, "+me") })
		})
	}},
	{"GPU instance IDs other than 1..n", func(st sim.State) bool {
		return slices.ContainsFunc(st.GPUs, func(g sim.GPUState) bool {
			for i, in := range g.Instances {
				if in.GIID != i+1 {
					return true
				}
			}
			return false
		})
	}},
	{"compute instance IDs other than 0..n-1", func(st sim.State) bool {
		return slices.ContainsFunc(st.GPUs, func(g sim.GPUState) bool {
			return slices.ContainsFunc(g.Instances, func(in sim.InstanceState) bool {
				for i, ci := range in.CIs {
					if ci.ID != i {
						return true
					}
				}
				return false
			})
		})
	}},
	{"a partial compute instance", func(st sim.State) bool {
		return slices.ContainsFunc(st.GPUs, func(g sim.GPUState) bool {
			return slices.ContainsFunc(g.Instances, func(in sim.InstanceState) bool {
				m, _ := partition.LookupModel(g.Model)
				p, _ := m.Profile(in.Profile)
				return slices.ContainsFunc(in.CIs, func(ci sim.CIState) bool { return ci.ComputeSlices < p.ComputeSlices })
			})
		})
	}},
}

// TestStateSurvivesKill kills a child process that changes a machine with
// a state file, and reopens the file: the machine must come back exactly
// as it was when killed (replayed here in memory), never in factory state.
func TestStateSurvivesKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	script, err := newCrashScript(open(t, "a30x4"))
	if err != nil {
		t.Fatal(err)
	}
	prefix, cycle := len(script.prefix), len(script.churn)
	factory := open(t, "a30x4").Snapshot()
	tests := []struct {
		name  string
		after int  // changes to see before the kill
		stop  bool // the helper stops after them; else it runs on
	}{
		{"stopped within the prefix", 7, true},
		{"stopped after the prefix", prefix, true},
		{"stopped while churning", prefix + cycle + 3, true},
		{"killed while churning", prefix + 1, false},
		{"killed after many changes", prefix + 6*cycle, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sim.json")
			cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelper$")
			cmd.Env = append(os.Environ(), crashEnv+"="+path)
			if tc.stop {
				cmd.Env = append(cmd.Env, crashStopEnv+"="+strconv.Itoa(tc.after))
			}
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			defer stdin.Close()
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			lines := bufio.NewScanner(stdout)
			changes := 0
			read := func(until func() bool) {
				t.Helper()
				for !until() {
					if !lines.Scan() {
						t.Fatalf("helper stopped after %d changes", changes)
					}
					switch line := lines.Text(); {
					case strings.HasPrefix(line, "error"):
						t.Fatalf("helper: %s", line)
					case line == "ok":
						changes++
					}
				}
			}
			if tc.stop {
				read(func() bool { return lines.Text() == "stopped" })
			} else {
				read(func() bool { return changes >= tc.after })
			}
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			for lines.Scan() { // changes made before the kill landed
				if lines.Text() == "ok" {
					changes++
				}
			}
			_ = cmd.Wait()
			if tc.stop && changes != tc.after {
				t.Fatalf("helper made %d changes, want %d", changes, tc.after)
			}

			m, err := sim.Open("a30x4", path)
			if err != nil {
				t.Fatalf("state after kill: %v", err)
			}
			got := m.Snapshot()
			// A kill after a change was saved but before its line was
			// printed leaves one change more than was seen.
			states := crashStates(t, changes+1)
			want := states[changes]
			diff := cmp.Diff(want, got)
			if diff != "" && !tc.stop && cmp.Diff(states[changes+1], got) == "" {
				want, diff = states[changes+1], ""
			}
			if diff != "" {
				t.Errorf("state after the kill after %d changes differs from the state before it (-before +reopened):\n%s", changes, diff)
			}
			if cmp.Diff(factory, want) == "" {
				t.Fatalf("test bug: the state before the kill is the factory state")
			}
			if cmp.Diff(factory, got) == "" {
				t.Errorf("reopened state is the factory state: nothing of the %d changes survived", changes)
			}
			if changes < prefix {
				return
			}
			for _, a := range stateAspects {
				if a.holds(factory) || !a.holds(want) {
					t.Fatalf("test bug: %s: in factory state %v, before the kill %v", a.name, a.holds(factory), a.holds(want))
				}
				if !a.holds(got) {
					t.Errorf("reopened state lost %s", a.name)
				}
			}
		})
	}
}
