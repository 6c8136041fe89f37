package gpus

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
)

func TestCheck(t *testing.T) {
	tests := []struct {
		name    string
		spec    string
		opts    Options
		wantErr string // "": no error
	}{
		{name: "real GPUs", spec: "nvml"},
		{name: "simulated", spec: "sim:dgx-h100"},
		{name: "simulated from a saved state", spec: "sim:dgx-h100", opts: Options{From: "/s.json"}},
		{name: "simulated with a kept state", spec: "sim:dgx-h100", opts: Options{SimState: "/s.json"}},
		{name: "unknown machine is Open's business", spec: "sim:no-such-machine"},
		{name: "empty", spec: "", wantErr: `--gpus "": want nvml or sim:<machine>`},
		{name: "unknown kind", spec: "cuda", wantErr: `--gpus "cuda": want nvml or sim:<machine>`},
		{name: "prefix in the wrong case", spec: "SIM:dgx-h100", wantErr: `--gpus "SIM:dgx-h100": want nvml or sim:<machine>`},
		{name: "unknown kind with a state", spec: "cuda", opts: Options{From: "/s.json"}, wantErr: `--gpus "cuda": want nvml or sim:<machine>`},
		{name: "--from with real GPUs", spec: "nvml", opts: Options{From: "/s.json"},
			wantErr: "--from works with simulated GPUs only (--gpus sim:<machine>)"},
		{name: "--sim-state with real GPUs", spec: "nvml", opts: Options{SimState: "/s.json"},
			wantErr: "--sim-state works with simulated GPUs only (--gpus sim:<machine>)"},
		{name: "both state files", spec: "sim:dgx-h100", opts: Options{From: "/a.json", SimState: "/b.json"},
			wantErr: "--from and --sim-state cannot be used together"},
		{name: "simulated, realistic latency", spec: "sim:dgx-h100", opts: Options{SimLatency: "realistic"}},
		{name: "simulated, latency per op", spec: "sim:dgx-h100", opts: Options{SimLatency: "create-gi=1s,reset-gpu=5s", SimState: "/s.json"}},
		{name: "real GPUs, no latency", spec: "nvml", opts: Options{SimLatency: "none"}},
		{name: "real GPUs, zero latency", spec: "nvml", opts: Options{SimLatency: "0s"}},
		{name: "--sim-latency with real GPUs", spec: "nvml", opts: Options{SimLatency: "realistic"},
			wantErr: "--sim-latency works with simulated GPUs only (--gpus sim:<machine>)"},
		{name: "--sim-latency not a value", spec: "sim:dgx-h100", opts: Options{SimLatency: "x"},
			wantErr: `--sim-latency "x": want none, realistic, a duration (200ms) or op=duration pairs (create-gi=1s,reset-gpu=5s)`},
		{name: "--sim-latency negative", spec: "sim:dgx-h100", opts: Options{SimLatency: "-1s"},
			wantErr: `--sim-latency "-1s": negative duration`},
		{name: "--sim-latency bad, real GPUs", spec: "nvml", opts: Options{SimLatency: "slow"},
			wantErr: `--sim-latency "slow": want none, realistic, a duration (200ms) or op=duration pairs (create-gi=1s,reset-gpu=5s)`},
		{name: "unknown kind with a latency", spec: "cuda", opts: Options{SimLatency: "x"}, wantErr: `--gpus "cuda": want nvml or sim:<machine>`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check(tt.spec, tt.opts)
			if diff := cmp.Diff(tt.wantErr, errString(err)); diff != "" {
				t.Errorf("Check(%q, %+v) error (-want +got):\n%s", tt.spec, tt.opts, diff)
			}
			// Open refuses what Check refuses, with the same words.
			if tt.wantErr != "" {
				lib, err := Open(tt.spec, tt.opts)
				if lib != nil || errString(err) != tt.wantErr {
					t.Errorf("Open(%q, %+v) = %v, %v; want no GPUs and %q", tt.spec, tt.opts, lib, err, tt.wantErr)
				}
			}
		})
	}
}

func TestOpenNVMLOpensNothingBeforeInit(t *testing.T) {
	lib, err := Open("nvml", Options{})
	if err != nil {
		t.Fatalf("Open(nvml): %v", err)
	}
	if _, ok := lib.(*sim.Machine); ok {
		t.Fatal("Open(nvml) returned simulated GPUs")
	}
	if _, err := lib.DeviceCount(); !errors.Is(err, partition.ErrUninitialized) {
		t.Errorf("DeviceCount before Init = %v, want an error wrapping ErrUninitialized", err)
	}
}

func TestOpenSimulated(t *testing.T) {
	const spec = "sim:h100-80gb*2"
	// A state with GPU 1's MIG mode pending enabled, as a reference
	// machine reports it.
	ref := mustSim(t, spec)
	setPendingMIG(t, initLib(t, ref), 1)
	changed := inventory(t, ref)
	fresh := inventory(t, initLib(t, mustSim(t, spec)))
	data, err := ref.Snapshot().Marshal()
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		opts func(dir string) Options
		// want is the inventory right after Open and Init.
		want []partition.GPU
		// wantFile is the state file's content after a change through the
		// opened GPUs: "" for a file that must not exist, "same" for one
		// that must not have changed, "changed" for one that must hold the
		// change.
		wantFile string
	}{
		{name: "in memory", opts: func(string) Options { return Options{} }, want: fresh},
		{name: "from a saved state", opts: func(dir string) Options { return Options{From: writeState(t, dir, data)} },
			want: changed, wantFile: "same"},
		{name: "kept state, no file yet", opts: func(dir string) Options { return Options{SimState: filepath.Join(dir, "state.json")} },
			want: fresh, wantFile: "changed"},
		{name: "kept state from a file", opts: func(dir string) Options { return Options{SimState: writeState(t, dir, data)} },
			want: changed, wantFile: "changed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := tt.opts(t.TempDir())
			lib, err := Open(spec, opts)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if diff := cmp.Diff(tt.want, inventory(t, initLib(t, lib))); diff != "" {
				t.Errorf("inventory after Open (-want +got):\n%s", diff)
			}
			file := opts.From + opts.SimState
			before, _ := os.ReadFile(file)
			setPendingMIG(t, lib, 0)
			after, err := os.ReadFile(file)
			switch tt.wantFile {
			case "":
				if file != "" {
					t.Errorf("state file %q named with no state option", file)
				}
			case "same":
				if err != nil || string(after) != string(before) {
					t.Errorf("state file %s changed (%v):\n%s", file, err, after)
				}
			case "changed":
				st, err := sim.ParseState(after)
				if err != nil {
					t.Fatalf("state file %s: %v", file, err)
				}
				if got := st.GPUs[0].PendingMIGMode; got != "enabled" {
					t.Errorf("state file %s: GPU 0 pending MIG mode %q, want the change (enabled)", file, got)
				}
			}
		})
	}
}

func TestOpenSimLatency(t *testing.T) {
	tests := []struct {
		latency string
		want    sim.Latency
	}{
		{"", sim.Latency{}},
		{"none", sim.Latency{}},
		{"realistic", sim.RealisticLatency()},
		{"200ms", sim.UniformLatency(200 * time.Millisecond)},
		{"reset-gpu=5s", sim.Latency{ResetGPU: 5 * time.Second}},
	}
	for _, tt := range tests {
		for _, opts := range []Options{
			{SimLatency: tt.latency},
			{SimLatency: tt.latency, SimState: filepath.Join(t.TempDir(), "s.json")},
			{SimLatency: tt.latency, From: writeState(t, t.TempDir(), mustMarshal(t, mustSim(t, "sim:h100-80gb*1")))},
		} {
			lib := mustOpen(t, "sim:h100-80gb*1", opts)
			m, ok := lib.(*sim.Machine)
			if !ok {
				t.Fatalf("Open(%+v) returned %T, want *sim.Machine", opts, lib)
			}
			if diff := cmp.Diff(tt.want, m.Latency()); diff != "" {
				t.Errorf("Open(%+v): latency (-want +got):\n%s", opts, diff)
			}
		}
	}
}

func TestLatency(t *testing.T) {
	if l, err := Latency("realistic"); err != nil || l != sim.RealisticLatency() {
		t.Errorf("Latency(realistic) = %v, %v", l, err)
	}
	_, err := Latency("fast")
	if want := `--sim-latency "fast": want none`; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Latency(fast) error %v, want one starting %q", err, want)
	}
}

// mustMarshal returns a machine's state file content.
func mustMarshal(t *testing.T, m *sim.Machine) []byte {
	t.Helper()
	data, err := m.Snapshot().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestOpenSimStateAcrossRestarts(t *testing.T) {
	const spec = "sim:h100-80gb*1"
	state := filepath.Join(t.TempDir(), "sim.json")
	lib := initLib(t, mustOpen(t, spec, Options{SimState: state}))
	setPendingMIG(t, lib, 0)
	if err := lib.Shutdown(); err != nil {
		t.Fatal(err)
	}
	again := initLib(t, mustOpen(t, spec, Options{SimState: state}))
	got := inventory(t, again)
	if got[0].PendingMIGMode != partition.MIGEnabled {
		t.Fatal("simulator state not kept across a restart")
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	other, err := mustSim(t, "sim:a30x4").Snapshot().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	otherState := writeState(t, dir, other)
	garbage := filepath.Join(dir, "garbage.json")
	if err := os.WriteFile(garbage, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.json")
	tests := []struct {
		name       string
		spec       string
		opts       Options
		wantPrefix string
		wantIs     error // nil: not checked
	}{
		{"unknown machine", "sim:no-such-machine", Options{}, "--gpus sim:no-such-machine: ", partition.ErrInvalidArgument},
		{"unknown machine with --from", "sim:no-such-machine", Options{From: otherState}, "--gpus sim:no-such-machine: ", partition.ErrInvalidArgument},
		{"unknown machine with --sim-state", "sim:no-such-machine", Options{SimState: missing}, "--gpus sim:no-such-machine: ", partition.ErrInvalidArgument},
		{"empty machine", "sim:", Options{}, "--gpus sim:: ", partition.ErrInvalidArgument},
		{"--from missing", "sim:dgx-h100", Options{From: missing}, "--from: ", os.ErrNotExist},
		{"--from not JSON", "sim:dgx-h100", Options{From: garbage}, "--from " + garbage + ": decode simulator state", nil},
		{"--from for another machine", "sim:dgx-h100", Options{From: otherState}, "--from " + otherState + ": ", partition.ErrInvalidArgument},
		{"--sim-state not JSON", "sim:dgx-h100", Options{SimState: garbage}, "--gpus sim:dgx-h100: ", nil},
		{"--sim-state for another machine", "sim:dgx-h100", Options{SimState: otherState}, "--gpus sim:dgx-h100: ", partition.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lib, err := Open(tt.spec, tt.opts)
			if err == nil || lib != nil {
				t.Fatalf("Open(%q, %+v) = %v, %v; want an error", tt.spec, tt.opts, lib, err)
			}
			if !strings.HasPrefix(err.Error(), tt.wantPrefix) {
				t.Errorf("error %q does not start with %q", err, tt.wantPrefix)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %q does not wrap %q", err, tt.wantIs)
			}
		})
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed Open created %s (%v)", missing, err)
	}
}

// errString is err's message, "" for none.
func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// mustSim returns a simulated machine in factory state.
func mustSim(t *testing.T, spec string) *sim.Machine {
	t.Helper()
	m, err := sim.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// mustOpen opens spec, failing the test on error.
func mustOpen(t *testing.T, spec string, opts Options) partition.NVML {
	t.Helper()
	lib, err := Open(spec, opts)
	if err != nil {
		t.Fatalf("Open(%q, %+v): %v", spec, opts, err)
	}
	return lib
}

// initLib initialises lib and shuts it down when the test ends.
func initLib(t *testing.T, lib partition.NVML) partition.NVML {
	t.Helper()
	if err := lib.Init(); err != nil {
		t.Fatalf("Init: %v", err)
	}
	t.Cleanup(func() { _ = lib.Shutdown() })
	return lib
}

// inventory reads every GPU of lib.
func inventory(t *testing.T, lib partition.NVML) []partition.GPU {
	t.Helper()
	gpus, err := partition.ReadInventory(lib)
	if err != nil {
		t.Fatalf("ReadInventory: %v", err)
	}
	return gpus
}

// setPendingMIG sets GPU i's pending MIG mode to enabled.
func setPendingMIG(t *testing.T, lib partition.NVML, i int) {
	t.Helper()
	d, err := lib.Device(i)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetMIGMode(partition.MIGEnabled); err != nil {
		t.Fatal(err)
	}
}

// writeState writes a state file into dir and returns its path.
func writeState(t *testing.T, dir string, data []byte) string {
	t.Helper()
	path := filepath.Join(dir, "saved.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
