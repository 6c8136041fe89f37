package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const nvidiaDefault = "../../configs/nvimport/testdata/gpu-operator-default-mig-parted-config.yaml"

const smallMigParted = `version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-1g.10gb:
    - device-filter: ["0x233010DE", "0x233110DE", "0x232210DE", "0x232410DE", "0xDEADBEEF"]
      devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
`

const smallDevicePlugin = `version: v1
sharing:
  mps:
    resources:
    - {name: nvidia.com/gpu, replicas: 2}
  timeSlicing:
    resources:
    - {name: nvidia.com/gpu, replicas: 4}
`

func writeNamed(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestImport(t *testing.T) {
	mp := writeNamed(t, "config.yaml", smallMigParted)
	dp := writeNamed(t, "dp.yaml", smallDevicePlugin)
	bad := writeNamed(t, "bad.yaml", "version: v1\nmig-configs:\n  p:\n    - devices: some\n      mig-enabled: false\n")
	huge := writeNamed(t, "huge.yaml", "#"+strings.Repeat("x", 1<<20))
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string // "" : nothing
		wantStderr []string
	}{
		{"no format", []string{"import"}, 2, "", []string{"Usage:"}},
		{"help", []string{"import", "-h"}, 0, "", []string{"carvectl import mig-parted -f config.yaml"}},
		{"unknown format", []string{"import", "gpu-operator"}, 2, "", []string{`carvectl import: unknown format "gpu-operator": want mig-parted`}},
		{"no file", []string{"import", "mig-parted"}, 2, "", []string{"carvectl import: -f config.yaml is required"}},
		{"stray argument", []string{"import", "mig-parted", "-f", mp, "extra"}, 2, "", []string{"carvectl import: unexpected arguments: extra"}},
		{"missing file", []string{"import", "mig-parted", "-f", "/nonexistent/config.yaml"}, 2, "", []string{"carvectl import: open /nonexistent/config.yaml: no such file"}},
		{"too large", []string{"import", "mig-parted", "-f", huge}, 2, "", []string{"huge.yaml: larger than 1048576 bytes"}},
		{"invalid config", []string{"import", "mig-parted", "-f", bad}, 1, "", []string{
			`bad.yaml: mig-configs.p[0].devices: must be all or a list of GPU indices, not "some"`,
			"carvectl import: nothing written",
		}},
		{"converted, with notes", []string{"import", "mig-parted", "-f", mp, "--device-plugin-config", dp}, 0, `version: v1
profiles:
  all-1g.10gb:
    - gpus: all
      model: H100-80GB
      mig: {1g.10gb: 7}
  all-disabled:
    - gpus: all
      timeSlicing: {replicas: 4}
`, []string{
			"config.yaml: mig-configs.all-1g.10gb[0].device-filter[4]: 0xDEADBEEF is not a GPU carve's catalogue knows; left out of the model filters",
			"config.yaml: mig-configs.all-1g.10gb: mig-parted leaves the GPUs that no item selects as they are; carve makes them whole GPUs, MIG off",
			"dp.yaml: sharing.mps: not carried over: carve shares devices by time-slicing only",
			"dp.yaml: sharing.timeSlicing.resources[0]: in profile all-1g.10gb, the GPUs that no entry selects are whole and not shared under carve",
			"carvectl import: 2 profiles written; 5 notes above: read them before use",
		}},
		{"unknown default", []string{"import", "mig-parted", "-f", mp, "--device-plugin-config", dp, "--device-plugin-default", "x"}, 1, "", []string{
			"--device-plugin-default x: no device plugin config of that name (have: dp)",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := carvectl(tt.args...)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.wantCode, out, errOut)
			}
			_, body, _ := strings.Cut(out, "version: v1\n")
			if body != "" {
				body = "version: v1\n" + body
			}
			if diff := cmp.Diff(tt.wantStdout, body); diff != "" {
				t.Errorf("stdout (-want +got):\n%s\nall of it:\n%s", diff, out)
			}
			for _, want := range tt.wantStderr {
				if !strings.Contains(errOut, want) {
					t.Errorf("stderr lacks %q:\n%s", want, errOut)
				}
			}
		})
	}
}

// TestImportNVIDIADefault: NVIDIA's published default configuration, as
// the GPU Operator's ConfigMap, imports into a file carvectl validate
// accepts, and its profiles plan on a simulated machine.
func TestImportNVIDIADefault(t *testing.T) {
	code, out, errOut := carvectl("import", "mig-parted", "-f", nvidiaDefault)
	if code != 0 {
		t.Fatalf("exit %d\nstderr: %s", code, errOut)
	}
	if !strings.Contains(errOut, "carvectl import: 81 profiles written") {
		t.Errorf("stderr lacks the summary:\n%s", errOut)
	}
	p := writeNamed(t, "profiles.yaml", out)
	if code, vout, _ := carvectl("validate", "-f", p); code != 0 {
		t.Fatalf("validate: exit %d\n%s", code, vout)
	}
	for _, tc := range []struct{ profile, gpus, want string }{
		{"all-balanced", "sim:dgx-h100", "nvidia.com/mig-3g.40gb"},
		{"all-balanced", "sim:a30x4", "nvidia.com/mig-2g.12gb"},
		{"all-1g.10gb", "sim:dgx-a100", "nvidia.com/mig-1g.10gb  32"},
		{"all-disabled", "sim:dgx-b200", "nvidia.com/gpu  8"},
	} {
		code, pout, _ := carvectl("plan", "-f", p, "--profile", tc.profile, "--gpus", tc.gpus)
		if code != 0 || !strings.Contains(pout, tc.want) {
			t.Errorf("plan %s on %s: exit %d, want %q in:\n%s", tc.profile, tc.gpus, code, tc.want, pout)
		}
	}
}
