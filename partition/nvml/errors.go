//go:build cgo

package nvml

import (
	"fmt"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/carve-dev/carve/partition"
)

// sentinel maps an NVML return code to the partition sentinel error callers
// test for with errors.Is, or nil where none fits (ERROR_GPU_IS_LOST,
// ERROR_NO_PERMISSION, ERROR_UNKNOWN, ...).
func sentinel(ret gonvml.Return) error {
	switch ret {
	case gonvml.ERROR_LIBRARY_NOT_FOUND:
		return partition.ErrLibraryNotFound
	case gonvml.ERROR_NOT_SUPPORTED:
		return partition.ErrNotSupported
	case gonvml.ERROR_IN_USE:
		return partition.ErrInUse
	case gonvml.ERROR_INSUFFICIENT_RESOURCES:
		return partition.ErrInsufficientResources
	case gonvml.ERROR_INVALID_ARGUMENT:
		return partition.ErrInvalidArgument
	case gonvml.ERROR_NOT_FOUND:
		return partition.ErrNotFound
	case gonvml.ERROR_TIMEOUT:
		return partition.ErrTimeout
	case gonvml.ERROR_UNINITIALIZED:
		return partition.ErrUninitialized
	case gonvml.ERROR_DRIVER_NOT_LOADED:
		return partition.ErrDriverNotLoaded
	}
	return nil
}

// returnError describes a failed NVML call: the context (format and args),
// the matching partition sentinel where there is one, and NVML's own error
// (a gonvml.Return, which errors.As can recover).
func returnError(ret gonvml.Return, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	if s := sentinel(ret); s != nil {
		return fmt.Errorf("%s: %w: %w", what, s, ret)
	}
	return fmt.Errorf("%s: NVML error: %w", what, ret)
}
