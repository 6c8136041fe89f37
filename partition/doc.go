// Package partition reads the GPUs of a node, knows which MIG geometries each
// GPU model supports, plans the smallest set of NVML operations that turns the
// current partition of a GPU into the desired one, and applies such a plan.
//
// Everything here talks to the GPUs through NVML, the narrow interface
// defined in device.go, and needs neither cgo nor any other part of carve
// but api/v1, the public formats, whose plan types apiv1.go converts to and
// from.
// The real implementation, package partition/nvml, wraps go-nvml; the
// simulator, package partition/sim, implements the same interface for tests,
// demos and carvectl; package partition/gpus opens either from a --gpus
// value.
package partition
