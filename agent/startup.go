package agent

import (
	"maps"
	"slices"
	"strings"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/internal/textfmt"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/timeslice"
)

// Why a GPU is held back, as the node record's notAdvertised says.
const (
	heldLost = carvev1.NotAdvertisedLost
	heldNew  = carvev1.NotAdvertisedNew
)

// startupState is what a Reconciler keeps between passes to find the GPUs
// that must not be advertised as they are: those that lost their
// partition, and those new to the agent, until the profile in force is
// realised on them. Rebooted MIG GPUs lose their instances; advertising
// what is left (a whole GPU, or the instances rebuilt so far) would let
// pods land on devices a pending change is about to destroy.
type startupState struct {
	// seen are the complete MIG instances of each GPU (by UUID) at the end
	// of the last pass, or as the node record listed them; nil until the
	// first pass has read them.
	seen map[string]map[instanceKey]bool
	// fresh are the GPUs (by UUID) no node record listed, until a pass
	// resolves a profile and finds them realised (or not: then they are
	// held).
	fresh map[string]bool
	// held are the GPUs (by UUID) that advertise nothing until the profile
	// in force is realised on them, with why (heldLost or heldNew).
	held map[string]string
	// withheld are the GPUs held back by the current pass, with why: what
	// the node record says.
	withheld map[string]string
}

// instanceKey names a complete MIG instance.
type instanceKey struct {
	profile   string
	placement partition.Placement
	uuid      string
}

// findLost runs when a pass has read the GPUs. On the first pass it takes
// from the node record what the GPUs held and which were held back, and
// which GPUs no record lists; on every pass, a GPU that lacks a MIG
// instance it held before (a reboot, a reset by someone else) is held
// back until the profile in force is realised on it.
func (p *pass) findLost() {
	s := &p.r.startup
	if s.held == nil {
		s.held = map[string]string{}
	}
	if s.seen == nil {
		p.readRecord()
	}
	for _, g := range p.node.GPUs {
		before, ok := s.seen[g.UUID]
		if !ok || s.held[g.UUID] != "" {
			continue
		}
		now := instancesOf(g)
		var gone []string
		for k := range before {
			if !now[k] {
				gone = append(gone, k.profile+" at "+k.placement.String())
			}
		}
		if len(gone) > 0 {
			slices.Sort(gone)
			s.held[g.UUID] = heldLost
			p.log.Warn("a GPU lost MIG instances; it advertises nothing until the profile in force is realised on it",
				"gpu", g.Index, "uuid", g.UUID, "gone", gone)
		}
	}
}

// readRecord takes the GPUs' instances and the held-back GPUs from the
// node record; with no record, every GPU is fresh.
func (p *pass) readRecord() {
	s := &p.r.startup
	s.seen, s.fresh = map[string]map[instanceKey]bool{}, map[string]bool{}
	listed := map[string]bool{}
	if prev := p.in.Previous; prev != nil {
		for _, g := range prev.GPUs {
			listed[g.UUID] = true
			set := map[instanceKey]bool{}
			for _, in := range g.Instances {
				if in.UUID != "" {
					set[instanceKey{profile: in.Profile, placement: partition.PlacementFromV1(in.Placement), uuid: in.UUID}] = true
				}
			}
			s.seen[g.UUID] = set
			if g.NotAdvertised != "" {
				s.held[g.UUID] = recordedCause(g.NotAdvertised)
			}
		}
	}
	for _, g := range p.node.GPUs {
		if !listed[g.UUID] {
			s.fresh[g.UUID] = true
		}
	}
}

// recordedCause maps a record's notAdvertised back to a cause; one this
// agent does not know counts as a lost partition.
func recordedCause(s string) string {
	if s == heldNew {
		return heldNew
	}
	return heldLost
}

// instancesOf returns the complete MIG instances of a GPU.
func instancesOf(g partition.GPU) map[instanceKey]bool {
	out := map[instanceKey]bool{}
	for _, in := range g.Instances {
		if in.Complete() {
			out[instanceKey{profile: in.Profile, placement: in.Placement, uuid: in.UUID()}] = true
		}
	}
	return out
}

// withholdLost runs before the pass advertises: it hides every device of
// the GPUs held back on which the profile in force is not realised yet,
// lets the others go, and reports the held ones. Fresh GPUs are judged once
// a pass has resolved a profile: held when it is not realised on them. A
// pass that resolves no profile (file rejected, profile unrealisable)
// keeps the held GPUs held; on a node no profile selects, nothing will
// repartition them, and they are advertised as they are.
func (p *pass) withholdLost() {
	s := &p.r.startup
	s.withheld = map[string]string{}
	byUUID := make(map[string]partition.GPU, len(p.node.GPUs))
	for _, g := range p.node.GPUs {
		byUUID[g.UUID] = g
	}
	resolved := p.want.Profile != ""
	unmanaged := p.file != nil && p.sel.Source == configs.SourceNone
	for uuid := range s.fresh {
		g, ok := byUUID[uuid]
		switch {
		case !ok || unmanaged:
			delete(s.fresh, uuid)
		case resolved:
			if !p.realised(g) {
				s.held[uuid] = heldNew
			}
			delete(s.fresh, uuid)
		}
	}
	causes := map[string][]int{}
	for _, uuid := range slices.Sorted(maps.Keys(s.held)) {
		g, ok := byUUID[uuid]
		switch {
		case !ok:
			delete(s.held, uuid)
		case unmanaged || resolved && p.realised(g):
			p.log.Info("a GPU held back holds the profile in force again; advertising it", "gpu", g.Index, "uuid", uuid, "profile", p.want.Profile)
			delete(s.held, uuid)
		default:
			if p.hide == nil {
				p.hide = timeslice.IDSet{}
			}
			p.hide[uuid] = true
			s.withheld[uuid] = s.held[uuid]
			causes[s.held[uuid]] = append(causes[s.held[uuid]], g.Index)
		}
	}
	s.seen = make(map[string]map[instanceKey]bool, len(p.node.GPUs))
	for _, g := range p.node.GPUs {
		s.seen[g.UUID] = instancesOf(g)
	}
	if len(causes) > 0 {
		p.reportWithheld(causes)
	}
}

// reportWithheld says which GPUs advertise nothing, and why, in a Warning
// Event.
func (p *pass) reportWithheld(causes map[string][]int) {
	what := "the profile in force"
	if p.sel.Source != configs.SourceNone && p.sel.Profile != "" {
		what = "profile " + p.sel.Profile
	}
	var parts []string
	for _, cause := range []string{heldLost, heldNew} {
		idx := causes[cause]
		if len(idx) == 0 {
			continue
		}
		slices.Sort(idx)
		why := "lost the MIG instances the node record lists, as after a reboot"
		if cause == heldNew {
			why = "not yet partitioned, and unknown to the node record (a new node or GPU)"
		}
		parts = append(parts, textfmt.GPUs(idx)+": "+why)
	}
	p.event(true, carvev1.ReasonPartitionLost, "no devices advertised until %s is realised there; %s",
		what, strings.Join(parts, "; "))
}

// realised reports whether the profile the pass resolved is realised on a
// GPU: planning it needs no operation.
func (p *pass) realised(g partition.GPU) bool {
	view := p.want.WithoutClaimInstances(partition.Node{GPUs: []partition.GPU{g}, Models: p.node.Models}, p.claimInstances())
	gp, err := partition.PlanGPU(view.GPUs[0], p.node.Models[g.Index], p.want.Targets[g.Index], nil)
	return err == nil && gp.NoOp()
}

// markWithheld notes in the GPUs' records why those held back by this pass
// advertise nothing.
func (p *pass) markWithheld(recs []carvev1.GPURecord) []carvev1.GPURecord {
	for i := range recs {
		recs[i].NotAdvertised = p.r.startup.withheld[recs[i].UUID]
	}
	return recs
}
