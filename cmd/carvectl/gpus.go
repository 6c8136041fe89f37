package main

import (
	"errors"
	"fmt"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/gpus"
)

// openNode opens the GPUs a --gpus value names ("nvml" for this machine's
// real GPUs, "sim:<machine>" for simulated ones) and reads their inventory
// and geometry. opts.From (--from) loads a saved simulator state; carvectl
// never changes it. The returned function shuts NVML down.
func openNode(spec string, opts gpus.Options) (partition.Node, func(), error) {
	if err := nvmlBuilt(spec, withCgo); err != nil {
		return partition.Node{}, nil, err
	}
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

// nvmlBuilt refuses --gpus nvml in a build of carvectl without cgo, which
// has no NVML, saying what to do instead; nil for any other case.
func nvmlBuilt(spec string, cgo bool) error {
	if spec != gpus.NVML || cgo {
		return nil
	}
	return errors.New("--gpus nvml: this build of carvectl has no NVML (built without cgo, as macOS builds are): " +
		"run the carvectl of the agent's image on the GPU node (kubectl exec), or use --gpus sim:<machine>")
}
