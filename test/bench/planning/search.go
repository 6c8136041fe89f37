package planning

import (
	"fmt"

	"github.com/carve-dev/carve/partition"
)

// existing is an instance of the GPU as the brute force sees it.
type existing struct {
	// profile indexes the model's profiles; -1 when the model lacks it.
	profile int
	mask    uint64
	// placed reports whether the placement is one the profile allows.
	placed   bool
	complete bool
	// busy reports whether a pod holds one of its devices.
	busy bool
	// cis is the number of its compute instances.
	cis int
}

// gpuSearch is the exhaustive search of one GPU whose target enables MIG:
// every subset of its instances as the kept set, times every arrangement
// of the instances still wanted on the memory slices left free.
type gpuSearch struct {
	bf   *bruteForce
	g    partition.GPU
	m    partition.Model
	have []existing
	want []int      // per profile of m, instances wanted
	rest []int      // per profile, instances still to place
	pls  [][]uint64 // per profile, the masks of its placements
	// modeOps counts the MIG mode operations every plan needs; gpuBusy is
	// true when they reset a GPU that a pod holds.
	modeOps int
	gpuBusy bool
	// base is the cost of the kept set being tried, fresh the new
	// instances it leaves to create, honours whether it leaves every busy
	// device alone.
	base, fresh int
	honours     bool
	// set is the kept set being tried; cur the arrangement being built.
	set uint64
	cur []choice
	// best is the fewest operations of a plan that honours the devices in
	// use, bestAny of any plan; -1 while none is found. bestSet and
	// bestNew are best's kept set and arrangement.
	best, bestAny int
	bestSet       uint64
	bestNew       []choice
}

// choice is a new instance of an arrangement: a profile of the model and
// one of its placements, by index.
type choice struct{ profile, placement int }

// newGPUSearch resolves the GPU's instances and the target against m.
func newGPUSearch(bf *bruteForce, g partition.GPU, m partition.Model, want map[string]int, inUse map[string]bool) (*gpuSearch, error) {
	if m.MemorySlices > 64 {
		return nil, fmt.Errorf("%d memory slices: %w", m.MemorySlices, partition.ErrCannotPlace)
	}
	if len(g.Instances) > 32 {
		return nil, fmt.Errorf("%d GPU instances, too many to try every subset: %w", len(g.Instances), partition.ErrInvalidArgument)
	}
	s := &gpuSearch{bf: bf, g: g, m: m, best: -1, bestAny: -1,
		want: make([]int, len(m.Profiles)), rest: make([]int, len(m.Profiles)), pls: make([][]uint64, len(m.Profiles))}
	for name, n := range want {
		i := profileIndex(m, name)
		if i < 0 || n < 0 {
			return nil, fmt.Errorf("%s x%d on %s: %w", name, n, m.Key, partition.ErrCannotPlace)
		}
		s.want[i] = n
	}
	for i, p := range m.Profiles {
		for _, pl := range p.Placements {
			s.pls[i] = append(s.pls[i], mask(pl))
		}
	}
	if g.MIGMode != partition.MIGEnabled {
		// A whole GPU now: enable MIG (unless pending) and reset; there is
		// nothing to keep.
		s.modeOps, s.gpuBusy = 1, inUse[g.UUID]
		if g.PendingMIGMode != partition.MIGEnabled {
			s.modeOps++
		}
		return s, nil
	}
	if g.PendingMIGMode != partition.MIGEnabled {
		s.modeOps = 1
	}
	for _, in := range g.Instances {
		s.have = append(s.have, resolve(m, in, inUse))
	}
	return s, nil
}

// resolve describes an existing instance against the model.
func resolve(m partition.Model, in partition.Instance, inUse map[string]bool) existing {
	e := existing{profile: -1, mask: mask(in.Placement), complete: in.Complete(), cis: len(in.CIs)}
	if p, ok := m.ProfileByID(in.ProfileID); ok {
		e.profile = profileIndex(m, p.Name)
	} else if p, ok := m.Profile(in.Profile); ok {
		e.profile = profileIndex(m, p.Name)
	}
	if e.profile >= 0 {
		for _, pl := range m.Profiles[e.profile].Placements {
			e.placed = e.placed || pl == in.Placement
		}
	}
	for _, ci := range in.CIs {
		e.busy = e.busy || (ci.UUID != "" && inUse[ci.UUID])
	}
	return e
}

// run tries every subset of the existing instances as the kept set.
func (s *gpuSearch) run() error {
	for set := range uint64(1) << len(s.have) {
		s.bf.res.subsets++
		if err := s.bf.tick(); err != nil {
			return err
		}
		s.set = set
		occupied, ok := s.keep(set)
		if !ok {
			continue
		}
		if err := s.arrange(0, 0, occupied); err != nil {
			return err
		}
	}
	return nil
}

// keep sets up the search of one kept set: what it costs, what is left to
// place, and whether it leaves the busy devices alone. It returns the
// memory slices the kept instances occupy, or false when the set cannot be
// kept (a profile not wanted, a placement not allowed, an overlap, more
// instances of a profile than wanted).
func (s *gpuSearch) keep(set uint64) (uint64, bool) {
	copy(s.rest, s.want)
	var occupied uint64
	s.base, s.fresh, s.honours = s.modeOps, 0, !s.gpuBusy
	for i, e := range s.have {
		if set&(1<<i) == 0 {
			s.base += e.cis + 1 // destroy its compute instances and itself
			s.honours = s.honours && !e.busy
			continue
		}
		if e.profile < 0 || !e.placed || occupied&e.mask != 0 || s.rest[e.profile] == 0 {
			return 0, false
		}
		occupied |= e.mask
		s.rest[e.profile]--
		if !e.complete {
			s.base += e.cis + 1 // re-make its compute instance
			s.honours = s.honours && !e.busy
		}
	}
	for _, n := range s.rest {
		s.fresh += n
	}
	return occupied, true
}

// arrange visits every arrangement of the instances still to place on the
// free memory slices, profile by profile, the instances of one profile at
// increasing placements (so each distinct layout is visited once), and
// scores each complete one.
func (s *gpuSearch) arrange(p, from int, occupied uint64) error {
	s.bf.res.states++
	if err := s.bf.tick(); err != nil {
		return err
	}
	for p < len(s.rest) && s.rest[p] == 0 {
		p, from = p+1, 0
	}
	if p == len(s.rest) {
		s.score()
		return nil
	}
	for k := from; k < len(s.pls[p]); k++ {
		if occupied&s.pls[p][k] != 0 {
			continue
		}
		s.rest[p]--
		s.cur = append(s.cur, choice{profile: p, placement: k})
		err := s.arrange(p, k+1, occupied|s.pls[p][k])
		s.cur = s.cur[:len(s.cur)-1]
		s.rest[p]++
		if err != nil {
			return err
		}
	}
	return nil
}

// score records a complete arrangement if the hardware allows the whole
// set: the kept instances cost base, each new one a create-gi and a
// create-ci.
func (s *gpuSearch) score() {
	if !s.allowed() {
		return
	}
	ops := s.base + 2*s.fresh
	if s.bestAny < 0 || ops < s.bestAny {
		s.bestAny = ops
	}
	if s.honours && (s.best < 0 || ops < s.best) {
		s.best, s.bestSet = ops, s.set
		s.bestNew = append(s.bestNew[:0], s.cur...)
	}
}

// allowed checks the rules that do not depend on placements on the full
// set of instances (the wanted counts): per-profile limits, compute
// slices, one media-extensions instance, media engines.
func (s *gpuSearch) allowed() bool {
	compute, me := 0, 0
	var need partition.Engines
	for i, n := range s.want {
		p := s.m.Profiles[i]
		if n > p.MaxCount {
			return false
		}
		compute += n * p.ComputeSlices
		if p.MediaExtensions {
			me += n
		}
		need = need.Plus(p.Engines, n)
	}
	return compute <= s.m.ComputeSlices && me <= 1 && len(need.MediaBeyond(s.m.MediaEngines())) == 0
}

// profileIndex returns the index of a profile in m, or -1.
func profileIndex(m partition.Model, name string) int {
	for i, p := range m.Profiles {
		if p.Name == name {
			return i
		}
	}
	return -1
}

// mask returns the memory slices a placement covers as bits.
func mask(p partition.Placement) uint64 {
	if p.Size >= 64 {
		return ^uint64(0)
	}
	return (uint64(1)<<uint(p.Size) - 1) << uint(p.Start)
}
