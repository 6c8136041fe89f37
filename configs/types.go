package configs

import (
	"encoding/json"
	"slices"
	"time"

	carvev1 "github.com/carve-dev/carve/api/v1"
)

// Version is the only value of the file's version field this package reads.
const Version = "v1"

// MaxDuration bounds the duration of windows and maintenance windows.
const MaxDuration = 168 * time.Hour

// DefaultDrainTimeout is the drain timeout when the file sets none.
const DefaultDrainTimeout = 30 * time.Minute

// Sources of a Selection: why a profile is in force.
const (
	// SourceWindow: an active window whose node selector matches.
	SourceWindow = carvev1.SourceWindow
	// SourceLabel: the node's carve.dev/profile label.
	SourceLabel = carvev1.SourceLabel
	// SourceRule: the first rule whose node selector matches.
	SourceRule = carvev1.SourceRule
	// SourceDefault: the file's defaultProfile.
	SourceDefault = carvev1.SourceDefault
	// SourceNone: nothing selects a profile; the agent leaves the GPUs
	// alone (it reports that as carvev1.SourceAdopted).
	SourceNone = "none"
)

// Sources returns every value of the source label of carve_agent_profile:
// the Source values, and carvev1.SourceAdopted for a node nothing selects
// (SourceNone stays for a profile file that was rejected).
func Sources() []string {
	return []string{SourceWindow, SourceLabel, SourceRule, SourceDefault, carvev1.SourceAdopted, SourceNone}
}

// DrainPolicy says what the agent does with pods that hold devices a change
// removes.
type DrainPolicy string

// Drain policies.
const (
	// DrainWait waits until the pods holding the devices are gone.
	DrainWait DrainPolicy = "wait"
	// DrainEvict evicts the pods holding the devices, then waits.
	DrainEvict DrainPolicy = "evict"
	// DrainFail does not touch the pods and fails the change.
	DrainFail DrainPolicy = "fail"
)

// File is a parsed profiles.yaml. Parse fills it and checks it; values built
// by hand are not checked.
type File struct {
	// Version is the format version, "v1".
	Version string
	// DefaultProfile is the profile in force when nothing else selects one;
	// "" for none.
	DefaultProfile string
	// Profiles maps a profile name to its entries.
	Profiles map[string]Profile
	// Rules choose a profile by node labels, first match wins.
	Rules []Rule
	// Windows are scheduled spans of time with their own profile.
	Windows []Window
	// Maintenance lists the spans of time when disruptive changes may run;
	// empty means any time.
	Maintenance []Recurrence
	// Drain says how pods that hold devices a change removes are handled.
	Drain Drain
	// Rollout bounds the disruptive changes across the nodes that read the
	// file; Parse sets DefaultRollout where the file gives none.
	Rollout Rollout
	// ProfileLabel is the node label that pins a profile (see Select); ""
	// means carve.dev/profile. It is not part of the file: carve-agent's
	// --profile-label sets it, e.g. to nvidia.com/mig.config for nodes
	// labelled the way NVIDIA's MIG manager reads them.
	ProfileLabel string
}

// PinLabel returns the node label that pins a profile: ProfileLabel, or
// carve.dev/profile when that is empty.
func (f *File) PinLabel() string {
	if f.ProfileLabel != "" {
		return f.ProfileLabel
	}
	return carvev1.LabelProfile
}

// Profile is the list of entries of one profile, matched in order. A GPU
// that no entry selects is a whole GPU, MIG off, not shared.
type Profile []Entry

// Entry says what to make of the GPUs it selects.
type Entry struct {
	// GPUs selects GPUs by NVML index.
	GPUs GPUSelector `json:"gpus"`
	// Model, when set, restricts the entry to GPUs whose model it matches
	// (see MatchModel).
	Model string `json:"model,omitempty"`
	// MIG maps a MIG profile name ("1g.10gb") to the number of instances.
	// nil means MIG off (whole GPU); an empty map means MIG on with no
	// instances.
	MIG map[string]int `json:"mig"`
	// TimeSlicing, when set, shares the devices of the selected GPUs.
	TimeSlicing *TimeSlicing `json:"timeSlicing,omitempty"`
	// Dynamic, when set, makes the selected GPUs dynamic (on-demand MIG):
	// MIG on with no instances of the profile's own, their MIG devices
	// offered through DRA and made for the claims that are allocated them.
	// It excludes MIG and TimeSlicing, and needs carve-agent --advertise
	// dra.
	Dynamic *Dynamic `json:"dynamic,omitempty"`
}

// Dynamic is the on-demand MIG of an entry.
type Dynamic struct {
	// Profiles are the MIG profiles offered ("1g.10gb"), in the file's
	// order and each once; nil offers every MIG profile of the GPU's model.
	Profiles []string `json:"profiles,omitempty"`
}

// GPUSelector selects GPUs by index: all of them, or a list.
type GPUSelector struct {
	// All selects every GPU of the node.
	All bool
	// Indices are the NVML indices selected when All is false.
	Indices []int
}

// Selects reports whether the selector names the GPU index.
func (s GPUSelector) Selects(index int) bool {
	return s.All || slices.Contains(s.Indices, index)
}

// MarshalJSON writes "all" or the list of indices.
func (s GPUSelector) MarshalJSON() ([]byte, error) {
	if s.All {
		return []byte(`"all"`), nil
	}
	idx := s.Indices
	if idx == nil {
		idx = []int{}
	}
	return json.Marshal(idx)
}

// TimeSlicing shares devices among several pods in turn.
type TimeSlicing struct {
	// Replicas is how many times each device is advertised.
	Replicas Replicas `json:"replicas"`
	// RenameShared advertises shared devices under "<resource>.shared"
	// (nvidia.com/gpu.shared) so that pods ask for sharing explicitly.
	RenameShared bool `json:"renameShared,omitempty"`
	// FailRequestsGreaterThanOne makes the device plugin reject a container
	// that asks for more than one shared device: two replicas of one GPU
	// would give it no more compute, only a false promise.
	FailRequestsGreaterThanOne bool `json:"failRequestsGreaterThanOne,omitempty"`
}

// Replicas is one replica count for every device of the entry, or a count
// per MIG profile.
type Replicas struct {
	// Count applies to every device (whole GPU or each MIG device) when
	// PerProfile is nil.
	Count int
	// PerProfile maps a MIG profile of the entry to its replica count; MIG
	// profiles it does not name are not shared.
	PerProfile map[string]int
}

// MarshalJSON writes the number or the map.
func (r Replicas) MarshalJSON() ([]byte, error) {
	if r.PerProfile != nil {
		return json.Marshal(r.PerProfile)
	}
	return json.Marshal(r.Count)
}

// Rule selects a profile for nodes with certain labels.
type Rule struct {
	// NodeSelector holds the labels a node must all carry, with these values.
	NodeSelector map[string]string
	// Profile is the profile the rule selects.
	Profile string
}

// Recurrence is a span of time that starts at every fire time of a cron
// schedule, read on the wall clock of a time zone, and lasts Duration of
// elapsed time.
type Recurrence struct {
	// Schedule is a five-field cron expression (minute hour day-of-month
	// month day-of-week).
	Schedule string
	// Duration is how long each occurrence lasts.
	Duration time.Duration
	// TimeZone is the IANA time zone the schedule is read in; Parse sets
	// "UTC" when the file gives none.
	TimeZone string

	// sched is the compiled schedule; Parse sets it.
	sched *cronSchedule
}

// Window is a scheduled span of time during which a profile is in force on
// the nodes it selects.
type Window struct {
	// Name names the window in labels and messages; unique in the file.
	Name string
	// Recurrence says when the window is active.
	Recurrence
	// NodeSelector holds the labels a node must carry for the window to
	// apply; nil or empty means every node.
	NodeSelector map[string]string
	// Profile is the profile in force while the window is active.
	Profile string
	// Rollout, when not nil, is the rollout for the changes the window
	// causes, in place of the file's (see File.RolloutFor).
	Rollout *Rollout
}

// Drain says how pods holding devices that a change removes are handled.
type Drain struct {
	// Policy is wait, evict or fail; Parse sets wait when the file gives
	// none.
	Policy DrainPolicy
	// Timeout bounds the wait; Parse sets DefaultDrainTimeout when the file
	// gives none.
	Timeout time.Duration
}

// Selection is the profile in force for a node and why.
type Selection struct {
	// Profile is the selected profile, "" when Source is SourceNone.
	Profile string
	// Source is one of SourceWindow, SourceLabel, SourceRule,
	// SourceDefault, SourceNone.
	Source string
	// Window is the name of the active window when Source is SourceWindow.
	Window string
	// Rule is the index of the matching rule when Source is SourceRule,
	// else -1.
	Rule int
}

// Span is a stretch of time during which one selection holds.
type Span struct {
	// Start and End bound the span: [Start, End).
	Start, End time.Time
	// Profile, Source and Window are those of the Selection.
	Profile, Source, Window string
	// Error is the selection error in force during the span (a node label
	// naming an unknown profile), "" when none.
	Error string
}

// Assignment is what a profile makes of one GPU of a node.
type Assignment struct {
	// GPU is the GPU's NVML index.
	GPU int
	// Entry is the index of the profile entry that selects the GPU, or -1
	// when none does (whole GPU, MIG off, not shared).
	Entry int
	// MIG maps MIG profile names to instance counts; nil means MIG off, an
	// empty map MIG on with no instances.
	MIG map[string]int
	// Replicas is how many times each device of the GPU (the whole GPU, or
	// each MIG device) is advertised; 1 means not shared.
	Replicas int
	// MIGReplicas gives the replicas of the MIG devices of the named
	// profiles and takes precedence over Replicas for them; nil when the
	// entry gives one number for all.
	MIGReplicas map[string]int
	// RenameShared advertises shared devices under "<resource>.shared".
	RenameShared bool
	// FailRequestsGreaterThanOne makes the plugin reject requests for more
	// than one shared device.
	FailRequestsGreaterThanOne bool
	// Dynamic is the on-demand MIG of a dynamic GPU (MIG then is an empty
	// map: MIG on, no instances of the profile's own), nil for a GPU that
	// is not dynamic. Its Profiles are the MIG profiles a claim may be
	// given on the GPU; nil means every profile of the GPU's model.
	Dynamic *Dynamic
}
