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
	checkSentinel(t, err, partition.ErrNotSupported)
	if !errors.Is(err, exec.ErrNotFound) {
		t.Errorf("Reset = %v, want it to wrap exec.ErrNotFound", err)
	}
}
