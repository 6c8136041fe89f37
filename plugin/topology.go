package plugin

import (
	"log/slog"
	"sync"

	"github.com/carve-dev/carve/partition"
)

// Scores of GPU pairs; higher is closer. NVLinks dominate the PCIe level,
// and two devices on the same GPU are closer than any two GPUs.
const (
	sameGPUScore   = int64(1) << 40
	nvlinkWeight   = int64(1) << 20
	pcieBase       = 100
	unknownPCIeLvl = 60 // worse than "system" (50)
)

// topology caches the links NVML reports between GPUs.
type topology struct {
	nvml partition.NVML
	log  *slog.Logger

	mu    sync.Mutex
	links map[[2]int]partition.Link
}

func newTopology(nvml partition.NVML, log *slog.Logger) *topology {
	return &topology{nvml: nvml, log: log, links: map[[2]int]partition.Link{}}
}

// link returns the link between two GPUs; without NVML, or when NVML fails
// (logged once per pair), it is a link of no NVLinks and an unknown PCIe
// level worse than any real one.
func (t *topology) link(a, b int) partition.Link {
	if a > b {
		a, b = b, a
	}
	key := [2]int{a, b}
	t.mu.Lock()
	defer t.mu.Unlock()
	if l, ok := t.links[key]; ok {
		return l
	}
	l := partition.Link{PCIe: unknownPCIeLvl}
	if t.nvml != nil {
		got, err := t.nvml.Topology(a, b)
		if err != nil {
			t.log.Warn("GPU topology unknown; treating the pair as distant", "gpuA", a, "gpuB", b, "err", err)
		} else {
			l = got
		}
	}
	t.links[key] = l
	return l
}

// pairScore scores how close two GPUs are: more NVLinks first, then a
// lower PCIe level.
func (t *topology) pairScore(a, b int) int64 {
	if a == b {
		return sameGPUScore
	}
	return t.pairScoreOf(a, b, t.link(a, b))
}

// pairScoreOf scores a given link between two GPUs.
func (t *topology) pairScoreOf(a, b int, l partition.Link) int64 {
	if a == b {
		return sameGPUScore
	}
	pcie := min(max(l.PCIe, 0), pcieBase)
	return int64(l.NVLinks)*nvlinkWeight + int64(pcieBase-pcie)
}
