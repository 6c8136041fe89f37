package partition

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// Target is what one GPU should become.
type Target struct {
	// MIG lists the MIG instances wanted (profile name -> count). nil means
	// MIG disabled: the GPU is one whole device. A non-nil map, even an
	// empty one, means MIG enabled with exactly those instances.
	MIG map[string]int `json:"mig"`
}

// MIGEnabled reports whether the target wants MIG mode on.
func (t Target) MIGEnabled() bool { return t.MIG != nil }

// OpKind names an operation of a plan. The values are stable: they appear
// in `carvectl plan -o json` and in checkpoints.
type OpKind string

// The operations a plan is made of, in the order a plan runs them.
const (
	// OpDestroyCI destroys a compute instance.
	OpDestroyCI OpKind = "destroy-ci"
	// OpDestroyGI destroys a GPU instance that has no compute instances.
	OpDestroyGI OpKind = "destroy-gi"
	// OpEnableMIG sets the pending MIG mode to enabled.
	OpEnableMIG OpKind = "enable-mig"
	// OpDisableMIG sets the pending MIG mode to disabled.
	OpDisableMIG OpKind = "disable-mig"
	// OpResetGPU resets the GPU so that the pending MIG mode takes effect.
	OpResetGPU OpKind = "reset-gpu"
	// OpCreateGI creates a GPU instance at a placement.
	OpCreateGI OpKind = "create-gi"
	// OpCreateCI creates the compute instance that fills a GPU instance.
	OpCreateCI OpKind = "create-ci"
)

// Op is one NVML operation on a GPU. GPU instances are identified by their
// placement, because NVML assigns GI IDs at creation; ops on existing GPU
// instances carry the GI ID too. Fields that do not apply are -1 (IDs) or
// empty.
type Op struct {
	// Kind is what to do.
	Kind OpKind `json:"kind"`
	// Profile and ProfileID name the GPU instance profile ("" and -1 for
	// GPU-wide ops).
	Profile   string `json:"profile,omitempty"`
	ProfileID int    `json:"profileID"`
	// Placement is where the GPU instance sits (absent for GPU-wide ops).
	Placement Placement `json:"placement,omitzero"`
	// GIID is the ID of an existing GPU instance, -1 when the GPU instance
	// does not exist yet or the op is GPU-wide.
	GIID int `json:"giID"`
	// CIID is the compute instance a destroy-ci destroys, else -1.
	CIID int `json:"ciID"`
	// UUID is the MIG device UUID of the compute instance a destroy-ci
	// destroys, when it has one.
	UUID string `json:"uuid,omitempty"`
}

// String describes the op for logs and errors, e.g. "create-gi 3g.40gb at
// 4:4" or "destroy-ci 1g.10gb at 0:1 (GI 9, CI 0)".
func (o Op) String() string {
	if o.Profile == "" && o.Placement == (Placement{}) {
		return string(o.Kind)
	}
	s := fmt.Sprintf("%s %s at %s", o.Kind, o.Profile, o.Placement)
	switch {
	case o.CIID >= 0:
		s += fmt.Sprintf(" (GI %d, CI %d)", o.GIID, o.CIID)
	case o.GIID >= 0:
		s += fmt.Sprintf(" (GI %d)", o.GIID)
	}
	return s
}

// gpuOp returns a GPU-wide op.
func gpuOp(k OpKind) Op { return Op{Kind: k, ProfileID: -1, GIID: -1, CIID: -1} }

// InstanceStatus says how a planned instance comes about.
type InstanceStatus string

const (
	// StatusKept is an existing, complete instance left untouched.
	StatusKept InstanceStatus = "kept"
	// StatusRepair is an existing GPU instance that is kept but whose
	// compute instances are re-made to one that fills it.
	StatusRepair InstanceStatus = "repair"
	// StatusNew is an instance the plan creates.
	StatusNew InstanceStatus = "new"
)

// PlannedInstance is one MIG instance of the GPU once the plan has run.
type PlannedInstance struct {
	// Profile and ProfileID name the GPU instance profile.
	Profile   string `json:"profile"`
	ProfileID int    `json:"profileID"`
	// Placement is where the GPU instance sits.
	Placement Placement `json:"placement"`
	// Status is kept, repair or new.
	Status InstanceStatus `json:"status"`
	// GIID is the existing GPU instance's ID, -1 for a new one.
	GIID int `json:"giID"`
	// UUID is the MIG device UUID of a kept instance, "" otherwise.
	UUID string `json:"uuid,omitempty"`
}

// Blocker is a device in use that stands in the way of a plan.
type Blocker struct {
	// UUID is the busy MIG device ("MIG-...") or GPU ("GPU-...").
	UUID string `json:"uuid"`
	// Profile, Placement and GIID describe a busy MIG instance; empty,
	// absent and -1 for a whole GPU.
	Profile   string    `json:"profile,omitempty"`
	Placement Placement `json:"placement,omitzero"`
	GIID      int       `json:"giID"`
	// Reason says why the plan would have to disturb it.
	Reason string `json:"reason"`
}

// GPUPlan is what to do to one GPU. It is the per-GPU payload of
// `carvectl plan -o json`; docs/plan-schema.md describes it.
type GPUPlan struct {
	// Index and UUID identify the GPU; the applier checks the UUID.
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	// Model is the GPU model key, e.g. "H100-80GB".
	Model string `json:"model"`
	// Mode and PendingMode are the GPU's current and pending MIG modes:
	// "enabled", "disabled", or "unsupported" for GPUs without MIG.
	Mode        string `json:"mode"`
	PendingMode string `json:"pendingMode"`
	// Target is what the GPU should become.
	Target Target `json:"target"`
	// Instances are the MIG instances once the plan has run, by start.
	Instances []PlannedInstance `json:"instances"`
	// Ops are the operations to run, in order. Empty when blocked.
	Ops []Op `json:"ops"`
	// Blocked lists the devices in use that prevent the plan; when it is
	// not empty, Ops is empty and WouldDo holds the ops that would run once
	// they are free.
	Blocked []Blocker `json:"blocked,omitempty"`
	WouldDo []Op      `json:"wouldDo,omitempty"`
	// NeedsReset is true when the plan (or WouldDo) resets the GPU to
	// change its MIG mode; every process must leave the GPU first, and some
	// platforms need a reboot instead.
	NeedsReset bool `json:"needsReset"`
}

// NoOp reports whether the GPU already is as wanted: nothing to do and
// nothing blocked.
func (p GPUPlan) NoOp() bool { return len(p.Ops) == 0 && len(p.Blocked) == 0 }

// IsBlocked reports whether devices in use prevent the plan.
func (p GPUPlan) IsBlocked() bool { return len(p.Blocked) > 0 }

// NodePlan holds the plans of a node's GPUs, in index order.
type NodePlan struct {
	// GPUs holds one plan per GPU, by index.
	GPUs []GPUPlan `json:"gpus"`
}

// NoOp reports whether every GPU is a no-op.
func (p NodePlan) NoOp() bool {
	for _, g := range p.GPUs {
		if !g.NoOp() {
			return false
		}
	}
	return true
}

// IsBlocked reports whether any GPU's plan is blocked.
func (p NodePlan) IsBlocked() bool {
	for _, g := range p.GPUs {
		if g.IsBlocked() {
			return true
		}
	}
	return false
}

// NeedsReset reports whether any GPU's plan resets its GPU.
func (p NodePlan) NeedsReset() bool {
	for _, g := range p.GPUs {
		if g.NeedsReset {
			return true
		}
	}
	return false
}

// PlanNode plans every GPU of a node independently, in index order. models
// and targets are keyed by GPU index; a GPU without a target becomes a whole
// GPU (MIG off), and a model is needed only for GPUs whose target enables
// MIG. When some GPUs cannot be planned the error joins their errors and the
// NodePlan holds the plans of the others, for reporting; a caller that needs
// all or nothing must not apply it.
func PlanNode(gpus []GPU, models map[int]Model, targets map[int]Target, inUse map[string]bool) (NodePlan, error) {
	sorted := append([]GPU(nil), gpus...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Index < sorted[j].Index })
	var errs []error
	present := make(map[int]bool, len(sorted))
	plan := NodePlan{GPUs: make([]GPUPlan, 0, len(sorted))}
	for _, g := range sorted {
		present[g.Index] = true
		p, err := PlanGPU(g, models[g.Index], targets[g.Index], inUse)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		plan.GPUs = append(plan.GPUs, p)
	}
	var missing []int
	for i := range targets {
		if !present[i] {
			missing = append(missing, i)
		}
	}
	sort.Ints(missing)
	for _, i := range missing {
		errs = append(errs, fmt.Errorf("GPU %d: target given for a GPU the node does not have", i))
	}
	return plan, errors.Join(errs...)
}

// PlanGPU plans the operations that turn GPU g, a GPU of model m, into
// target t, changing as little as possible. inUse holds the device UUIDs
// (GPU and MIG device UUIDs) that pods hold.
//
// It keeps every existing instance whose profile is still wanted and whose
// placement leaves room for the rest of the target, choosing the kept set
// exactly: first as many instances in use as possible, then the fewest
// NVML operations, then as many instances as possible (incomplete GPU
// instances count: their compute instances are repaired instead of the GPU
// instance being re-made), then as many complete ones. Only what must go is
// destroyed. Ops run in this order: destroy CIs, destroy GIs, MIG mode
// change and reset, create GIs, create CIs.
//
// A plan that would destroy an instance in use, or reset a GPU in use, has
// Blocked entries and no Ops; WouldDo then says what it would do. A target
// that cannot be realised on the model returns an error wrapping
// ErrCannotPlace; a MIG target for a GPU without MIG, one wrapping
// ErrNotSupported.
func PlanGPU(g GPU, m Model, t Target, inUse map[string]bool) (GPUPlan, error) {
	p := GPUPlan{
		Index: g.Index, UUID: g.UUID, Model: g.Model,
		Mode: modeWord(g, g.MIGMode), PendingMode: modeWord(g, g.PendingMIGMode),
		Instances: []PlannedInstance{}, Ops: []Op{},
	}
	if m.Key != "" {
		p.Model = m.Key
	}
	if t.MIG != nil {
		p.Target.MIG = maps.Clone(t.MIG)
	}
	name := fmt.Sprintf("GPU %d (%s)", g.Index, p.Model)
	if !g.MIGCapable {
		if t.MIGEnabled() {
			return p, fmt.Errorf("%s: the target asks for MIG instances but the GPU cannot do MIG: %w", name, ErrNotSupported)
		}
		return p, nil
	}

	var pl gpuPlanner
	pl.g, pl.m, pl.inUse = g, m, inUse
	if t.MIGEnabled() {
		if len(m.Profiles) == 0 {
			return p, fmt.Errorf("%s: no MIG geometry known for this GPU model: %w", name, ErrCannotPlace)
		}
		if err := pl.planMIG(t.MIG); err != nil {
			return p, fmt.Errorf("%s: %w", name, err)
		}
	} else {
		pl.planWhole()
	}
	if pl.final != nil {
		p.Instances = pl.final
	}
	p.NeedsReset = pl.reset
	if len(pl.blocked) > 0 {
		p.Blocked, p.WouldDo = pl.blocked, pl.ops
	} else if pl.ops != nil {
		p.Ops = pl.ops
	}
	return p, nil
}

func modeWord(g GPU, m MIGMode) string {
	if !g.MIGCapable {
		return "unsupported"
	}
	return m.String()
}

// gpuPlanner builds the plan of one MIG-capable GPU.
type gpuPlanner struct {
	g       GPU
	m       Model
	inUse   map[string]bool
	final   []PlannedInstance
	ops     []Op
	blocked []Blocker
	reset   bool
}

// busyUUIDs returns the MIG device UUIDs of an instance that pods hold.
func (pl *gpuPlanner) busyUUIDs(in Instance) []string {
	var out []string
	for _, ci := range in.CIs {
		if ci.UUID != "" && pl.inUse[ci.UUID] {
			out = append(out, ci.UUID)
		}
	}
	return out
}

// block records the busy devices of an instance that the plan disturbs.
func (pl *gpuPlanner) block(in Instance, reason string) {
	for _, u := range pl.busyUUIDs(in) {
		pl.blocked = append(pl.blocked, Blocker{UUID: u, Profile: in.Profile, Placement: in.Placement, GIID: in.GIID, Reason: reason})
	}
}

// blockGPU records every busy device of the GPU, for a MIG mode change.
func (pl *gpuPlanner) blockGPU(reason string) {
	if pl.inUse[pl.g.UUID] {
		pl.blocked = append(pl.blocked, Blocker{UUID: pl.g.UUID, GIID: -1, Reason: reason})
	}
	for _, in := range pl.g.Instances {
		pl.block(in, reason)
	}
}

// destroyCIs returns the ops that destroy the compute instances of an
// instance.
func destroyCIs(in Instance) []Op {
	ops := make([]Op, 0, len(in.CIs))
	for _, ci := range in.CIs {
		ops = append(ops, Op{Kind: OpDestroyCI, Profile: in.Profile, ProfileID: in.ProfileID, Placement: in.Placement, GIID: in.GIID, CIID: ci.ID, UUID: ci.UUID})
	}
	return ops
}

// destroyGI returns the op that destroys a GPU instance.
func destroyGI(in Instance) Op {
	return Op{Kind: OpDestroyGI, Profile: in.Profile, ProfileID: in.ProfileID, Placement: in.Placement, GIID: in.GIID, CIID: -1}
}

// planWhole plans a GPU whose target is MIG off.
func (pl *gpuPlanner) planWhole() {
	g := pl.g
	if g.MIGMode == MIGDisabled {
		if g.PendingMIGMode != MIGDisabled {
			pl.ops = append(pl.ops, gpuOp(OpDisableMIG))
		}
		return
	}
	var gis []Op
	for _, in := range g.Instances {
		pl.ops = append(pl.ops, destroyCIs(in)...)
		gis = append(gis, destroyGI(in))
	}
	pl.ops = append(pl.ops, gis...)
	if g.PendingMIGMode != MIGDisabled {
		pl.ops = append(pl.ops, gpuOp(OpDisableMIG))
	}
	pl.ops = append(pl.ops, gpuOp(OpResetGPU))
	pl.reset = true
	pl.blockGPU("in use; disabling MIG destroys every MIG instance and resets the GPU")
}

// planMIG plans a GPU whose target is MIG on with the given instances.
func (pl *gpuPlanner) planMIG(want map[string]int) error {
	g, m := pl.g, pl.m
	slots, err := Place(m, want)
	if err != nil {
		return err
	}
	if g.MIGMode != MIGEnabled {
		// Whole GPU now: no instances to keep.
		if g.PendingMIGMode != MIGEnabled {
			pl.ops = append(pl.ops, gpuOp(OpEnableMIG))
		}
		pl.ops = append(pl.ops, gpuOp(OpResetGPU))
		pl.reset = true
		pl.create(slots, nil)
		pl.blockGPU("in use; enabling MIG resets the GPU")
		return nil
	}

	keep := pl.chooseKept(want)
	kept := make(map[int]bool, len(keep))
	left := maps.Clone(want)
	var occupied uint64
	for _, i := range keep {
		in := g.Instances[i]
		kept[i] = true
		left[pl.profileOf(in).Name]--
		occupied |= placementMask(in.Placement)
	}
	groups, err := checkCounts(m, left)
	if err != nil {
		return err
	}
	newSlots, ok := placeAround(groups, occupied)
	if !ok {
		// chooseKept only returns kept sets that leave room for the rest.
		return fmt.Errorf("internal error: kept instances leave no room: %w", ErrCannotPlace)
	}

	var cis, gis []Op
	var repairs []Instance
	for i, in := range g.Instances {
		if kept[i] {
			p := pl.profileOf(in)
			if in.Complete() {
				pl.final = append(pl.final, PlannedInstance{Profile: p.Name, ProfileID: p.ID, Placement: in.Placement, Status: StatusKept, GIID: in.GIID, UUID: in.UUID()})
				continue
			}
			pl.final = append(pl.final, PlannedInstance{Profile: p.Name, ProfileID: p.ID, Placement: in.Placement, Status: StatusRepair, GIID: in.GIID})
			cis = append(cis, destroyCIs(in)...)
			repairs = append(repairs, in)
			pl.block(in, "in use; its GPU instance is incomplete and its compute instances must be re-made")
			continue
		}
		cis = append(cis, destroyCIs(in)...)
		gis = append(gis, destroyGI(in))
		if len(pl.busyUUIDs(in)) > 0 {
			pl.block(in, pl.whyDestroy(i, want, keep))
		}
	}
	pl.ops = append(append(pl.ops, cis...), gis...)
	if g.PendingMIGMode != MIGEnabled {
		// Only the pending mode is wrong: put it back, no reset needed.
		pl.ops = append(pl.ops, gpuOp(OpEnableMIG))
	}
	pl.create(newSlots, repairs)
	return nil
}

// create appends the ops that create new instances (GIs, then CIs) and
// re-create the compute instances of repaired ones, in placement order.
func (pl *gpuPlanner) create(slots []Slot, repairs []Instance) {
	for _, s := range slots {
		pl.final = append(pl.final, PlannedInstance{Profile: s.Profile, ProfileID: s.ProfileID, Placement: s.Placement, Status: StatusNew, GIID: -1})
		pl.ops = append(pl.ops, Op{Kind: OpCreateGI, Profile: s.Profile, ProfileID: s.ProfileID, Placement: s.Placement, GIID: -1, CIID: -1})
	}
	cis := make([]Op, 0, len(slots)+len(repairs))
	for _, s := range slots {
		cis = append(cis, Op{Kind: OpCreateCI, Profile: s.Profile, ProfileID: s.ProfileID, Placement: s.Placement, GIID: -1, CIID: -1})
	}
	for _, in := range repairs {
		p := pl.profileOf(in)
		cis = append(cis, Op{Kind: OpCreateCI, Profile: p.Name, ProfileID: p.ID, Placement: in.Placement, GIID: in.GIID, CIID: -1})
	}
	sort.SliceStable(cis, func(a, b int) bool { return cis[a].Placement.Start < cis[b].Placement.Start })
	pl.ops = append(pl.ops, cis...)
	sort.Slice(pl.final, func(a, b int) bool { return pl.final[a].Placement.Start < pl.final[b].Placement.Start })
}

// profileOf returns the model's profile of an existing instance (by NVML
// profile ID, else by name), or a profile with an empty name.
func (pl *gpuPlanner) profileOf(in Instance) GIProfile {
	if p, ok := pl.m.ProfileByID(in.ProfileID); ok {
		return p
	}
	if p, ok := pl.m.Profile(in.Profile); ok {
		return p
	}
	return GIProfile{ID: in.ProfileID}
}

// keepable reports whether an existing instance could stay as part of the
// target: its profile is wanted and its placement is one the profile allows.
func (pl *gpuPlanner) keepable(in Instance, want map[string]int) bool {
	p := pl.profileOf(in)
	if p.Name == "" || want[p.Name] <= 0 {
		return false
	}
	return slices.Contains(p.Placements, in.Placement)
}

// keptSet is one candidate set of existing instances to keep.
type keptSet struct {
	members []int // indexes into g.Instances, ascending
	// score is, in order of importance: instances in use kept, NVML
	// operations saved (see opsSaved), instances kept, complete ones kept.
	score [4]int
}

// opsSaved is how many NVML operations keeping an instance saves over
// destroying it and making its replacement: a complete one saves
// destroying its compute and GPU instance and creating both again (4); an
// incomplete one, whose compute instances are re-made either way, saves
// destroying and creating its GPU instance (2). Every plan of one target
// makes the same mode changes, so the kept set with the most saved is the
// plan with the fewest operations.
func opsSaved(in Instance) int {
	if in.Complete() {
		return 4
	}
	return 2
}

// better reports whether a should be preferred to b: a higher score, then
// lower instances kept.
func (a keptSet) better(b keptSet) bool {
	if a.score != b.score {
		for k := range a.score {
			if a.score[k] != b.score[k] {
				return a.score[k] > b.score[k]
			}
		}
	}
	for k := 0; k < len(a.members) && k < len(b.members); k++ {
		if a.members[k] != b.members[k] {
			return a.members[k] < b.members[k]
		}
	}
	return len(a.members) > len(b.members)
}

// chooseKept returns the indexes (into g.Instances) of the instances to
// keep: of all sets of keepable instances that stay within the wanted
// counts and leave room to place the rest of the target, the one with the
// most instances in use, then the fewest NVML operations (the most saved),
// then the most instances, then the most complete ones; ties go to the set
// that keeps lower placements. The
// search is exact over all subsets (a GPU holds at most a handful of
// instances); when every keepable instance can stay, that set is taken at
// once.
func (pl *gpuPlanner) chooseKept(want map[string]int) []int {
	type cand struct {
		index, profile, saved int
		busy, complete        bool
		mask                  uint64
	}
	profileIndex := make(map[string]int, len(pl.m.Profiles))
	for i, p := range pl.m.Profiles {
		profileIndex[p.Name] = i
	}
	limit := make([]int, len(pl.m.Profiles))
	for name, n := range want {
		if i, ok := profileIndex[name]; ok {
			limit[i] = n
		}
	}
	var cands []cand
	for i, in := range pl.g.Instances {
		if !pl.keepable(in, want) {
			continue
		}
		cands = append(cands, cand{
			index: i, profile: profileIndex[pl.profileOf(in).Name], mask: placementMask(in.Placement),
			saved: opsSaved(in), busy: len(pl.busyUUIDs(in)) > 0, complete: in.Complete(),
		})
	}
	if len(cands) > 16 {
		// More GPU instances than any GPU holds; keep the search bounded.
		cands = cands[:16]
	}
	counts := make([]int, len(limit))
	build := func(mask int) (keptSet, bool) {
		clear(counts)
		var occupied uint64
		ks := keptSet{}
		for b, c := range cands {
			if mask&(1<<b) == 0 {
				continue
			}
			if occupied&c.mask != 0 || counts[c.profile] >= limit[c.profile] {
				return ks, false
			}
			occupied |= c.mask
			counts[c.profile]++
			ks.members = append(ks.members, c.index)
			ks.score[0] += b2i(c.busy)
			ks.score[1] += c.saved
			ks.score[2]++
			ks.score[3] += b2i(c.complete)
		}
		return ks, true
	}
	all := 1<<len(cands) - 1
	rest := pl.newRestFit(want)
	if ks, ok := build(all); ok && rest.room(ks.members) {
		return ks.members
	}
	var sets []keptSet
	for mask := range all {
		if ks, ok := build(mask); ok {
			sets = append(sets, ks)
		}
	}
	sort.SliceStable(sets, func(a, b int) bool { return sets[a].better(sets[b]) })
	for _, ks := range sets {
		if rest.room(ks.members) {
			return ks.members
		}
	}
	return nil
}

// b2i is 1 for true, else 0.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// roomForRest reports whether the wanted instances not covered by the kept
// ones can be placed around them.
func (pl *gpuPlanner) roomForRest(want map[string]int, keep []int) bool {
	return pl.newRestFit(want).room(keep)
}

// restFit answers roomForRest for many kept sets of one target, reusing
// its buffers: chooseKept asks it up to 2^7 times per GPU. The target has
// passed checkCounts and a kept set never holds more of a profile than it
// wants, so what is left needs only the placement search.
type restFit struct {
	pl    *gpuPlanner
	order []int      // indexes into pl.m.Profiles of the wanted profiles, largest first
	want  []int      // per profile index
	left  []int      // per profile index: wanted, less the kept
	masks [][]uint64 // per profile index, the masks of its placements
	inst  []int      // per instance of the GPU, its profile index (-1: unknown)
	s     searcher
}

func (pl *gpuPlanner) newRestFit(want map[string]int) *restFit {
	n := len(pl.m.Profiles)
	r := &restFit{pl: pl, want: make([]int, n), left: make([]int, n), masks: make([][]uint64, n)}
	index := make(map[string]int, n)
	for i, p := range pl.m.Profiles {
		index[p.Name] = i
		if want[p.Name] > 0 {
			r.want[i] = want[p.Name]
			r.order = append(r.order, i)
		}
		for _, pc := range p.Placements {
			r.masks[i] = append(r.masks[i], placementMask(pc))
		}
	}
	for _, in := range pl.g.Instances {
		k, ok := index[pl.profileOf(in).Name]
		if !ok {
			k = -1
		}
		r.inst = append(r.inst, k)
	}
	ps := pl.m.Profiles
	sort.SliceStable(r.order, func(a, b int) bool {
		return largerFirst(ps[r.order[a]], ps[r.order[b]], r.order[a], r.order[b])
	})
	return r
}

// room reports whether the rest of the target fits around keep.
func (r *restFit) room(keep []int) bool {
	copy(r.left, r.want)
	var occupied uint64
	for _, i := range keep {
		k := r.inst[i]
		if k < 0 || r.left[k] == 0 {
			return false // kept beyond the target: never asked, but not room
		}
		r.left[k]--
		occupied |= placementMask(r.pl.g.Instances[i].Placement)
	}
	s := &r.s
	s.profiles, s.masks = s.profiles[:0], s.masks[:0]
	for _, k := range r.order {
		p := r.pl.m.Profiles[k]
		for range r.left[k] {
			s.profiles = append(s.profiles, p)
			s.masks = append(s.masks, r.masks[k])
		}
	}
	s.choice = slices.Grow(s.choice[:0], len(s.profiles))[:len(s.profiles)]
	clear(s.dead)
	return s.run(0, occupied)
}

// whyDestroy says why an instance the plan destroys must go.
func (pl *gpuPlanner) whyDestroy(idx int, want map[string]int, keep []int) string {
	in := pl.g.Instances[idx]
	p := pl.profileOf(in)
	switch {
	case p.Name == "":
		return fmt.Sprintf("in use; its profile (ID %d) is unknown to %s", in.ProfileID, pl.m.Key)
	case want[p.Name] <= 0:
		return fmt.Sprintf("in use; the target has no %s", p.Name)
	case !pl.keepable(in, want):
		return fmt.Sprintf("in use; placement %s is not valid for %s on %s", in.Placement, p.Name, pl.m.Key)
	}
	// Could it stay beside the busy instances that are kept? If not, its
	// placement is the problem; if so, the count is.
	var with []int
	same, sameBusy := 0, 0
	var occupied uint64
	for _, i := range keep {
		k := pl.g.Instances[i]
		if pl.profileOf(k).Name == p.Name {
			same++
		}
		if len(pl.busyUUIDs(k)) > 0 {
			with = append(with, i)
			occupied |= placementMask(k.Placement)
			if pl.profileOf(k).Name == p.Name {
				sameBusy++
			}
		}
	}
	with = append(with, idx)
	if sameBusy < want[p.Name] && occupied&placementMask(in.Placement) == 0 && !pl.roomForRest(want, with) {
		return fmt.Sprintf("in use; at %s it leaves no room for the rest of the target (%s)", in.Placement, countsWords(pl.m, want))
	}
	return fmt.Sprintf("in use; the target wants %d %s and keeps %s", want[p.Name], p.Name, instancesWord(same))
}

func instancesWord(n int) string {
	if n == 1 {
		return "another one"
	}
	return fmt.Sprintf("%d others", n)
}

// countsWords writes counts in the model's profile order: "1g.10gb x2,
// 3g.40gb x1".
func countsWords(m Model, counts map[string]int) string {
	var parts []string
	for _, p := range m.Profiles {
		if n := counts[p.Name]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s x%d", p.Name, n))
		}
	}
	if len(parts) == 0 {
		return "no instances"
	}
	return strings.Join(parts, ", ")
}
