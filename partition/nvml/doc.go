// Package nvml is carve's binding to the NVIDIA Management Library: it
// implements partition.NVML, partition.Device and partition.EventSet over
// github.com/NVIDIA/go-nvml, which loads libnvidia-ml.so.1 at Init.
//
// New opens the system's library; NewFrom takes any go-nvml Interface, such
// as go-nvml's mocks, which is how this package is unit-tested. NVML's
// return codes become errors that wrap partition's sentinels
// (partition.ErrInUse, partition.ErrNotSupported, ...) and the go-nvml
// Return itself, so callers test them with errors.Is and errors.As. Every
// call is guarded: nothing reaches the library before Init or after the
// last Shutdown, and handles from an ended session fail with
// partition.ErrUninitialized.
//
// NVML has no GPU reset of its own, so a device's Reset runs
// `nvidia-smi --gpu-reset` (see WithCommandRunner and WithResetTimeout).
//
// go-nvml needs cgo. In a build without it (CGO_ENABLED=0), New returns an
// implementation whose Init fails with partition.ErrLibraryNotFound, and
// NewFrom and WithProfileInfoV2 do not exist.
package nvml
