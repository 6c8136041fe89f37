package nvml

import (
	"errors"
	"os/exec"
	"testing"

	"github.com/carve-dev/carve/partition"
)

func TestResetWithoutNvidiaSMIOnPath(t *testing.T) {
	// The default runner, with a PATH that cannot hold nvidia-smi: this
	// never resets a real GPU, wherever it runs.
	t.Setenv("PATH", t.TempDir())
	err := resetGPU(buildOptions(nil), 0, "00000000:18:00.0")
	if !errors.Is(err, exec.ErrNotFound) {
		t.Errorf("Reset = %v, want it to wrap exec.ErrNotFound", err)
	}
	// A missing nvidia-smi is no GPU that cannot be reset: the node is not
	// reboot-required, its apply fails and is retried.
	if errors.Is(err, partition.ErrNotSupported) || errors.Is(err, partition.ErrInUse) {
		t.Errorf("Reset = %v: a missing nvidia-smi must not read as a reset the GPU does not support", err)
	}
	op := &partition.OpError{Op: partition.Op{Kind: partition.OpResetGPU}, Err: err}
	if partition.RebootRequired(op) {
		t.Errorf("RebootRequired(%v) = true, want false", op)
	}
}
