package main

import (
	"context"
	"io"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/test/cluster"
	"github.com/carve-dev/carve/test/harness"
)

func TestParseOptions(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		steps   []string
		latency sim.Latency
		wantErr string
	}{
		{name: "defaults", steps: []string{"full", "balanced", "shared-4"}, latency: sim.RealisticLatency()},
		{name: "steps", args: []string{"--steps", " all-1g, ,split "}, steps: []string{"all-1g", "split"}, latency: sim.RealisticLatency()},
		{name: "no steps", args: []string{"--steps", ","}, wantErr: "at least one profile"},
		{name: "real GPUs", args: []string{"--gpus", "nvml"}, wantErr: "simulated GPUs"},
		{name: "stray argument", args: []string{"now"}, wantErr: "unexpected arguments"},
		{name: "no latency", args: []string{"--sim-latency", "none"}, steps: []string{"full", "balanced", "shared-4"}},
		{name: "uniform latency", args: []string{"--sim-latency", "50ms"}, steps: []string{"full", "balanced", "shared-4"},
			latency: sim.UniformLatency(50 * time.Millisecond)},
		{name: "the last latency wins", args: []string{"--sim-latency", "realistic", "--sim-latency", "none"},
			steps: []string{"full", "balanced", "shared-4"}},
		{name: "bad latency", args: []string{"--sim-latency", "slow"}, wantErr: `--sim-latency "slow": want none, realistic`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseOptions(tt.args, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(o.steps, ",") != strings.Join(tt.steps, ",") {
				t.Errorf("steps %q, want %q", o.steps, tt.steps)
			}
			if o.latency != tt.latency {
				t.Errorf("latency %s, want %s", o.latency, tt.latency)
			}
		})
	}
}

func TestLatencyNote(t *testing.T) {
	for l, want := range map[sim.Latency]string{
		{}:                              "MIG operations take no time",
		sim.RealisticLatency():          "MIG operations take as long as on hardware, --sim-latency realistic",
		sim.UniformLatency(time.Second): "MIG operations timed with --sim-latency 1s",
	} {
		if got := latencyNote(l); got != want {
			t.Errorf("latencyNote(%s) = %q, want %q", l, got, want)
		}
	}
}

func TestOpsSummary(t *testing.T) {
	got := opsSummary("profile balanced (label) applied in 104ms: 80 ops on GPUs 0-1")
	if want := "80 ops in 104ms on GPUs 0-1"; got != want {
		t.Errorf("opsSummary = %q, want %q", got, want)
	}
	if got := opsSummary("something else"); got != "something else" {
		t.Errorf("an unknown message is changed: %q", got)
	}
}

// TestDemo runs `make demo` as the README has it (the agent binary built
// from this tree, the example profiles, sim:dgx-h100) on the local cluster,
// and checks what it prints at each step.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo runs a cluster")
	}
	if reason, fail := cluster.SkipReason(); reason != "" {
		if fail {
			t.Fatal(reason)
		}
		t.Skip(reason)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	root, err := harness.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	bin, err := harness.BuildAgent(ctx, root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// `make demo` runs at --sim-latency realistic, which adds about three
	// minutes; a short latency for every operation keeps the agent's apply
	// with slow GPUs under test at a fraction of that.
	o, err := parseOptions([]string{"--agent", bin, "--profiles", filepath.Join(root, "configs", "examples", "profiles.yaml"),
		"--sim-latency", "50ms"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	err = run(ctx, o, &out)
	t.Logf("demo output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^  1 +full +\S+ +none needed +gpu=8$`),
		regexp.MustCompile(`(?m)^  2 +balanced +\S+ +80 ops in \S+ on GPUs 0-7 +mig-1g\.10gb=32 mig-2g\.20gb=8 mig-3g\.40gb=8$`),
		regexp.MustCompile(`(?m)^  3 +shared-4 +\S+ +80 ops in \S+ on GPUs 0-7 +gpu=32$`),
		regexp.MustCompile(`demo-balanced-3g-40gb +nvidia\.com/mig-3g\.40gb: 1 +NVIDIA_VISIBLE_DEVICES=MIG-\S+\n += GPU \d, MIG 3g\.40gb at memory slices 4-7`),
		regexp.MustCompile(`demo-shared-4-gpu +nvidia\.com/gpu: 1 +NVIDIA_VISIBLE_DEVICES=GPU-\S+\n += GPU \d, whole`),
		regexp.MustCompile(`(?m)^    carve\.dev/profile\.applied=shared-4$`),
		// 80 operations of 50ms: the node says applying meanwhile.
		regexp.MustCompile(`(?m)^ +\S+  carve\.dev/state=applying$`),
		regexp.MustCompile(`MIG operations timed with --sim-latency 50ms`),
	} {
		if !want.MatchString(text) {
			t.Errorf("the output lacks %s", want)
		}
	}
}
