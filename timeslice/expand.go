package timeslice

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/partition"
)

// replicaSep separates a device UUID from its replica number in IDs.
const replicaSep = "::"

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
	if n < 0 || n > carvev1.MaxReplicas {
		return 0, fmt.Errorf("replicas %d out of range 1..%d", n, carvev1.MaxReplicas)
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
		name := carvev1.ResourceName(profile, s.RenameShared && n > 1)
		if n == 1 {
			res[name] = append(res[name], d)
			return nil
		}
		d.FailRequestsGreaterThanOne = s.FailRequestsGreaterThanOne
		for i := range n {
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

// IDSet names devices by device ID, physical device UUID or GPU UUID: a
// GPU UUID names every device on that GPU, a device UUID every replica of
// that device.
type IDSet map[string]bool

// NewIDSet returns the set of ids.
func NewIDSet(ids []string) IDSet {
	s := make(IDSet, len(ids))
	for _, id := range ids {
		s[id] = true
	}
	return s
}

// Matches reports whether the set names d by its ID, its UUID or its
// GPU's UUID.
func (s IDSet) Matches(d Device) bool {
	return s[d.ID] || s[d.UUID] || s[d.GPUUUID]
}

// Without returns the resources less the devices drop matches; a resource
// left without devices is left out.
func (r Resources) Without(drop IDSet) Resources {
	if len(drop) == 0 {
		return r
	}
	out := Resources{}
	for name, devs := range r {
		var keep []Device
		for _, d := range devs {
			if !drop.Matches(d) {
				keep = append(keep, d)
			}
		}
		if len(keep) > 0 {
			out[name] = keep
		}
	}
	return out
}
