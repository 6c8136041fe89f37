package partition

import "fmt"

// Node is a snapshot of a node's GPUs together with the MIG geometry of
// each MIG-capable GPU: what the planner, validation and carvectl need.
type Node struct {
	GPUs []GPU
	// Models holds the geometry of each MIG-capable GPU, by GPU index.
	Models map[int]Model
}

// ReadNode reads every GPU and its model geometry (from the device when
// MIG is on, else from the catalogue; see ResolveModel). A MIG-capable GPU
// whose model is unknown gets no entry in Models: profiles that ask for MIG
// on it fail validation with a clear message instead of failing here.
func ReadNode(lib NVML) (Node, error) {
	gpus, err := ReadInventory(lib)
	if err != nil {
		return Node{}, err
	}
	n := Node{GPUs: gpus, Models: make(map[int]Model, len(gpus))}
	for _, g := range gpus {
		if !g.MIGCapable {
			continue
		}
		d, err := lib.Device(g.Index)
		if err != nil {
			return Node{}, fmt.Errorf("GPU %d: %w", g.Index, err)
		}
		if m, err := ResolveModel(d, g); err == nil {
			n.Models[g.Index] = m
		}
	}
	return n, nil
}

// FleetGeometry is what a whole profile file is validated against on this
// node: every model of the catalogue (as carvectl validate checks without
// --gpus) and the node's models the catalogue lacks. A catalogue model wins
// over a node model of the same key, so the verdict on the models carve
// knows is the same on every node of a mixed fleet. Only the profile
// selected for the node is then checked against Geometry.
func (n Node) FleetGeometry() *Geometry {
	models := Catalogue()
	for _, g := range n.GPUs {
		if m, ok := n.Models[g.Index]; ok {
			models = append(models, m)
		}
	}
	return NewGeometry(models)
}

// Geometry returns a Geometry over the node's distinct models.
func (n Node) Geometry() *Geometry {
	seen := map[string]bool{}
	var models []Model
	for _, g := range n.GPUs {
		m, ok := n.Models[g.Index]
		if ok && !seen[m.Key] {
			seen[m.Key] = true
			models = append(models, m)
		}
	}
	return NewGeometry(models)
}

// Predict returns the node's GPUs as they will be once the plan has run:
// a GPU whose plan is blocked stays as it is. New MIG instances get a
// placeholder device UUID ("MIG-new-<gpu>-<start>"), since NVML assigns the
// real one at creation; kept instances keep theirs.
func (n Node) Predict(p NodePlan) []GPU {
	plans := make(map[int]GPUPlan, len(p.GPUs))
	for _, gp := range p.GPUs {
		plans[gp.Index] = gp
	}
	out := make([]GPU, len(n.GPUs))
	for i, g := range n.GPUs {
		gp, ok := plans[g.Index]
		if !ok || gp.IsBlocked() {
			out[i] = g
			continue
		}
		out[i] = predictGPU(g, n.Models[g.Index], gp)
	}
	return out
}

func predictGPU(g GPU, m Model, p GPUPlan) GPU {
	out := g
	out.Instances = nil
	if !p.Target.MIGEnabled() || !g.MIGCapable {
		out.MIGMode, out.PendingMIGMode = MIGDisabled, MIGDisabled
		return out
	}
	out.MIGMode, out.PendingMIGMode = MIGEnabled, MIGEnabled
	existing := make(map[int]Instance, len(g.Instances))
	for _, in := range g.Instances {
		existing[in.GIID] = in
	}
	for _, pi := range p.Instances {
		if in, ok := existing[pi.GIID]; ok && pi.Status == StatusKept {
			out.Instances = append(out.Instances, in)
			continue
		}
		prof, ok := m.ProfileByID(pi.ProfileID)
		if !ok {
			prof.InfoID = UnknownInfoID
		}
		out.Instances = append(out.Instances, Instance{
			GIID: pi.GIID, ProfileID: pi.ProfileID, InfoID: prof.InfoID, Profile: pi.Profile, Placement: pi.Placement,
			ComputeSlices: prof.ComputeSlices, MemoryMiB: prof.MemoryMiB, Engines: prof.Engines,
			CIs: []ComputeInstance{{GIID: pi.GIID, ComputeSlices: prof.ComputeSlices,
				UUID: fmt.Sprintf("MIG-new-%d-%d", g.Index, pi.Placement.Start)}},
		})
	}
	return out
}
