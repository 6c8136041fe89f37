package agent

import (
	"fmt"
	"slices"

	"github.com/carve-dev/carve/desired"
	"github.com/carve-dev/carve/dra"
	"github.com/carve-dev/carve/internal/textfmt"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/timeslice"
)

// desiredState resolves the selected profile on the node's GPUs. A profile
// that cannot be realised here (it does not fit the GPUs, or it has dynamic
// GPUs and the agent does not advertise through DRA) is reported
// unrealisable and ends the pass with the GPUs as they are.
func (p *pass) desiredState() (desired.State, bool) {
	want, err := desired.For(p.file, p.sel.Profile, p.node)
	if err == nil {
		err = p.r.dynamicNeedsDRA(want)
	}
	if err != nil {
		p.unrealisable(err)
		return desired.State{}, false
	}
	return want, true
}

// dynamicNeedsDRA refuses a state with dynamic GPUs unless the agent
// advertises through DRA: their MIG devices are offered to claims and
// made for them, which only carve's DRA driver does.
func (r *Reconciler) dynamicNeedsDRA(want desired.State) error {
	gpus := want.DynamicGPUs()
	if len(gpus) == 0 || r.Advertise == AdvertiseDRA {
		return nil
	}
	mode := r.Advertise
	if mode == "" {
		mode = AdvertiseDevicePlugin
	}
	verb := "is"
	if len(gpus) > 1 {
		verb = "are"
	}
	return fmt.Errorf("%s %s dynamic (MIG devices made on demand for DRA claims), which needs carve-agent --advertise %s; this agent runs --advertise %s",
		textfmt.GPUs(gpus), verb, AdvertiseDRA, mode)
}

// DynamicAdvertiser is a GPUAdvertiser that offers dynamic GPUs, whose
// MIG devices it makes for claims (the DRA driver).
type DynamicAdvertiser interface {
	GPUAdvertiser
	// SetDynamic sets the GPUs offered as dynamic from the next Advertise.
	SetDynamic(gpus []dra.DynamicGPU)
	// SetChanging marks the GPUs (UUIDs) changing between static and
	// dynamic, whose devices must not be allocated anew.
	SetChanging(uuids []string)
	// ClaimInstances returns the placements of the MIG devices made for
	// claims, by GPU UUID.
	ClaimInstances() map[string][]partition.Placement
	// Dynamic returns the GPUs offered as dynamic.
	Dynamic() []dra.DynamicGPU
	// MadeInstances returns the MIG devices made for claims, with the
	// claims' names.
	MadeInstances() []dra.MadeInstance
}

var _ DynamicAdvertiser = (*dra.Driver)(nil)

// claimInstances returns the MIG devices made for claims, by GPU UUID, or
// nil when no driver makes them.
func (p *pass) claimInstances() map[string][]partition.Placement {
	if da, ok := p.r.Devices.(DynamicAdvertiser); ok {
		return da.ClaimInstances()
	}
	return nil
}

// planView is the node as this pass read it, as the planner sees it for
// want: on each GPU dynamic in want, the instances made for claims are
// left out (desired.State.WithoutClaimInstances). The claims' instances
// are read now, after the GPUs: a device made for a claim is recorded
// before it is made, so one the read found is among them.
func (p *pass) planView(want desired.State) partition.Node {
	return want.WithoutClaimInstances(p.node, p.claimInstances())
}

// offerDynamic tells a DynamicAdvertiser which GPUs to offer as dynamic
// (those dynamic in the state wanted that hold, in MIG mode, no instance
// but the claims') and which are changing between static and dynamic
// (dynamic in the state wanted but not ready yet, or static in it, still
// holding instances made for claims, and still to change).
func (p *pass) offerDynamic() {
	da, ok := p.r.Devices.(DynamicAdvertiser)
	if !ok || p.want.Profile == "" {
		return // no profile resolved in this pass: the GPUs stay as offered
	}
	claims := da.ClaimInstances()
	view := p.want.WithoutClaimInstances(p.node, claims)
	var ready []dra.DynamicGPU
	var changing []string
	for _, g := range view.GPUs {
		profiles, dynamic := p.want.Dynamic[g.Index]
		switch {
		case dynamic && g.MIGMode == partition.MIGEnabled && len(g.Instances) == 0:
			ready = append(ready, dra.DynamicGPU{Index: g.Index, UUID: g.UUID, Model: p.node.Models[g.Index], Profiles: profiles})
		case dynamic || len(claims[g.UUID]) > 0 && p.changes(g.Index):
			changing = append(changing, g.UUID)
		}
	}
	da.SetDynamic(ready)
	da.SetChanging(changing)
}

// changes reports whether this pass's plan still changes the GPU.
func (p *pass) changes(index int) bool {
	return slices.ContainsFunc(p.nodePlan.GPUs, func(gp partition.GPUPlan) bool { return gp.Index == index && !gp.NoOp() })
}

// hideClaimInstances withholds the MIG devices made for claims on GPUs
// static in the state wanted (a GPU turned static whose new layout kept
// them): they are the claims' until unprepared, when they are destroyed
// and a later pass makes the profile's own again, and must not be offered
// to anyone else meanwhile. A dynamic GPU's are never described.
func (p *pass) hideClaimInstances() {
	claims := p.claimInstances()
	for _, g := range p.node.GPUs {
		if _, dynamic := p.want.Dynamic[g.Index]; dynamic || len(claims[g.UUID]) == 0 {
			continue
		}
		for _, in := range g.Instances {
			if uuid := in.UUID(); uuid != "" && slices.Contains(claims[g.UUID], in.Placement) {
				if p.hide == nil {
					p.hide = timeslice.IDSet{}
				}
				p.hide[uuid] = true
			}
		}
	}
}
