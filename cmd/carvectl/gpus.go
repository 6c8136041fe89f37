package main

import (
	"fmt"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/gpus"
)

// openNode opens the GPUs a --gpus value names ("nvml" for this machine's
// real GPUs, "sim:<machine>" for simulated ones) and reads their inventory
// and geometry. opts.From (--from) loads a saved simulator state; carvectl
// never changes it. The returned function shuts NVML down.
func openNode(spec string, opts gpus.Options) (partition.Node, func(), error) {
	lib, err := gpus.Open(spec, opts)
	if err != nil {
		return partition.Node{}, nil, err
	}
	if err := lib.Init(); err != nil {
		return partition.Node{}, nil, fmt.Errorf("--gpus %s: %w", spec, err)
	}
	closeFn := func() { _ = lib.Shutdown() }
	n, err := partition.ReadNode(lib)
	if err != nil {
		closeFn()
		return partition.Node{}, nil, fmt.Errorf("--gpus %s: %w", spec, err)
	}
	return n, closeFn, nil
}
