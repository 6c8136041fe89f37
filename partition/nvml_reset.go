package partition

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// CommandRunner runs an external program and returns what it printed on
// stdout and stderr together. A program that exits non-zero returns an
// error with an ExitCode() int method, as *exec.ExitError has; a program
// that is not installed returns an error wrapping exec.ErrNotFound.
type CommandRunner func(ctx context.Context, name string, args ...string) ([]byte, error)

// NVMLOption configures the real NVML implementation (NewNVML, NewNVMLFrom).
type NVMLOption func(*nvmlOptions)

// nvmlOptions holds what NVMLOption sets.
type nvmlOptions struct {
	run          CommandRunner
	resetTimeout time.Duration
	// profileInfoV2 reads a GPU instance profile's version 2 info; its type
	// depends on whether the build has cgo (nvml.go, nvml_nocgo.go).
	profileInfoV2 nvmlProfileInfoV2Func
}

// DefaultResetTimeout bounds one `nvidia-smi --gpu-reset` run.
const DefaultResetTimeout = 2 * time.Minute

// WithCommandRunner replaces the runner Device.Reset uses to start
// nvidia-smi (default: os/exec).
func WithCommandRunner(run CommandRunner) NVMLOption {
	return func(o *nvmlOptions) {
		if run != nil {
			o.run = run
		}
	}
}

// WithResetTimeout bounds each GPU reset (default DefaultResetTimeout).
func WithResetTimeout(d time.Duration) NVMLOption {
	return func(o *nvmlOptions) {
		if d > 0 {
			o.resetTimeout = d
		}
	}
}

func buildNVMLOptions(opts []NVMLOption) nvmlOptions {
	o := nvmlOptions{run: nvmlExecRunner, resetTimeout: DefaultResetTimeout}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

// nvmlExecRunner is the default CommandRunner.
func nvmlExecRunner(ctx context.Context, name string, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, name, args...).CombinedOutput()
}

// nvidia-smi exits with the NVML return code of the failed call.
const (
	nvidiaSMIExitNotSupported = 3  // NVML_ERROR_NOT_SUPPORTED
	nvidiaSMIExitNoPermission = 4  // NVML_ERROR_NO_PERMISSION
	nvidiaSMIExitInUse        = 19 // NVML_ERROR_IN_USE
)

// nvmlResetGPU resets the GPU at a PCI bus ID with `nvidia-smi --gpu-reset`,
// since NVML has no reset call of its own. index only names the GPU in
// errors.
func nvmlResetGPU(o nvmlOptions, index int, busID string) error {
	what := fmt.Sprintf("GPU %d: reset (nvidia-smi --gpu-reset -i %s)", index, busID)
	if busID == "" {
		return fmt.Errorf("%s: no PCI bus ID: %w", what, ErrInvalidArgument)
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
		return fmt.Errorf("%s: nvidia-smi is not installed: %w: %w", what, ErrNotSupported, err)
	case errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil:
		return fmt.Errorf("%s: no answer within %s: %w: %w", what, o.resetTimeout, ErrTimeout, err)
	case code == nvidiaSMIExitInUse || strings.Contains(lower, "in use") || strings.Contains(lower, "being used") ||
		strings.Contains(lower, "used by another"):
		return fmt.Errorf("%s: %w: %s", what, ErrInUse, msg)
	case code == nvidiaSMIExitNotSupported || strings.Contains(lower, "not supported"):
		return fmt.Errorf("%s: %w: %s", what, ErrNotSupported, msg)
	case code == nvidiaSMIExitNoPermission:
		return fmt.Errorf("%s: no permission (needs root): %s", what, msg)
	case msg == err.Error():
		return fmt.Errorf("%s: %w", what, err)
	default:
		return fmt.Errorf("%s: %s: %w", what, msg, err)
	}
}
