package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/desired"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
)

const example = "../../configs/examples/profiles.yaml"

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "profiles.yaml")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func carvectl(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

const broken = `version: v1
defaultProfile: nope
profiles:
  p:
    - gpus: all
      model: H100-80GB
      mig: {3g.40gb: 2, 1g.10gb: 1}
      timeslicing: {replicas: 2}
windows:
  - name: w
    schedule: "0 25 * * *"
    duration: 1h
    profile: p
`

func TestValidate(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		wantCode  int
		wantLines []string
	}{
		{"example without GPUs", []string{"validate", "-f", example}, 0, []string{"profiles.yaml: valid: "}},
		{"example on a DGX H100", []string{"validate", "-f", example, "--gpus", "sim:dgx-h100"}, 0, []string{"checked against 8x NVIDIA H100 80GB HBM3\n"}},
		{"example on a DGX A100: the H100 profiles select none", []string{"validate", "-f", example, "--gpus", "sim:dgx-a100"}, 0, []string{
			"profiles.yaml: profiles.all-1g: selects none of these GPUs: a node of this kind given it stays as it is, state failed",
			"profiles.yaml: profiles.balanced: selects none", "profiles.yaml: profiles.halves: selects none",
			"checked against 8x NVIDIA A100-SXM4-40GB; 3 of the profiles select none of these GPUs (above)\n"}},
		{"example on 4 A30s: split names GPUs 4-7", []string{"validate", "-f", example, "--gpus", "sim:a30x4"}, 1, []string{"profiles.yaml: profiles.split[1].gpus: GPUs 4-7 are not on this node (it has GPUs 0-3)"}},
		{"broken file: every problem, one line each", []string{"validate", "-f", "BROKEN"}, 1, []string{
			"profiles.yaml: defaultProfile: ",
			"profiles.yaml: profiles.p[0].timeslicing: unknown field",
			"profiles.yaml: windows[0].schedule: ",
		}},
		{"missing file flag", []string{"validate"}, 2, nil},
		{"bad machine", []string{"validate", "-f", example, "--gpus", "sim:dgx-z9"}, 2, nil},
	}
	brokenPath := writeFile(t, broken)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i, a := range tt.args {
				if a == "BROKEN" {
					tt.args[i] = brokenPath
				}
			}
			code, out, errOut := carvectl(tt.args...)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.wantCode, out, errOut)
			}
			for _, want := range tt.wantLines {
				if !strings.Contains(out, want) {
					t.Errorf("stdout lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

// TestValidateUnverified: an entry for a GPU model carve does not know is
// reported as unverified, and the file is valid (it is checked on the
// nodes that have such GPUs).
func TestValidateUnverified(t *testing.T) {
	p := writeFile(t, "version: v1\nprofiles:\n  p:\n    - gpus: all\n      model: X300-400GB\n      mig: {1g.50gb: 7}\n")
	code, out, errOut := carvectl("validate", "-f", p)
	if code != 0 {
		t.Fatalf("exit %d, want 0\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	for _, want := range []string{
		`profiles.yaml: unverified: profiles.p[0].model: "X300-400GB" matches no GPU model known here`,
		"; 1 entry for GPU models not known here checked only on nodes that have them",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestValidateGeometryOnNode(t *testing.T) {
	// 1g.10gb x7 fits an H100 but not an A100-40GB, where 1g.10gb takes
	// two memory slices.
	p := writeFile(t, "version: v1\nprofiles:\n  p:\n    - gpus: all\n      mig: {1g.10gb: 7}\n")
	if code, out, _ := carvectl("validate", "-f", p, "--gpus", "sim:dgx-h100"); code != 0 {
		t.Fatalf("H100: exit %d: %s", code, out)
	}
	code, out, _ := carvectl("validate", "-f", p, "--gpus", "sim:dgx-a100")
	if code != 1 || !strings.Contains(out, "profiles.p[0].mig: 1g.10gb x7 cannot be placed on A100-40GB") {
		t.Fatalf("A100: exit %d: %s", code, out)
	}
}

func planJSON(t *testing.T, args ...string) carvev1.PlanDocument {
	t.Helper()
	code, out, errOut := carvectl(append([]string{"plan", "-o", "json"}, args...)...)
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	var po carvev1.PlanDocument
	if err := json.Unmarshal([]byte(out), &po); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, out)
	}
	return po
}

func TestPlanJSON(t *testing.T) {
	po := planJSON(t, "-f", example, "--profile", "all-1g", "--gpus", "sim:dgx-h100")
	if len(po.Plan.GPUs) != 8 || !po.NeedsReset {
		t.Fatalf("plan: %d GPUs, needsReset %v", len(po.Plan.GPUs), po.NeedsReset)
	}
	if got := po.Resources["nvidia.com/mig-1g.10gb"]; got != 56 {
		t.Errorf("mig-1g.10gb = %d, want 56 (8 GPUs x 7)", got)
	}
	g := po.Plan.GPUs[0]
	if g.Ops[0].Kind != carvev1.OpEnableMIG || g.Ops[1].Kind != carvev1.OpResetGPU || len(g.Instances) != 7 {
		t.Errorf("GPU 0 plan: %+v", g)
	}

	full := planJSON(t, "-f", example, "--profile", "full", "--gpus", "sim:dgx-h100")
	if !partition.NodePlanFromV1(full.Plan).NoOp() {
		t.Errorf("full on a fresh machine is not a no-op")
	}
	if diff := cmp.Diff(map[string]int{"nvidia.com/gpu": 8}, full.Resources); diff != "" {
		t.Errorf("full on a fresh machine: resources (-want +got):\n%s", diff)
	}
}

func TestPlanImpossible(t *testing.T) {
	p := writeFile(t, "version: v1\nprofiles:\n  p:\n    - gpus: all\n      mig: {4g.24gb: 1}\n")
	// Valid on A30s; impossible on an H100, whose profiles differ.
	code, out, _ := carvectl("plan", "-f", p, "--profile", "p", "--gpus", "sim:dgx-h100")
	if code != 1 || !strings.Contains(out, "4g.24gb") {
		t.Fatalf("exit %d: %s", code, out)
	}
	code, out, _ = carvectl("plan", "-f", example, "--profile", "nope", "--gpus", "sim:dgx-h100")
	if code != 1 || !strings.Contains(out, "nope") {
		t.Fatalf("unknown profile: exit %d: %s", code, out)
	}
}

// TestPlanMixedFleet: the example's split profile names GPUs 4-7, which a
// 4-GPU node lacks. Other profiles of the file still plan there, as the
// agent applies them; split itself is refused with the reason.
func TestPlanMixedFleet(t *testing.T) {
	if code, out, _ := carvectl("plan", "-f", example, "--profile", "balanced", "--gpus", "sim:h100-80gb*4"); code != 0 {
		t.Fatalf("balanced on 4 GPUs: exit %d: %s", code, out)
	}
	code, out, _ := carvectl("plan", "-f", example, "--profile", "split", "--gpus", "sim:h100-80gb*4")
	if code != 1 || !strings.Contains(out, "profiles.split") {
		t.Fatalf("split on 4 GPUs: exit %d: %s", code, out)
	}
}

// TestPlanFromState saves a simulator state with the balanced profile
// applied, then plans from it: the same profile needs nothing, and another
// keeps what it can.
func TestPlanFromState(t *testing.T) {
	data, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	f, err := configs.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	m, err := sim.New("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Init(); err != nil {
		t.Fatal(err)
	}
	node, err := partition.ReadNode(m)
	if err != nil {
		t.Fatal(err)
	}
	want, err := desired.For(f, "balanced", node)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := want.Plan(node, nil)
	if err != nil {
		t.Fatal(err)
	}
	ap := partition.Applier{Lib: m}
	for _, gp := range plan.GPUs {
		if err := ap.Apply(context.Background(), gp); err != nil {
			t.Fatal(err)
		}
	}
	state := filepath.Join(t.TempDir(), "state.json")
	if err := m.Save(state); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(state)

	same := planJSON(t, "-f", example, "--profile", "balanced", "--gpus", "sim:dgx-h100", "--from", state)
	if !partition.NodePlanFromV1(same.Plan).NoOp() {
		t.Fatalf("re-planning the applied profile: %+v", same.Plan)
	}
	other := planJSON(t, "-f", example, "--profile", "all-1g", "--gpus", "sim:dgx-h100", "--from", state)
	for _, g := range other.Plan.GPUs {
		kept := 0
		for _, in := range g.Instances {
			if in.Status == carvev1.StatusKept {
				kept++
			}
		}
		if kept != 2 || g.NeedsReset {
			t.Errorf("GPU %d: kept %d instances (want the two 1g.10gb), needsReset %v", g.Index, kept, g.NeedsReset)
		}
	}
	if after, _ := os.ReadFile(state); !bytes.Equal(before, after) {
		t.Error("plan --from changed the state file")
	}
	if code, _, errOut := carvectl("plan", "-f", example, "--profile", "full", "--gpus", "sim:a30x4", "--from", state); code != 2 || !strings.Contains(errOut, "--from") {
		t.Errorf("state of another machine: exit %d: %s", code, errOut)
	}
}

func TestPlanTable(t *testing.T) {
	code, out, _ := carvectl("plan", "-f", example, "--profile", "balanced", "--gpus", "sim:dgx-h100")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	for _, want := range []string{"GPU 7", "MIG disabled -> enabled (reset needed)", "create-gi 3g.40gb at 4:4", "nvidia.com/mig-3g.40gb"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestPlanSimLatency(t *testing.T) {
	r := sim.RealisticLatency()
	// balanced on a fresh DGX H100, per GPU: enable MIG, reset, and a GPU
	// and a compute instance for each of 2x 1g.10gb, 2g.20gb and 3g.40gb.
	perGPU := r.EnableMIG + r.ResetGPU + 4*(r.CreateGI+r.CreateCI)
	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     string // a line of the output; "": no latency line
		wantErr  string
	}{
		{name: "none", args: []string{"--gpus", "sim:dgx-h100"}},
		{name: "none given", args: []string{"--gpus", "sim:dgx-h100", "--sim-latency", "none"}},
		{name: "realistic", args: []string{"--gpus", "sim:dgx-h100", "--sim-latency", "realistic"},
			want: "At --sim-latency realistic the 80 operations take " + (8 * perGPU).String() + ", one after another."},
		{name: "uniform", args: []string{"--gpus", "sim:h100-80gb*1", "--sim-latency", "1s"},
			want: "At --sim-latency 1s the 10 operations take 10s, one after another."},
		{name: "per op", args: []string{"--gpus", "sim:h100-80gb*2", "--sim-latency", "reset-gpu=1m"},
			want: "At --sim-latency reset-gpu=1m0s the 20 operations take 2m0s, one after another."},
		{name: "real GPUs", args: []string{"--gpus", "nvml", "--sim-latency", "realistic"}, wantCode: 2,
			wantErr: "carvectl plan: --sim-latency works with simulated GPUs only (--gpus sim:<machine>)\n"},
		{name: "bad value", args: []string{"--gpus", "sim:dgx-h100", "--sim-latency", "x"}, wantCode: 2,
			wantErr: `carvectl plan: --sim-latency "x": want none, realistic, a duration (200ms) or op=duration pairs (create-gi=1s,reset-gpu=5s)` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := carvectl(append([]string{"plan", "-f", example, "--profile", "balanced"}, tt.args...)...)
			if code != tt.wantCode || errOut != tt.wantErr {
				t.Fatalf("exit %d, stderr %q; want %d, %q", code, errOut, tt.wantCode, tt.wantErr)
			}
			var got string
			for line := range strings.Lines(out) {
				if strings.HasPrefix(line, "At --sim-latency") {
					got = strings.TrimSuffix(line, "\n")
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("latency line (-want +got):\n%s", diff)
			}
		})
	}
	// The JSON document does not change with a latency.
	if diff := cmp.Diff(planJSON(t, "-f", example, "--profile", "balanced", "--gpus", "sim:dgx-h100"),
		planJSON(t, "-f", example, "--profile", "balanced", "--gpus", "sim:dgx-h100", "--sim-latency", "realistic")); diff != "" {
		t.Errorf("plan -o json with a latency (-without +with):\n%s", diff)
	}
	// Nothing to do, nothing to time.
	if _, out, _ := carvectl("plan", "-f", example, "--profile", "full", "--gpus", "sim:dgx-h100", "--sim-latency", "realistic"); strings.Contains(out, "At --sim-latency") {
		t.Errorf("a plan without operations gets a latency line:\n%s", out)
	}
}

func TestWindows(t *testing.T) {
	p := writeFile(t, `version: v1
defaultProfile: day
profiles:
  day: [{gpus: all, timeSlicing: {replicas: 4}}]
  night: [{gpus: all}]
windows:
  - name: nightly
    schedule: "0 20 * * *"
    duration: 10h
    timeZone: Europe/Berlin
    nodeSelector: {pool: inference}
    profile: night
`)
	code, out, errOut := carvectl("windows", "-f", p, "--node-labels", "pool=inference", "--from", "2026-11-23T12:00:00Z", "--for", "1d", "--tz", "UTC")
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	for _, want := range []string{"2026-11-23 19:00 UTC  2026-11-24 05:00 UTC  night", "nightly", "default"} {
		if !strings.Contains(out, want) {
			t.Errorf("windows output lacks %q:\n%s", want, out)
		}
	}
	_, out, _ = carvectl("windows", "-f", p, "--node-labels", "pool=training", "--from", "2026-11-23T12:00:00Z", "--for", "1d")
	if strings.Contains(out, "night") {
		t.Errorf("a node outside the selector got the window:\n%s", out)
	}
	if code, _, _ := carvectl("windows", "-f", p, "--for", "soon"); code != 2 {
		t.Errorf("bad --for: exit %d", code)
	}
}

const hybridExample = "../../configs/examples/hybrid.yaml"

// TestValidateDynamic: entries with dynamic GPUs are valid and noted as
// needing nodes that run --advertise dra, which the file cannot say.
func TestValidateDynamic(t *testing.T) {
	code, out, errOut := carvectl("validate", "-f", hybridExample, "--gpus", "sim:dgx-h100")
	if code != 0 {
		t.Fatalf("exit %d, want 0\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	for _, want := range []string{
		"hybrid.yaml: note: profiles.all-dynamic[0].dynamic: dynamic GPUs (MIG devices made on demand for DRA claims) need nodes whose agent runs --advertise dra; ",
		"hybrid.yaml: note: profiles.hybrid[1].dynamic: dynamic GPUs ",
		"; 2 entries with dynamic GPUs need nodes running --advertise dra (above)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, out, _ := carvectl("validate", "-f", example); strings.Contains(out, "note:") || strings.Contains(out, "dynamic") {
		t.Errorf("a file without dynamic GPUs is noted:\n%s", out)
	}
}

// TestPlanDynamic: the plan shows a dynamic GPU as MIG on with no
// instances, and says which devices are made on demand.
func TestPlanDynamic(t *testing.T) {
	code, out, errOut := carvectl("plan", "-f", hybridExample, "--profile", "hybrid", "--gpus", "sim:dgx-h100")
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	_, gpu4, _ := strings.Cut(out, "\nGPU 4 ")
	gpu4, _, _ = strings.Cut(gpu4, "\nGPU 5 ")
	want := "  dynamic: MIG on, no instances of the profile's own; 1g.10gb, 3g.40gb, 7g.80gb devices are made on demand for DRA claims (needs --advertise dra)\n" +
		"  operations:\n     1. enable-mig\n     2. reset-gpu\n"
	if _, rest, _ := strings.Cut(gpu4, "\n"); rest != want {
		t.Errorf("GPU 4 of the plan:\n%s\nwant:\n%s", rest, want)
	}
	if strings.Count(out, "  dynamic: ") != 4 {
		t.Errorf("want 4 dynamic GPUs (4-7) in the plan:\n%s", out)
	}
}
