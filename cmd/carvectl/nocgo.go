//go:build !cgo

package main

// withCgo: this build of carvectl has no cgo (CGO_ENABLED=0, as for
// macOS), so it has no NVML: --gpus nvml is refused with a clear message.
const withCgo = false
