//go:build !cgo

package partition

import "fmt"

// nvmlProfileInfoV2Func has no use without cgo.
type nvmlProfileInfoV2Func = func()

// NewNVML returns an NVML that cannot open the library: go-nvml needs cgo,
// and this build has none. Its Init returns an error wrapping
// ErrLibraryNotFound; every other call returns one wrapping
// ErrUninitialized. Build with CGO_ENABLED=1 for the real implementation.
func NewNVML(opts ...NVMLOption) NVML {
	_ = buildNVMLOptions(opts)
	return noCgoNVML{}
}

// noCgoNVML is NewNVML in a build without cgo.
type noCgoNVML struct{}

func (noCgoNVML) Init() error {
	return fmt.Errorf("initialize NVML: built without cgo: %w", ErrLibraryNotFound)
}

func (noCgoNVML) Shutdown() error { return fmt.Errorf("shut down NVML: %w", ErrUninitialized) }

func (noCgoNVML) DeviceCount() (int, error) { return 0, fmt.Errorf("count GPUs: %w", ErrUninitialized) }

func (noCgoNVML) Device(index int) (Device, error) {
	return nil, fmt.Errorf("GPU %d: get handle: %w", index, ErrUninitialized)
}

func (noCgoNVML) Topology(a, b int) (Link, error) {
	return Link{}, fmt.Errorf("GPU %d and GPU %d: topology: %w", a, b, ErrUninitialized)
}

func (noCgoNVML) WatchXIDs([]int) (EventSet, error) {
	return nil, fmt.Errorf("watch XIDs: %w", ErrUninitialized)
}

var _ NVML = noCgoNVML{}
