//go:build cgo

package nvml

import (
	"errors"
	"strings"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/carve-dev/carve/partition"
)

func TestReturnCodeMapping(t *testing.T) {
	tests := []struct {
		ret  gonvml.Return
		want error
	}{
		{gonvml.ERROR_LIBRARY_NOT_FOUND, partition.ErrLibraryNotFound},
		{gonvml.ERROR_NOT_SUPPORTED, partition.ErrNotSupported},
		{gonvml.ERROR_IN_USE, partition.ErrInUse},
		{gonvml.ERROR_INSUFFICIENT_RESOURCES, partition.ErrInsufficientResources},
		{gonvml.ERROR_INVALID_ARGUMENT, partition.ErrInvalidArgument},
		{gonvml.ERROR_NOT_FOUND, partition.ErrNotFound},
		{gonvml.ERROR_TIMEOUT, partition.ErrTimeout},
		{gonvml.ERROR_UNINITIALIZED, partition.ErrUninitialized},
		{gonvml.ERROR_DRIVER_NOT_LOADED, partition.ErrDriverNotLoaded},
		{gonvml.ERROR_GPU_IS_LOST, nil},
		{gonvml.ERROR_NO_PERMISSION, nil},
		{gonvml.ERROR_UNKNOWN, nil},
	}
	for _, tt := range tests {
		t.Run(tt.ret.Error(), func(t *testing.T) {
			g := newFakeGPU(0)
			g.dev.GetUUIDFunc = func() (string, gonvml.Return) { return "", tt.ret }
			_, err := deviceAt(t, openFake(t, nil, g), 0).UUID()
			checkSentinel(t, err, tt.want)
			var ret gonvml.Return
			if !errors.As(err, &ret) || ret != tt.ret {
				t.Errorf("errors.As(nvml.Return) = %v, want %v", ret, tt.ret)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "GPU 0: UUID: ") || !strings.HasSuffix(msg, tt.ret.Error()) {
				t.Errorf("error %q lacks its context or NVML's own words %q", msg, tt.ret.Error())
			}
		})
	}
}
