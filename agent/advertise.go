package agent

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/internal/textfmt"
	"github.com/carve-dev/carve/timeslice"
)

// advertiseAndRecord advertises the GPUs as they are (less the devices a
// blocked change will remove), settles the profile realised, and builds
// the Result: state, labels, node record, Events, evictions.
func (p *pass) advertiseAndRecord() (Result, error) {
	res, err := timeslice.Expand(p.node.GPUs, p.sharing)
	if err != nil {
		return Result{}, fmt.Errorf("reconcile: resources: %w", err)
	}
	p.withholdLost()
	p.hideWhileHeld()
	p.hideClaimInstances()
	res = res.Without(p.hide)
	if err := p.advertise(res); err != nil {
		p.raise(carvev1.StateFailed)
		p.err = errors.Join(p.err, fmt.Errorf("advertise devices: %w", err))
		p.wakeAt(p.in.Now.Add(p.r.retryInterval()))
		p.event(true, carvev1.ReasonAdvertiseFailed, "advertising devices failed: %s", textfmt.OneLine(err.Error()))
		p.done = nil
	}
	if p.done != nil {
		p.settle(p.done)
	}
	if p.state == "" {
		p.state = carvev1.StateSuccess
		if p.adopted() {
			p.state = carvev1.StateAdopted
		}
	}
	p.endChange()
	out := Result{
		State:         p.state,
		Selection:     p.sel,
		Events:        p.r.dedupe(p.events),
		Requeue:       p.requeue,
		Resources:     res,
		Err:           p.err,
		OpsApplied:    p.opsApplied,
		ApplyDuration: p.applyDuration,
		Rollout:       p.rolloutStatus(),
		DrainDeadline: p.drainDeadline,
		ReleaseSlot:   p.release,
	}
	out.Labels, out.Annotation = p.record(res)
	if p.state == carvev1.StateDraining && p.file.Drain.Policy == configs.DrainEvict && p.fenced == nil {
		out.Evict = p.inUse.Holding(blockers(p.blocked))
	}
	return out, nil
}

// advertise hands res to the Advertiser; a GPUAdvertiser gets the GPUs too.
func (p *pass) advertise(res timeslice.Resources) error {
	p.offerDynamic()
	if ga, ok := p.r.Devices.(GPUAdvertiser); ok {
		return ga.Advertise(p.ctx, p.node.GPUs, res)
	}
	return p.r.Devices.Update(p.ctx, res)
}

// settle makes done the profile realised, says so when only the sharing
// changed, and removes the checkpoint.
func (p *pass) settle(done *appliedState) {
	prev := p.r.applied
	changed := prev == nil || prev.hash != done.hash || prev.profile != done.profile || !sameSharing(prev.sharing, done.sharing)
	if changed && prev != nil && p.state == "" && !p.has(carvev1.ReasonRepartitioned) {
		p.event(false, carvev1.ReasonSharingChanged, "profile %s (%s) in force; no MIG change needed", done.profile, p.sel.Source)
	}
	p.r.applied = done
	p.clearIntent()
}

// record returns the labels to write and the node record.
func (p *pass) record(res timeslice.Resources) (map[string]string, carvev1.NodeRecord) {
	var applied, hash string
	if a := p.r.applied; a != nil {
		applied, hash = a.profile, a.hash
	}
	labels := Labels(LabelInput{
		Applied: applied, Source: reportedSource(p.sel, p.state), Window: p.sel.Window, State: p.state,
		GPUs: p.node.GPUs, Resources: res, Options: p.r.Labels,
	})
	lastErr := ""
	if p.err != nil {
		lastErr = textfmt.OneLine(p.err.Error())
	}
	pinLabel := ""
	if p.in.Config != nil {
		pinLabel = p.in.Config.PinLabel()
	}
	rec := carvev1.NodeRecord{
		Profile: applied, ProfileHash: hash, Selected: SelectedFrom(p.sel, pinLabel), State: p.state, AgentVersion: p.r.AgentVersion, ConfigMap: p.r.ConfigMap,
		LastError: lastErr, Waiting: p.waitReason, Change: p.r.change, InUse: p.inUseRecord(), Applying: p.r.applying,
		GPUs:   p.markDynamic(p.markWithheld(GPURecords(p.node.GPUs, res, p.sharing))),
		Labels: slices.Sorted(maps.Keys(labels)),
	}
	return labels, carvev1.Next(p.in.Previous, rec, p.in.Now)
}

// inUseRecord returns the devices pods hold, for the record: the kubelet's
// answer of this pass, asked now if the pass did not need it. The answer
// changes only when a pod that holds a device starts or ends, so a node at
// rest writes nothing. When the kubelet does not answer, the record keeps
// what it said.
func (p *pass) inUseRecord() *carvev1.InUseRecord {
	if p.inUse == nil {
		u, err := p.r.InUse.InUse(p.ctx)
		if err != nil {
			p.log.Info("devices in use unknown; the node record keeps its list", "err", err)
			if p.in.Previous != nil {
				return p.in.Previous.InUse
			}
			return nil
		}
		p.inUse = u
	}
	return InUseRecord(p.inUse)
}

// adopted reports whether the pass found an accepted profile file that
// selects nothing for the node: its GPUs are adopted as they are.
func (p *pass) adopted() bool {
	return p.file != nil && p.sel.Source == configs.SourceNone
}

// reportedSource is the carve.dev/profile.source value (and the source of
// carve_agent_profile) for a selection that ended the pass in state:
// SourceAdopted for a node nothing selects, "" (no label) when the file
// was rejected, else the selection's own.
func reportedSource(sel configs.Selection, state string) string {
	switch {
	case state == carvev1.StateAdopted:
		return carvev1.SourceAdopted
	case sel.Source == configs.SourceNone:
		return ""
	}
	return sel.Source
}

func (p *pass) has(reason string) bool {
	return slices.ContainsFunc(p.events, func(e Event) bool { return e.Reason == reason })
}

// sameSharing reports whether two nodes' sharing settings are the same.
func sameSharing(a, b map[int]timeslice.Sharing) bool {
	return maps.EqualFunc(a, b, timeslice.Sharing.Equal)
}
