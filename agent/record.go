package agent

import (
	"slices"
	"sort"
	"time"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/plugin"
	"github.com/carve-dev/carve/timeslice"
)

// SelectedFrom returns the node record's account of a selection, nil when
// nothing is selected. pinLabel is the label that pins profiles; it is
// recorded when it is not carve.dev/profile.
func SelectedFrom(sel configs.Selection, pinLabel string) *carvev1.SelectedProfile {
	if sel.Source == configs.SourceNone || sel.Source == "" || sel.Profile == "" {
		return nil
	}
	if pinLabel == carvev1.LabelProfile {
		pinLabel = ""
	}
	return &carvev1.SelectedProfile{Profile: sel.Profile, Source: sel.Source, Window: sel.Window, PinLabel: pinLabel}
}

// GPURecords describes the GPUs as they are and as advertised.
func GPURecords(gpus []partition.GPU, res timeslice.Resources, sharing map[int]timeslice.Sharing) []carvev1.GPURecord {
	replicas := map[string]int{}
	for _, devs := range res {
		for _, d := range devs {
			replicas[d.UUID] = d.Replicas
		}
	}
	out := make([]carvev1.GPURecord, 0, len(gpus))
	for _, g := range gpus {
		r := carvev1.GPURecord{Index: g.Index, UUID: g.UUID, Model: g.Model, Product: g.Product, MemoryMiB: g.MemoryMiB, MIGMode: modeWord(g, g.MIGMode)}
		if p := modeWord(g, g.PendingMIGMode); p != r.MIGMode {
			r.PendingMIGMode = p
		}
		r.RenameShared = sharing[g.Index].RenameShared
		r.FailRequestsGreaterThanOne = sharing[g.Index].FailRequestsGreaterThanOne
		if g.MIGMode != partition.MIGEnabled {
			r.Replicas = replicas[g.UUID]
		}
		for _, in := range g.Instances {
			u := in.UUID()
			r.Instances = append(r.Instances, carvev1.InstanceRecord{
				Profile: in.Profile, Placement: partition.PlacementToV1(in.Placement), GIID: in.GIID, UUID: u, Replicas: replicas[u],
				ComputeInstances: partition.ComputeInstancesToV1(in.CIs),
			})
		}
		sort.SliceStable(r.Instances, func(i, j int) bool { return r.Instances[i].Placement.Start < r.Instances[j].Placement.Start })
		out = append(out, r)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out
}

// InUseRecord describes the devices pods hold, by UUID, with the pods
// (namespace/name) that hold each; a ResourceClaim that holds a device for
// no pod is named namespace/resourceclaim/name.
func InUseRecord(u *plugin.InUse) *carvev1.InUseRecord {
	pods := map[string][]string{}
	for _, a := range u.Assignments {
		holder := a.Namespace + "/" + a.Pod
		if a.Pod == "" {
			holder = a.Namespace + "/" + a.Resource
		}
		for _, id := range a.UUIDs {
			pods[id] = append(pods[id], holder)
		}
	}
	out := &carvev1.InUseRecord{Devices: make([]carvev1.DeviceInUse, 0, len(u.UUIDs))}
	for _, id := range u.UUIDs {
		out.Devices = append(out.Devices, carvev1.DeviceInUse{UUID: id, Pods: slices.Compact(slices.Sorted(slices.Values(pods[id])))})
	}
	sort.Slice(out.Devices, func(i, j int) bool { return out.Devices[i].UUID < out.Devices[j].UUID })
	return out
}

// ApplyRecordOf describes the unfinished apply a checkpoint keeps.
func ApplyRecordOf(cp carvev1.Checkpoint) *carvev1.ApplyRecord {
	ops := 0
	for _, g := range cp.Plan.GPUs {
		ops += len(g.Ops)
	}
	return &carvev1.ApplyRecord{Profile: cp.Profile, Started: cp.Started.UTC().Format(time.RFC3339), OpsDone: cp.OpsDone(), Ops: ops}
}

// SharingFromRecords recovers sharing settings from a node record, for an
// agent that restarts while its profile file is broken and must keep
// advertising what the node had.
func SharingFromRecords(gpus []carvev1.GPURecord) map[int]timeslice.Sharing {
	out := make(map[int]timeslice.Sharing, len(gpus))
	for _, g := range gpus {
		s := timeslice.Sharing{Replicas: g.Replicas, RenameShared: g.RenameShared, FailRequestsGreaterThanOne: g.FailRequestsGreaterThanOne}
		for _, in := range g.Instances {
			if in.Replicas > 1 {
				if s.MIGReplicas == nil {
					s.MIGReplicas = map[string]int{}
				}
				s.MIGReplicas[in.Profile] = max(s.MIGReplicas[in.Profile], in.Replicas)
			}
		}
		out[g.Index] = s
	}
	return out
}

func modeWord(g partition.GPU, m partition.MIGMode) string {
	if !g.MIGCapable {
		return "unsupported"
	}
	return m.String()
}
