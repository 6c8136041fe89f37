package desired

import (
	"fmt"
	"maps"
	"slices"

	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/timeslice"
)

// The partition package's geometry answers configs' questions.
var _ configs.Geometry = (*partition.Geometry)(nil)

// State is what a node's GPUs should be under one profile.
type State struct {
	// Profile is the profile's name.
	Profile string
	// Hash is the profile's configs.File.ProfileHash: it changes when the
	// profile is edited.
	Hash string
	// Targets are the MIG targets by GPU index.
	Targets map[int]partition.Target
	// Sharing are the time-slicing settings by GPU index.
	Sharing map[int]timeslice.Sharing
	// Dynamic are the dynamic GPUs (on-demand MIG) by GPU index, each with
	// the MIG profiles, in the file's order, that claims may be given on
	// it: those its entry lists, or every profile of its model. Their
	// Targets are MIG on with no instances (see Targets); their MIG devices
	// are to be offered through DRA and made for the claims allocated
	// them, so a profile with dynamic GPUs is realised only by an agent
	// that runs --advertise dra. Nil when the profile has none.
	Dynamic map[int][]string
}

// CheckFile checks a whole profile file as it must hold on every node of a
// fleet: against the catalogue and this node's models, without this node's
// GPUs, since the file may hold profiles meant for other nodes. A file
// that fails is broken for every node and must not touch any GPU. It also
// returns the entries it could not check, for GPU models neither the
// catalogue nor this node knows (configs.File.Check): they are checked on
// the nodes that have those GPUs, when selected there.
func CheckFile(f *configs.File, node partition.Node) ([]configs.Problem, error) {
	return f.Check(node.FleetGeometry(), nil)
}

// For checks the profile on the node's GPUs and resolves it. An error
// means the profile cannot be realised on this node (it names why); the
// GPUs must then be left as they are.
func For(f *configs.File, profile string, node partition.Node) (State, error) {
	gpus := ConfigGPUs(node)
	if err := f.ValidateProfile(profile, node.Geometry(), gpus); err != nil {
		return State{}, err
	}
	assignments, err := f.Resolve(profile, gpus)
	if err != nil {
		return State{}, err
	}
	return State{
		Profile: profile,
		Hash:    f.ProfileHash(profile),
		Targets: Targets(assignments),
		Sharing: SharingFrom(assignments),
		Dynamic: dynamicProfiles(assignments, node),
	}, nil
}

// dynamicProfiles lists, per dynamic GPU, the MIG profiles claims may be
// given there: its entry's, or every profile of its model (which the
// profile's validation on the node made sure is known). Nil when no GPU
// is dynamic.
func dynamicProfiles(as []configs.Assignment, node partition.Node) map[int][]string {
	var out map[int][]string
	for _, a := range as {
		if a.Dynamic == nil {
			continue
		}
		if out == nil {
			out = map[int][]string{}
		}
		names := slices.Clone(a.Dynamic.Profiles)
		if m, ok := node.Models[a.GPU]; ok && names == nil {
			names = m.ProfileNames()
		}
		out[a.GPU] = names
	}
	return out
}

// DynamicGPUs returns the indices of the dynamic GPUs, sorted.
func (s State) DynamicGPUs() []int {
	return slices.Sorted(maps.Keys(s.Dynamic))
}

// WithoutClaimInstances returns the node as the planner sees it for s: on
// each GPU dynamic in s, the instances made for claims (their placements
// by GPU UUID) are left out, since they are the claims' and not the
// profile's (the target of a dynamic GPU is MIG on with no instances of
// its own). On a GPU static in s they stay, for the plan to destroy. The
// agent plans from this view, and so does a preview of its plan.
func (s State) WithoutClaimInstances(node partition.Node, claims map[string][]partition.Placement) partition.Node {
	if len(s.Dynamic) == 0 || len(claims) == 0 {
		return node
	}
	out := partition.Node{GPUs: slices.Clone(node.GPUs), Models: node.Models}
	for i, g := range out.GPUs {
		if _, dynamic := s.Dynamic[g.Index]; !dynamic {
			continue
		}
		out.GPUs[i].Instances = slices.DeleteFunc(slices.Clone(g.Instances), func(in partition.Instance) bool {
			return slices.Contains(claims[g.UUID], in.Placement)
		})
	}
	return out
}

// Plan plans the node's GPUs to the state; devices in inUse (MIG device
// UUIDs) are never destroyed (see partition.PlanNode).
func (s State) Plan(node partition.Node, inUse map[string]bool) (partition.NodePlan, error) {
	return partition.PlanNode(node.GPUs, node.Models, s.Targets, inUse)
}

// Resources returns the devices the node would advertise once the plan has
// run (a blocked GPU counted as it is now).
func (s State) Resources(node partition.Node, plan partition.NodePlan) (timeslice.Resources, error) {
	res, err := timeslice.Expand(node.Predict(plan), s.Sharing)
	if err != nil {
		return nil, fmt.Errorf("resources of profile %s: %w", s.Profile, err)
	}
	return res, nil
}

// ConfigGPUs describes the node's GPUs as profile validation and
// resolution see them: a MIG-capable GPU of a known model by its model key.
func ConfigGPUs(n partition.Node) []configs.GPU {
	out := make([]configs.GPU, len(n.GPUs))
	for i, g := range n.GPUs {
		out[i] = configs.GPU{Index: g.Index, Model: g.Model, Product: g.Product, MIGCapable: g.MIGCapable}
		if m, ok := n.Models[g.Index]; ok {
			out[i].Model = m.Key
		}
	}
	return out
}

// Targets turns a resolved profile into planner targets by GPU index; a
// dynamic GPU's is dynamicTarget's.
func Targets(as []configs.Assignment) map[int]partition.Target {
	t := make(map[int]partition.Target, len(as))
	for _, a := range as {
		if a.Dynamic != nil {
			t[a.GPU] = dynamicTarget(a)
			continue
		}
		t[a.GPU] = partition.Target{MIG: a.MIG}
	}
	return t
}

// dynamicTarget is the planner target of a dynamic GPU: MIG on, with no
// instances of the profile's own, so that a GPU turning dynamic has the
// instances it holds destroyed as part of that change (under the drain
// policy, as any destroy). It is the one place that says what a dynamic
// GPU is planned to: instances made for claims, once there are such, are
// to be kept out of the destroys here.
func dynamicTarget(configs.Assignment) partition.Target {
	return partition.Target{MIG: map[string]int{}}
}

// SharingFrom turns a resolved profile into sharing settings by GPU index.
func SharingFrom(as []configs.Assignment) map[int]timeslice.Sharing {
	out := make(map[int]timeslice.Sharing, len(as))
	for _, a := range as {
		out[a.GPU] = timeslice.Sharing{Replicas: a.Replicas, MIGReplicas: a.MIGReplicas, RenameShared: a.RenameShared,
			FailRequestsGreaterThanOne: a.FailRequestsGreaterThanOne}
	}
	return out
}
