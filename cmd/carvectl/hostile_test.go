package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/carve-dev/carve/configs"
)

// Command lines and files that used to give silently wrong answers or
// messages without a place.
func TestHostileCommandLines(t *testing.T) {
	good := writeFile(t, "version: v1\ndefaultProfile: full\nprofiles:\n  full: [{gpus: all}]\n")
	huge := filepath.Join(t.TempDir(), "huge.yaml")
	if err := os.WriteFile(huge, []byte("version: v1\n#"+strings.Repeat("x", 4*configs.MaxFileBytes)), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		args       []string
		code       int
		stdout     string // contained; "-" for empty
		stderr     string // contained
		stdoutNots string // not contained
	}{
		{"a stray argument does not drop the flags after it", []string{"validate", "-f", good, "stray", "--gpus", "sim:nope"}, 2,
			"-", `unexpected argument "stray": validate takes flags only (the flags after it were not read)`, ""},
		{"plan refuses stray arguments too", []string{"plan", "-f", good, "--profile", "full", "x", "--gpus", "sim:dgx-h100"}, 2, "-", `unexpected argument "x"`, ""},
		{"windows refuses stray arguments too", []string{"windows", "-f", good, "now"}, 2, "-", `unexpected argument "now"`, ""},
		{"--for that would overflow", []string{"windows", "-f", good, "--for", "99999999999999d"}, 2, "-", "must be positive and at most a year", ""},
		{"a label naming an unknown profile is an error, not no profile", []string{"windows", "-f", good, "--node-labels", "carve.dev/profile=nope", "--from", "2026-11-23T12:00:00Z", "--for", "1d"}, 1,
			`error from 2026-11-23 12:00 UTC: node label carve.dev/profile=nope: unknown profile "nope"`, "", ""},
		{"plan -o json: problems on stderr, stdout empty", []string{"plan", "-f", good, "--profile", "nope", "--gpus", "sim:dgx-h100", "-o", "json"}, 1,
			"-", `unknown profile "nope"`, ""},
		{"a file over the limit is refused, not read whole", []string{"validate", "-f", huge}, 1,
			"huge.yaml: the file is larger than 262144 bytes (256 KiB), the most carve reads", "", ": :"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := carvectl(tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, out, errOut)
			}
			if tt.stdout == "-" && out != "" {
				t.Errorf("stdout %q, want nothing", out)
			} else if tt.stdout != "-" && !strings.Contains(out, tt.stdout) {
				t.Errorf("stdout %q lacks %q", out, tt.stdout)
			}
			if !strings.Contains(errOut, tt.stderr) {
				t.Errorf("stderr %q lacks %q", errOut, tt.stderr)
			}
			if tt.stdoutNots != "" && strings.Contains(out, tt.stdoutNots) {
				t.Errorf("stdout %q holds %q", out, tt.stdoutNots)
			}
		})
	}
}
