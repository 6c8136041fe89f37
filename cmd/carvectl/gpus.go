package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
)

// openLib opens the GPUs a --gpus value names: "nvml" for this machine's
// real GPUs, "sim:<machine>" for simulated ones. A non-empty state file
// (--from) loads a saved simulator state; carvectl never changes it.
func openLib(gpus, stateFile string) (partition.NVML, error) {
	switch {
	case gpus == "nvml":
		if stateFile != "" {
			return nil, fmt.Errorf("--from works with simulated GPUs only (--gpus sim:<machine>)")
		}
		return partition.NewNVML(), nil
	case strings.HasPrefix(gpus, "sim:"):
		m, err := sim.New(strings.TrimPrefix(gpus, "sim:"))
		if err != nil {
			return nil, fmt.Errorf("--gpus %s: %w", gpus, err)
		}
		if stateFile != "" {
			data, err := os.ReadFile(stateFile)
			if err != nil {
				return nil, fmt.Errorf("--from: %w", err)
			}
			if err := m.LoadState(data); err != nil {
				return nil, fmt.Errorf("--from %s: %w", stateFile, err)
			}
		}
		return m, nil
	default:
		return nil, fmt.Errorf("--gpus %q: want nvml or sim:<machine>", gpus)
	}
}

// openNode opens the GPUs and reads their inventory and geometry. The
// returned function shuts NVML down.
func openNode(gpus, stateFile string) (partition.Node, func(), error) {
	lib, err := openLib(gpus, stateFile)
	if err != nil {
		return partition.Node{}, nil, err
	}
	if err := lib.Init(); err != nil {
		return partition.Node{}, nil, fmt.Errorf("--gpus %s: %w", gpus, err)
	}
	closeFn := func() { _ = lib.Shutdown() }
	n, err := partition.ReadNode(lib)
	if err != nil {
		closeFn()
		return partition.Node{}, nil, fmt.Errorf("--gpus %s: %w", gpus, err)
	}
	return n, closeFn, nil
}
