package partition

import (
	"errors"
	"fmt"
	"strings"

	carvev1 "github.com/carve-dev/carve/api/v1"
)

// ErrRecordTooOld is wrapped by NodeFromRecord's error for a node record
// an agent wrote before the record held what a plan needs.
var ErrRecordTooOld = errors.New("the node record lacks what a plan needs")

// NodeFromRecord rebuilds a node's GPUs from its node record (the
// carve.dev/partition annotation), for planning away from the node: each
// MIG-capable GPU's geometry comes from the catalogue by its model key, as
// on the node for a GPU in MIG mode's known models, and each GPU instance's
// profile from that geometry. A record written by an older agent is an
// error wrapping ErrRecordTooOld that names the field it lacks; so is a
// GPU in MIG mode whose model the catalogue lacks (the node reads its
// geometry from the device).
func NodeFromRecord(rec carvev1.NodeRecord) (Node, error) {
	n := Node{GPUs: make([]GPU, 0, len(rec.GPUs)), Models: map[int]Model{}}
	for _, r := range rec.GPUs {
		g, m, err := gpuFromRecord(r, agentOf(rec))
		if err != nil {
			return Node{}, err
		}
		n.GPUs = append(n.GPUs, g)
		if m.Key != "" {
			n.Models[g.Index] = m
		}
	}
	return n, nil
}

// InUseFromRecord returns the devices pods hold, as the record lists them:
// the planner's in-use set.
func InUseFromRecord(rec carvev1.NodeRecord) (map[string]bool, error) {
	if rec.InUse == nil {
		return nil, fmt.Errorf("no devices in use (inUse), written by %s: %w", agentOf(rec), ErrRecordTooOld)
	}
	set := make(map[string]bool, len(rec.InUse.Devices))
	for _, d := range rec.InUse.Devices {
		set[d.UUID] = true
	}
	return set, nil
}

func agentOf(rec carvev1.NodeRecord) string {
	if rec.AgentVersion == "" {
		return "an agent of unknown version"
	}
	return "carve-agent " + rec.AgentVersion
}

// gpuFromRecord rebuilds one GPU and its model (zero when the GPU cannot
// do MIG, or its model is unknown while MIG is off, as on the node).
func gpuFromRecord(r carvev1.GPURecord, agent string) (GPU, Model, error) {
	name := fmt.Sprintf("GPU %d", r.Index)
	if r.MemoryMiB == 0 {
		return GPU{}, Model{}, fmt.Errorf("%s: no memory (gpus[].memoryMiB), written by %s: %w", name, agent, ErrRecordTooOld)
	}
	g := GPU{Index: r.Index, UUID: r.UUID, Product: r.Product, Model: r.Model, MemoryMiB: r.MemoryMiB}
	if r.MIGMode == "unsupported" {
		return g, Model{}, nil
	}
	var err error
	g.MIGCapable = true
	if g.MIGMode, err = modeFromWord(r.MIGMode); err != nil {
		return GPU{}, Model{}, fmt.Errorf("%s: migMode: %w", name, err)
	}
	g.PendingMIGMode = g.MIGMode
	if r.PendingMIGMode != "" {
		if g.PendingMIGMode, err = modeFromWord(r.PendingMIGMode); err != nil {
			return GPU{}, Model{}, fmt.Errorf("%s: pendingMIGMode: %w", name, err)
		}
	}
	m, known := LookupModel(r.Model)
	switch {
	case !known && g.MIGMode == MIGEnabled:
		return GPU{}, Model{}, fmt.Errorf("%s (%s): model %s is not in carvectl's catalogue; the node reads its MIG geometry from the device, which a preview cannot", name, r.Product, r.Model)
	case !known:
		return g, Model{}, nil
	}
	for _, in := range r.Instances {
		inst, err := instanceFromRecord(in, m)
		if err != nil {
			return GPU{}, Model{}, fmt.Errorf("%s: instance at %d:%d: %w", name, in.Placement.Start, in.Placement.Size, err)
		}
		g.Instances = append(g.Instances, inst)
	}
	return g, m, nil
}

// instanceFromRecord rebuilds a GPU instance, its profile from m (a
// profile NVML named by ID alone reads "profile-<ID>").
func instanceFromRecord(r carvev1.InstanceRecord, m Model) (Instance, error) {
	in := Instance{GIID: r.GIID, Profile: r.Profile, Placement: PlacementFromV1(r.Placement), InfoID: UnknownInfoID}
	if p, ok := m.Profile(r.Profile); ok {
		in.ProfileID, in.InfoID, in.ComputeSlices, in.MemoryMiB, in.Engines = p.ID, p.InfoID, p.ComputeSlices, p.MemoryMiB, p.Engines
	} else if _, err := fmt.Sscanf(r.Profile, "profile-%d", &in.ProfileID); err != nil || !strings.HasPrefix(r.Profile, "profile-") {
		return Instance{}, fmt.Errorf("profile %s: not a profile of %s", r.Profile, m.Key)
	}
	if r.UUID != "" && len(r.ComputeInstances) == 0 {
		return Instance{}, fmt.Errorf("no compute instances (computeInstances): %w", ErrRecordTooOld)
	}
	for _, ci := range r.ComputeInstances {
		in.CIs = append(in.CIs, ComputeInstance{ID: ci.ID, GIID: r.GIID, ComputeSlices: ci.ComputeSlices, UUID: ci.UUID})
	}
	return in, nil
}

func modeFromWord(s string) (MIGMode, error) {
	switch s {
	case "enabled":
		return MIGEnabled, nil
	case "disabled":
		return MIGDisabled, nil
	}
	return 0, fmt.Errorf("%q: want enabled, disabled or unsupported", s)
}
