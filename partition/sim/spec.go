package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/carve-dev/carve/partition"
)

// Prefix is how the agent's --gpus flag names simulated machines
// ("sim:dgx-h100"). Parse accepts specs with or without it.
const Prefix = "sim:"

// maxGPUs bounds the GPUs of one simulated machine.
const maxGPUs = 64

// Spec describes a simulated machine: its GPUs in index order and how they
// are connected.
type Spec struct {
	// Name is the canonical machine spec without the "sim:" prefix, e.g.
	// "dgx-h100" or "h100-80gb*2,a100-40gb". Stable UUIDs and state files
	// are tied to it.
	Name string
	// GPUs holds the model of each GPU, in index order. MIG-incapable models
	// have no Profiles.
	GPUs []partition.Model
	// NVSwitchLinks is the number of NVLinks between every pair of GPUs
	// through NVSwitch; 0 means no NVSwitch.
	NVSwitchLinks int
	// BridgeLinks is the number of NVLinks of the bridges that join GPU
	// pairs (0-1, 2-3, ...); 0 means no bridges.
	BridgeLinks int
}

// preset is a named machine.
type preset struct {
	name, model   string
	count         int
	nvswitchLinks int
	bridgeLinks   int
}

// presets returns the named machines, in the order error messages list
// them.
func presets() []preset {
	return []preset{
		{name: "dgx-a100", model: "A100-40GB", count: 8, nvswitchLinks: 12},
		{name: "dgx-a100-80", model: "A100-80GB", count: 8, nvswitchLinks: 12},
		{name: "dgx-h100", model: "H100-80GB", count: 8, nvswitchLinks: 18},
		{name: "hgx-h200", model: "H200-141GB", count: 8, nvswitchLinks: 18},
		{name: "dgx-b200", model: "B200-180GB", count: 8, nvswitchLinks: 18},
		// The four GPUs of a GB200 NVL4 board are joined all to all by
		// NVLink, with no switch: 18 links per GPU, 6 to each other GPU.
		{name: "gb200-nvl4", model: "GB200-186GB", count: 4, nvswitchLinks: 6},
		// H100 NVL cards come in pairs joined by three NVLink bridges.
		{name: "h100-nvl-x2", model: "H100-94GB", count: 2, bridgeLinks: 12},
		{name: "rtx-pro-6000-x4", model: "RTX-PRO-6000-96GB", count: 4},
		{name: "a30x4", model: "A30-24GB", count: 4, bridgeLinks: 4},
	}
}

// l4Model is a GPU without MIG support, for testing MIG-incapable GPUs.
func l4Model() partition.Model {
	return partition.Model{Key: "L4-24GB", Product: "NVIDIA L4", PCIDeviceIDs: []uint32{0x27B810DE}, MemoryMiB: 23034}
}

// models returns every model the list form accepts: the MIG catalogue and
// the MIG-incapable L4.
func models() []partition.Model {
	return append(partition.Catalogue(), l4Model())
}

// MachineNames returns the names of the preset machines ("dgx-h100", ...).
func MachineNames() []string {
	ps := presets()
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.name
	}
	return names
}

// ModelKeys returns the lowercase model keys the list form accepts
// ("h100-80gb", ..., "l4-24gb").
func ModelKeys() []string {
	ms := models()
	keys := make([]string, len(ms))
	for i, m := range ms {
		keys[i] = strings.ToLower(m.Key)
	}
	return keys
}

// lookupModel returns the model with that lowercase key.
func lookupModel(key string) (partition.Model, bool) {
	for _, m := range models() {
		if strings.ToLower(m.Key) == key {
			return m, true
		}
	}
	return partition.Model{}, false
}

// Parse reads a machine spec as the --gpus flag gives it, with or without
// the "sim:" prefix: a preset name (see MachineNames) or a comma-separated
// list of model keys, each optionally followed by "*N" for N GPUs of that
// model ("h100-80gb*2,a100-40gb"). Names are case-insensitive. Errors wrap
// partition.ErrInvalidArgument and list the valid names.
func Parse(spec string) (Spec, error) {
	s := strings.ToLower(strings.TrimSpace(spec))
	s = strings.TrimSpace(strings.TrimPrefix(s, Prefix))
	if s == "" {
		return Spec{}, fmt.Errorf("simulated machine: empty spec (%s): %w", validNames(), partition.ErrInvalidArgument)
	}
	for _, p := range presets() {
		if s == p.name {
			m, ok := partition.LookupModel(p.model)
			if !ok {
				return Spec{}, fmt.Errorf("simulated machine %q: model %s missing from the catalogue: %w", p.name, p.model, partition.ErrNotSupported)
			}
			gpus := make([]partition.Model, p.count)
			for i := range gpus {
				gpus[i] = cloneModel(m)
			}
			return Spec{Name: p.name, GPUs: gpus, NVSwitchLinks: p.nvswitchLinks, BridgeLinks: p.bridgeLinks}, nil
		}
	}
	var out Spec
	var names []string
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		key, count := item, 1
		if k, n, ok := strings.Cut(item, "*"); ok {
			key = strings.TrimSpace(k)
			c, err := strconv.Atoi(strings.TrimSpace(n))
			if err != nil || c < 1 {
				return Spec{}, fmt.Errorf("simulated machine %q: bad count in %q (want %s*N with N >= 1): %w", spec, item, key, partition.ErrInvalidArgument)
			}
			count = c
		}
		m, ok := lookupModel(key)
		if !ok {
			return Spec{}, fmt.Errorf("unknown simulated machine or model %q in %q (%s): %w", key, spec, validNames(), partition.ErrInvalidArgument)
		}
		if count > maxGPUs-len(out.GPUs) { // not len+count, which a huge count overflows
			return Spec{}, fmt.Errorf("simulated machine %q: more than %d GPUs: %w", spec, maxGPUs, partition.ErrInvalidArgument)
		}
		for range count {
			out.GPUs = append(out.GPUs, cloneModel(m))
		}
		if count == 1 {
			names = append(names, key)
		} else {
			names = append(names, fmt.Sprintf("%s*%d", key, count))
		}
	}
	out.Name = strings.Join(names, ",")
	return out, nil
}

// validNames describes the accepted specs for error messages.
func validNames() string {
	return fmt.Sprintf("want one of %s, or a list of models like h100-80gb*2,a100-40gb with models %s",
		strings.Join(MachineNames(), ", "), strings.Join(ModelKeys(), ", "))
}

// cloneModel returns a deep copy of a model, so no two GPUs share slices.
func cloneModel(m partition.Model) partition.Model {
	m.Profiles = cloneProfiles(m.Profiles)
	m.OtherProducts = append([]string(nil), m.OtherProducts...)
	m.PCIDeviceIDs = append([]uint32(nil), m.PCIDeviceIDs...)
	return m
}

// cloneProfiles returns a deep copy of profiles.
func cloneProfiles(ps []partition.GIProfile) []partition.GIProfile {
	if ps == nil {
		return nil
	}
	out := make([]partition.GIProfile, len(ps))
	for i, p := range ps {
		p.Placements = append([]partition.Placement(nil), p.Placements...)
		out[i] = p
	}
	return out
}

// String returns the spec as the --gpus flag takes it ("sim:dgx-h100").
func (s Spec) String() string { return Prefix + s.Name }

// Link tells how closely GPUs a and b are connected: NVSwitch machines link
// every pair with NVSwitchLinks NVLinks, bridged machines link the pairs
// 0-1, 2-3, ... with BridgeLinks. On PCIe, the GPUs of a pair share a
// switch (10), the GPUs of a quad a NUMA node (40), and the rest meet at
// the system (50). A GPU with itself is {0, 0}.
func (s Spec) Link(a, b int) (partition.Link, error) {
	n := len(s.GPUs)
	if a < 0 || a >= n || b < 0 || b >= n {
		return partition.Link{}, fmt.Errorf("topology of GPUs %d and %d: machine has %d GPUs: %w", a, b, n, partition.ErrInvalidArgument)
	}
	if a == b {
		return partition.Link{}, nil
	}
	var l partition.Link
	switch {
	case a/2 == b/2:
		l.PCIe = 10
	case a/4 == b/4:
		l.PCIe = 40
	default:
		l.PCIe = 50
	}
	switch {
	case s.NVSwitchLinks > 0:
		l.NVLinks = s.NVSwitchLinks
	case s.BridgeLinks > 0 && a/2 == b/2:
		l.NVLinks = s.BridgeLinks
	}
	return l, nil
}

// formatUUID hashes the parts into a UUID-shaped string with a prefix
// ("GPU-" or "MIG-").
func formatUUID(prefix string, parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	x := hex.EncodeToString(sum[:16])
	return prefix + x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}

// gpuUUID is the stable UUID of GPU i of the machine.
func (s Spec) gpuUUID(i int) string {
	return formatUUID("GPU-", "carve-sim", s.Name, "gpu", strconv.Itoa(i))
}

// migUUID is the stable UUID of the MIG device of a compute instance: a
// compute instance that fills its GPU instance is named by the GPU, the
// profile and the placement alone; a partial one also by its ID and size.
func (s Spec) migUUID(gpu int, profile string, at partition.Placement, full bool, ciID, slices int) string {
	parts := []string{"carve-sim", s.Name, "mig", strconv.Itoa(gpu), profile, strconv.Itoa(at.Start), strconv.Itoa(at.Size)}
	if !full {
		parts = append(parts, "ci", strconv.Itoa(ciID), strconv.Itoa(slices))
	}
	return formatUUID("MIG-", parts...)
}

// pciBusID returns a PCI bus ID for GPU i, laid out like a DGX.
func pciBusID(i int) string {
	buses := [...]int{0x07, 0x0f, 0x47, 0x4e, 0x87, 0x90, 0xb7, 0xbd}
	bus := 0xc0 + i
	if i < len(buses) {
		bus = buses[i]
	}
	return fmt.Sprintf("00000000:%02X:00.0", bus)
}
