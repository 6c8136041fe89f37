//go:build cgo

package main

// withCgo: this build of carvectl has cgo, so --gpus nvml can open the
// NVIDIA driver's library.
const withCgo = true
