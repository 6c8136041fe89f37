//go:build !cgo

package nvml

import (
	"errors"
	"testing"

	"github.com/carve-dev/carve/partition"
)

func TestWithoutCgo(t *testing.T) {
	lib := New()
	if err := lib.Init(); !errors.Is(err, partition.ErrLibraryNotFound) {
		t.Fatalf("Init() = %v, want an error wrapping ErrLibraryNotFound", err)
	}
	if _, err := lib.DeviceCount(); !errors.Is(err, partition.ErrUninitialized) {
		t.Fatalf("DeviceCount() = %v, want an error wrapping ErrUninitialized", err)
	}
}
