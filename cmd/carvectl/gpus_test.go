package main

import (
	"strings"
	"testing"
)

// A build without cgo refuses --gpus nvml saying so; with cgo, or for
// simulated GPUs, nothing is refused.
func TestNVMLBuilt(t *testing.T) {
	tests := []struct {
		spec    string
		cgo     bool
		refused bool
	}{
		{"nvml", false, true},
		{"nvml", true, false},
		{"sim:dgx-h100", false, false},
		{"sim:dgx-h100", true, false},
	}
	for _, tt := range tests {
		err := nvmlBuilt(tt.spec, tt.cgo)
		if (err != nil) != tt.refused {
			t.Errorf("nvmlBuilt(%q, cgo %v) = %v, want refused %v", tt.spec, tt.cgo, err, tt.refused)
		}
		if err != nil && !strings.Contains(err.Error(), "this build of carvectl has no NVML (built without cgo") {
			t.Errorf("nvmlBuilt(%q, cgo %v) = %q: does not say why", tt.spec, tt.cgo, err)
		}
	}
}

// In a build without cgo (CGO_ENABLED=0 go test), plan and validate with
// --gpus nvml end with exit 2 and the message, touching no library.
func TestNVMLWithoutCgo(t *testing.T) {
	if withCgo {
		t.Skip("this build has cgo; run with CGO_ENABLED=0")
	}
	for _, args := range [][]string{
		{"plan", "-f", example, "--profile", "all-1g", "--gpus", "nvml"},
		{"validate", "-f", example, "--gpus", "nvml"},
	} {
		code, stdout, stderr := carvectl(args...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, "--gpus nvml: this build of carvectl has no NVML (built without cgo") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
}
