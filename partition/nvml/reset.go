package nvml

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/carve-dev/carve/partition"
)

// CommandRunner runs an external program and returns what it printed on
// stdout and stderr together. A program that exits non-zero returns an
// error with an ExitCode() int method, as *exec.ExitError has; a program
// that is not installed returns an error wrapping exec.ErrNotFound.
type CommandRunner func(ctx context.Context, name string, args ...string) ([]byte, error)

// DefaultResetTimeout bounds one `nvidia-smi --gpu-reset` run.
const DefaultResetTimeout = 2 * time.Minute

// WithCommandRunner replaces the runner a device's Reset uses to start
// nvidia-smi (default: os/exec). A nil run keeps the default.
func WithCommandRunner(run CommandRunner) Option {
	return func(o *options) {
		if run != nil {
			o.run = run
		}
	}
}

// WithResetTimeout bounds each GPU reset (default DefaultResetTimeout); a
// reset that takes longer fails with an error wrapping
// partition.ErrTimeout. A d <= 0 keeps the default.
func WithResetTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.resetTimeout = d
		}
	}
}

// execRunner is the default CommandRunner.
func execRunner(ctx context.Context, name string, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, name, args...).CombinedOutput()
}

// nvidia-smi exits with the NVML return code of the failed call.
const (
	nvidiaSMIExitNotSupported = 3  // NVML_ERROR_NOT_SUPPORTED
	nvidiaSMIExitNoPermission = 4  // NVML_ERROR_NO_PERMISSION
	nvidiaSMIExitInUse        = 19 // NVML_ERROR_IN_USE
)

// resetGPU resets the GPU at a PCI bus ID with `nvidia-smi --gpu-reset`,
// since NVML has no reset call of its own. index only names the GPU in
// errors.
func resetGPU(o options, index int, busID string) error {
	what := fmt.Sprintf("GPU %d: reset (nvidia-smi --gpu-reset -i %s)", index, busID)
	if busID == "" {
		return fmt.Errorf("%s: no PCI bus ID: %w", what, partition.ErrInvalidArgument)
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.resetTimeout)
	defer cancel()
	out, err := o.run(ctx, "nvidia-smi", "--gpu-reset", "-i", busID)
	if err == nil {
		return nil
	}
	// nvidia-smi's own words, on one line; its exit status where it said nothing.
	msg := strings.Join(strings.Fields(string(bytes.TrimSpace(out))), " ")
	if msg == "" {
		msg = err.Error()
	}
	var exit interface{ ExitCode() int }
	code := -1
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	}
	lower := strings.ToLower(msg)
	switch {
	case errors.Is(err, exec.ErrNotFound):
		// Not ErrNotSupported: a reboot would not help, putting nvidia-smi
		// into the agent's container does (the NVIDIA container runtime
		// mounts it), and the retries then get past the reset.
		return fmt.Errorf("%s: nvidia-smi is not installed in the agent's container (the NVIDIA container runtime mounts it: runtimeClassName nvidia): %w", what, err)
	case errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil:
		return fmt.Errorf("%s: no answer within %s: %w: %w", what, o.resetTimeout, partition.ErrTimeout, err)
	case code == nvidiaSMIExitInUse || strings.Contains(lower, "in use") || strings.Contains(lower, "being used") ||
		strings.Contains(lower, "used by another"):
		return fmt.Errorf("%s: %w: %s", what, partition.ErrInUse, msg)
	case code == nvidiaSMIExitNotSupported || strings.Contains(lower, "not supported"):
		return fmt.Errorf("%s: %w: %s", what, partition.ErrNotSupported, msg)
	case code == nvidiaSMIExitNoPermission:
		return fmt.Errorf("%s: no permission (needs root): %s", what, msg)
	case msg == err.Error():
		return fmt.Errorf("%s: %w", what, err)
	default:
		return fmt.Errorf("%s: %s: %w", what, msg, err)
	}
}
