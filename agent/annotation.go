package agent

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/timeslice"
)

// AnnotationPartition is the node annotation that records the partition.
const AnnotationPartition = "carve.dev/partition"

// Partition is the content of the carve.dev/partition annotation. Its JSON
// encoding (Encode) is stable: the same content gives the same bytes.
type Partition struct {
	// Profile is the profile realised, "" when none is.
	Profile string `json:"profile"`
	// ProfileHash is configs.File.ProfileHash of Profile.
	ProfileHash string `json:"profileHash"`
	// Selected is the profile in force for the node and why: the profile
	// the agent is reaching for, which differs from Profile while a change
	// is pending, draining or failed. Nil when nothing is selected (no
	// profile applies to the node, or the file was rejected).
	Selected *SelectedProfile `json:"selected,omitempty"`
	// State is the node's state, as in the carve.dev/state label.
	State string `json:"state"`
	// Generation counts the changes of the content (everything but
	// Generation and LastTransition); it starts at 1.
	Generation int64 `json:"generation"`
	// LastTransition is when the content last changed, RFC 3339 in UTC.
	LastTransition string `json:"lastTransition"`
	// LastError is the error of the last reconcile, "" when it succeeded.
	LastError string `json:"lastError,omitempty"`
	// GPUs are the node's GPUs, by index.
	GPUs []GPURecord `json:"gpus"`
}

// SelectedProfile is the profile selected for the node and why, in the
// annotation.
type SelectedProfile struct {
	// Profile is the selected profile.
	Profile string `json:"profile"`
	// Source is why it is in force: window, label, rule or default
	// (configs.SourceWindow and the others).
	Source string `json:"source"`
	// Window is the active window's name when Source is window.
	Window string `json:"window,omitempty"`
}

// SelectedFrom returns the annotation's record of a selection, nil when
// nothing is selected.
func SelectedFrom(sel configs.Selection) *SelectedProfile {
	if sel.Source == configs.SourceNone || sel.Source == "" || sel.Profile == "" {
		return nil
	}
	return &SelectedProfile{Profile: sel.Profile, Source: sel.Source, Window: sel.Window}
}

// GPURecord is one GPU in the annotation.
type GPURecord struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	Model string `json:"model"`
	// MIGMode is enabled, disabled or unsupported; PendingMIGMode is
	// omitted unless it differs.
	MIGMode        string `json:"migMode"`
	PendingMIGMode string `json:"pendingMIGMode,omitempty"`
	// Replicas is how many times the whole GPU is advertised (0 in MIG
	// mode, where the instances are advertised instead).
	Replicas int `json:"replicas,omitempty"`
	// RenameShared: shared devices are advertised as <resource>.shared.
	RenameShared bool `json:"renameShared,omitempty"`
	// FailRequestsGreaterThanOne: requests for more than one replica are
	// refused.
	FailRequestsGreaterThanOne bool `json:"failRequestsGreaterThanOne,omitempty"`
	// Instances are the MIG instances, by placement.
	Instances []InstanceRecord `json:"instances,omitempty"`
}

// InstanceRecord is one MIG instance in the annotation.
type InstanceRecord struct {
	Profile   string              `json:"profile"`
	Placement partition.Placement `json:"placement"`
	GIID      int                 `json:"giID"`
	// UUID is the MIG device UUID, "" for an incomplete instance.
	UUID string `json:"uuid,omitempty"`
	// Replicas is how many times the device is advertised (0 when it is
	// not advertised).
	Replicas int `json:"replicas,omitempty"`
}

// GPURecords describes the GPUs as they are and as advertised.
func GPURecords(gpus []partition.GPU, res timeslice.Resources, sharing map[int]timeslice.Sharing) []GPURecord {
	replicas := map[string]int{}
	for _, devs := range res {
		for _, d := range devs {
			replicas[d.UUID] = d.Replicas
		}
	}
	out := make([]GPURecord, 0, len(gpus))
	for _, g := range gpus {
		r := GPURecord{Index: g.Index, UUID: g.UUID, Model: g.Model, MIGMode: modeWord(g, g.MIGMode)}
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
			r.Instances = append(r.Instances, InstanceRecord{
				Profile: in.Profile, Placement: in.Placement, GIID: in.GIID, UUID: u, Replicas: replicas[u],
			})
		}
		sort.SliceStable(r.Instances, func(i, j int) bool { return r.Instances[i].Placement.Start < r.Instances[j].Placement.Start })
		out = append(out, r)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out
}

// SharingFromRecords recovers sharing settings from an annotation, for an
// agent that restarts while its profile file is broken and must keep
// advertising what the node had.
func SharingFromRecords(gpus []GPURecord) map[int]timeslice.Sharing {
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

// Encode returns the annotation value: compact JSON, fields in a fixed
// order, lists in index and placement order.
func (p Partition) Encode() (string, error) {
	if p.GPUs == nil {
		p.GPUs = []GPURecord{}
	}
	b, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("encode %s annotation: %w", AnnotationPartition, err)
	}
	return string(b), nil
}

// DecodePartition parses an annotation value written by Encode.
func DecodePartition(s string) (Partition, error) {
	var p Partition
	if err := json.Unmarshal([]byte(s), &p); err != nil {
		return Partition{}, fmt.Errorf("decode %s annotation: %w", AnnotationPartition, err)
	}
	return p, nil
}

// sameContent reports whether two records say the same, Generation and
// LastTransition aside.
func sameContent(a, b Partition) bool {
	a.Generation, b.Generation = 0, 0
	a.LastTransition, b.LastTransition = "", ""
	ea, err1 := a.Encode()
	eb, err2 := b.Encode()
	return err1 == nil && err2 == nil && ea == eb
}

// Next returns the record to write when the content is next and the node
// carries prev (nil when it carries none): prev itself, unchanged, when the
// content is the same; else next with the generation one more than prev's
// and LastTransition set to now.
func Next(prev *Partition, next Partition, now time.Time) Partition {
	if prev != nil && sameContent(*prev, next) {
		return *prev
	}
	next.Generation = 1
	if prev != nil {
		next.Generation = prev.Generation + 1
	}
	next.LastTransition = now.UTC().Format(time.RFC3339)
	return next
}
