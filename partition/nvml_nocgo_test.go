//go:build !cgo

package partition

import (
	"errors"
	"testing"
)

func TestNVMLWithoutCgo(t *testing.T) {
	lib := NewNVML()
	if err := lib.Init(); !errors.Is(err, ErrLibraryNotFound) {
		t.Fatalf("Init() = %v, want an error wrapping ErrLibraryNotFound", err)
	}
	if _, err := lib.DeviceCount(); !errors.Is(err, ErrUninitialized) {
		t.Fatalf("DeviceCount() = %v, want an error wrapping ErrUninitialized", err)
	}
}
