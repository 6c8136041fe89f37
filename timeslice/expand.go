package timeslice

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/carve-dev/carve/partition"
)

const (
	// GPUResource is the resource name of whole GPUs.
	GPUResource = "nvidia.com/gpu"
	// migPrefix starts the resource names of MIG devices.
	migPrefix = "nvidia.com/mig-"
	// sharedSuffix ends the names of renamed shared resources.
	sharedSuffix = ".shared"
	// replicaSep separates a device UUID from its replica number in IDs.
	replicaSep = "::"
	// MaxReplicas bounds replicas per device, as configs validation does.
	MaxReplicas = 1024
)

// ResourceName returns the resource a device is advertised under: whole
// GPUs ("" profile) as nvidia.com/gpu, MIG devices as
// nvidia.com/mig-<profile> with "+me" written ".me"; shared resources get
// ".shared" appended when renamed.
func ResourceName(migProfile string, renameShared bool) string {
	name := GPUResource
	if migProfile != "" {
		name = migPrefix + strings.ReplaceAll(migProfile, "+", ".")
	}
	if renameShared {
		name += sharedSuffix
	}
	return name
}

// ReplicaID returns the device ID of replica n of a device.
func ReplicaID(uuid string, n int) string { return uuid + replicaSep + strconv.Itoa(n) }

// ParseID splits a device ID into the physical UUID and the replica number
// (-1 for an unreplicated device).
func ParseID(id string) (uuid string, replica int, err error) {
	base, num, found := strings.Cut(id, replicaSep)
	if base == "" {
		return "", 0, fmt.Errorf("device ID %q: empty UUID", id)
	}
	if !found {
		return base, -1, nil
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 {
		return "", 0, fmt.Errorf("device ID %q: replica %q is not a non-negative number", id, num)
	}
	return base, n, nil
}

// Fold maps device IDs to the physical UUIDs behind them, in first-seen
// order and without duplicates: two replicas of one GPU fold to that GPU
// once.
func Fold(ids []string) ([]string, error) {
	seen := make(map[string]bool, len(ids))
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		uuid, _, err := ParseID(id)
		if err != nil {
			return nil, err
		}
		if !seen[uuid] {
			seen[uuid] = true
			out = append(out, uuid)
		}
	}
	return out, nil
}

// replicasFor returns how many replicas a device gets and checks the bound.
func (s Sharing) replicasFor(migProfile string) (int, error) {
	n := s.Replicas
	if r, ok := s.MIGReplicas[migProfile]; ok && migProfile != "" {
		n = r
	}
	if n < 0 || n > MaxReplicas {
		return 0, fmt.Errorf("replicas %d out of range 1..%d", n, MaxReplicas)
	}
	return max(n, 1), nil
}

// Expand lists the resources a node advertises: for every GPU in MIG mode
// its complete MIG instances (an instance still being built is not
// advertised), for every other GPU the whole GPU, each replicated as the
// GPU's Sharing says (by GPU index; a GPU without an entry is not shared).
func Expand(gpus []partition.GPU, sharing map[int]Sharing) (Resources, error) {
	res := Resources{}
	add := func(g partition.GPU, uuid, profile string, mem uint64) error {
		s := sharing[g.Index]
		n, err := s.replicasFor(profile)
		if err != nil {
			return fmt.Errorf("GPU %d (%s) %s: %w", g.Index, g.UUID, orWhole(profile), err)
		}
		d := Device{ID: uuid, UUID: uuid, GPU: g.Index, GPUUUID: g.UUID, Replica: -1, Replicas: n, MIGProfile: profile, MemoryMiB: mem}
		name := ResourceName(profile, s.RenameShared && n > 1)
		if n == 1 {
			res[name] = append(res[name], d)
			return nil
		}
		d.FailRequestsGreaterThanOne = s.FailRequestsGreaterThanOne
		for i := 0; i < n; i++ {
			d.ID, d.Replica = ReplicaID(uuid, i), i
			res[name] = append(res[name], d)
		}
		return nil
	}
	for _, g := range gpus {
		if g.MIGMode != partition.MIGEnabled {
			if err := add(g, g.UUID, "", g.MemoryMiB); err != nil {
				return nil, err
			}
			continue
		}
		for _, in := range g.Instances {
			if !in.Complete() {
				continue
			}
			if err := add(g, in.UUID(), in.Profile, in.MemoryMiB); err != nil {
				return nil, err
			}
		}
	}
	for _, devs := range res {
		sort.SliceStable(devs, func(i, j int) bool {
			if devs[i].GPU != devs[j].GPU {
				return devs[i].GPU < devs[j].GPU
			}
			if devs[i].UUID != devs[j].UUID {
				return devs[i].UUID < devs[j].UUID
			}
			return devs[i].Replica < devs[j].Replica
		})
	}
	return res, nil
}

func orWhole(profile string) string {
	if profile == "" {
		return "whole GPU"
	}
	return profile
}

// Counts returns the number of devices per resource name.
func (r Resources) Counts() map[string]int {
	c := make(map[string]int, len(r))
	for name, devs := range r {
		c[name] = len(devs)
	}
	return c
}

// Names returns the resource names in sorted order.
func (r Resources) Names() []string {
	names := make([]string, 0, len(r))
	for name := range r {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
