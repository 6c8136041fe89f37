//go:build !cgo

package nvml

import (
	"fmt"
	"time"

	"github.com/carve-dev/carve/partition"
)

// options holds what Option sets. Without cgo there is no
// WithProfileInfoV2: it needs go-nvml's types.
type options struct {
	run          CommandRunner
	resetTimeout time.Duration
}

// New returns a partition.NVML that cannot open the library: go-nvml needs
// cgo, and this build has none. Its Init returns an error wrapping
// partition.ErrLibraryNotFound; every other call returns one wrapping
// partition.ErrUninitialized. Build with CGO_ENABLED=1 for the real
// implementation. The options are accepted and have no effect.
func New(opts ...Option) partition.NVML {
	_ = buildOptions(opts)
	return noCgo{}
}

// noCgo is New in a build without cgo.
type noCgo struct{}

// Init fails: there is no library to open.
func (noCgo) Init() error {
	return fmt.Errorf("initialize NVML: built without cgo: %w", partition.ErrLibraryNotFound)
}

// Shutdown fails: Init never succeeded.
func (noCgo) Shutdown() error { return fmt.Errorf("shut down NVML: %w", partition.ErrUninitialized) }

// DeviceCount fails: Init never succeeded.
func (noCgo) DeviceCount() (int, error) {
	return 0, fmt.Errorf("count GPUs: %w", partition.ErrUninitialized)
}

// Device fails: Init never succeeded.
func (noCgo) Device(index int) (partition.Device, error) {
	return nil, fmt.Errorf("GPU %d: get handle: %w", index, partition.ErrUninitialized)
}

// Topology fails: Init never succeeded.
func (noCgo) Topology(a, b int) (partition.Link, error) {
	return partition.Link{}, fmt.Errorf("GPU %d and GPU %d: topology: %w", a, b, partition.ErrUninitialized)
}

// WatchXIDs fails: Init never succeeded.
func (noCgo) WatchXIDs([]int) (partition.EventSet, error) {
	return nil, fmt.Errorf("watch XIDs: %w", partition.ErrUninitialized)
}

var _ partition.NVML = noCgo{}
