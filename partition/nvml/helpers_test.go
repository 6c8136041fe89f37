package nvml

import (
	"errors"
	"testing"

	"github.com/carve-dev/carve/partition"
)

// sentinels are the errors NVML implementations wrap.
func sentinels() []error {
	return []error{partition.ErrLibraryNotFound, partition.ErrNotSupported, partition.ErrInUse, partition.ErrInsufficientResources,
		partition.ErrInvalidArgument, partition.ErrNotFound, partition.ErrTimeout, partition.ErrUninitialized}
}

// checkSentinel fails unless err wraps want and no other sentinel (want nil:
// none).
func checkSentinel(t *testing.T, err, want error) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", want)
	}
	for _, s := range sentinels() {
		if got, wantIt := errors.Is(err, s), errors.Is(s, want); got != wantIt {
			t.Errorf("errors.Is(%q, %q) = %v, want %v", err, s, got, wantIt)
		}
	}
}
