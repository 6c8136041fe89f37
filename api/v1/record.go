package v1

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// NodeRecord is what carve records of a node in the AnnotationRecord
// annotation: the profile realised, the one selected, the state, the last
// error, the GPUs with their MIG instances and replicas, and the label keys
// carve wrote. Its JSON encoding (Encode) is stable: the same content gives
// the same bytes.
type NodeRecord struct {
	// Profile is the profile realised, "" when none is.
	Profile string `json:"profile"`
	// ProfileHash is a hash of Profile's definition (configs.File's
	// ProfileHash): it changes when the profile is edited.
	ProfileHash string `json:"profileHash"`
	// Selected is the profile in force for the node and why: the profile
	// the agent is reaching for, which differs from Profile while a change
	// is pending, draining or failed. Nil when nothing is selected (no
	// profile applies to the node, or the file was rejected).
	Selected *SelectedProfile `json:"selected,omitempty"`
	// State is the node's state, as in LabelState.
	State string `json:"state"`
	// Generation counts the changes of the content (everything but
	// Generation and LastTransition); it starts at 1.
	Generation int64 `json:"generation"`
	// LastTransition is when the content last changed, RFC 3339 in UTC.
	LastTransition string `json:"lastTransition"`
	// ConfigMap is the profile ConfigMap the node's agent reads,
	// "namespace/name". The rollout counts the nodes whose records name
	// its ConfigMap when a percentage maxUnavailable needs the fleet's
	// size, so a node counts from its agent's first record until its Node
	// is deleted or its record names another file, without writing
	// anything while it is at rest.
	ConfigMap string `json:"configMap,omitempty"`
	// AgentVersion is the version of the carve-agent that wrote the record
	// (carve-agent --version), so that a fleet in the middle of an upgrade
	// shows both.
	AgentVersion string `json:"agentVersion,omitempty"`
	// LastError is the error of the last reconcile, "" when it succeeded.
	LastError string `json:"lastError,omitempty"`
	// Waiting says what a pending node waits for (a maintenance window, a
	// rollout slot), "" when it waits for nothing; on a held node
	// (StateHeld), the hold and the change the agent would make without
	// it.
	Waiting string `json:"waiting,omitempty"`
	// Change is set while the node is mid-change: from before its first
	// disruptive step (withdrawing devices, a destroy, a MIG mode change,
	// a reset, an eviction) until its new devices are advertised, so that
	// the outside view is never behind the GPUs. The rollout counts such a
	// node as unavailable: its slot is not taken over while Change is set,
	// even when its agent stops renewing it. Nil when no change is under
	// way.
	Change *ChangeRecord `json:"change,omitempty"`
	// GPUs are the node's GPUs, by index.
	GPUs []GPURecord `json:"gpus"`
	// InUse is the devices pods hold, as the kubelet last told the agent,
	// so that a plan can be previewed away from the node (carvectl plan
	// --node). It changes only when a pod that holds a device starts or
	// ends. Nil in a record an older agent wrote.
	InUse *InUseRecord `json:"inUse,omitempty"`
	// Applying is set while an apply is unfinished (its checkpoint is in
	// the agent's state directory): interrupted, failed part-way, or
	// stopped by a hold or the rollout's fence. Nil otherwise.
	Applying *ApplyRecord `json:"applying,omitempty"`
	// Labels are the keys of the node labels carve wrote, sorted. carve
	// removes a label outside its own carve.dev/ domain only when it is
	// listed here, so that labels another component wrote (GPU feature
	// discovery's nvidia.com/* keys) are never touched.
	Labels []string `json:"labels,omitempty"`
}

// SelectedProfile is the profile selected for the node and why.
type SelectedProfile struct {
	// Profile is the selected profile.
	Profile string `json:"profile"`
	// Source is why it is in force: window, label, rule or default.
	Source string `json:"source"`
	// Window is the active window's name when Source is window.
	Window string `json:"window,omitempty"`
	// PinLabel is the node label that pins a profile on this node when it
	// is not LabelProfile (carve-agent --profile-label), so that readers
	// of the record know which label to show as the pin.
	PinLabel string `json:"pinLabel,omitempty"`
}

// ChangeRecord is a disruptive change in progress on the node.
type ChangeRecord struct {
	// Since is when the change began (just before its first disruptive
	// step), RFC 3339 in UTC.
	Since string `json:"since"`
	// Profile is the profile the change realises.
	Profile string `json:"profile"`
	// Slot is the rollout slot (a Lease in the profile ConfigMap's
	// namespace) the node holds for the change, "" when none bounds it.
	Slot string `json:"slot,omitempty"`
}

// InUseRecord is the devices pods hold on the node.
type InUseRecord struct {
	// Devices are the GPU and MIG device UUIDs some container holds, by
	// UUID; empty when none is held.
	Devices []DeviceInUse `json:"devices"`
}

// DeviceInUse is one device pods hold.
type DeviceInUse struct {
	// UUID is the GPU ("GPU-...") or MIG device ("MIG-...") UUID.
	UUID string `json:"uuid"`
	// Pods are the pods that hold it, namespace/name, sorted; a
	// ResourceClaim that holds it for no pod reads
	// namespace/resourceclaim/name.
	Pods []string `json:"pods,omitempty"`
}

// Holds reports whether the record lists uuid as held.
func (r *InUseRecord) Holds(uuid string) bool {
	if r == nil {
		return false
	}
	_, found := slices.BinarySearchFunc(r.Devices, uuid, func(d DeviceInUse, u string) int { return strings.Compare(d.UUID, u) })
	return found
}

// ApplyRecord is an unfinished apply, from the agent's checkpoint.
type ApplyRecord struct {
	// Profile is the profile the apply realises.
	Profile string `json:"profile"`
	// Started is when the apply began, RFC 3339 in UTC.
	Started string `json:"started"`
	// OpsDone and Ops count the operations done and planned.
	OpsDone int `json:"opsDone"`
	Ops     int `json:"ops"`
}

// MidChange reports whether the record says the node is mid-change.
func (r NodeRecord) MidChange() bool { return r.Change != nil }

// GPURecord is one GPU in the NodeRecord.
type GPURecord struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	Model string `json:"model"`
	// Product is the name the GPU reports ("NVIDIA H100 80GB HBM3") and
	// MemoryMiB its memory; both empty in a record an older agent wrote.
	Product   string `json:"product,omitempty"`
	MemoryMiB uint64 `json:"memoryMiB,omitempty"`
	// MIGMode is enabled, disabled or unsupported (the GPU cannot do
	// MIG); PendingMIGMode is omitted unless it differs.
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
	// Dynamic is set on a GPU the profile in force makes dynamic: its MIG
	// devices are made on demand for DRA claims, and its instances are
	// those made for claims (each with its Claim). Nil on other GPUs, and
	// in a record an older agent wrote.
	Dynamic *DynamicRecord `json:"dynamic,omitempty"`
	// NotAdvertised says why none of the GPU's devices is advertised
	// (NotAdvertisedLost, NotAdvertisedNew, NotAdvertisedDriverUpgrade),
	// "" while the GPU is
	// advertised as usual. Such a GPU waits for the profile in force to be
	// realised on it; an agent that starts and finds this set keeps the
	// GPU unadvertised until then.
	NotAdvertised string `json:"notAdvertised,omitempty"`
}

// DynamicRecord is how a dynamic GPU is offered to claims.
type DynamicRecord struct {
	// Profiles are the MIG profiles claims may be given on the GPU: those
	// the profile entry lists, or every profile of the GPU's model.
	Profiles []string `json:"profiles"`
	// Offered is true while the GPU's devices are published for claims;
	// false while the GPU changes to dynamic (its other instances
	// destroyed, MIG mode turned on) or its devices are withheld.
	Offered bool `json:"offered,omitempty"`
}

// Values of GPURecord.NotAdvertised.
const (
	// NotAdvertisedLost: MIG instances the GPU held are gone, as after a
	// reboot.
	NotAdvertisedLost = "partition lost"
	// NotAdvertisedNew: no node record listed the GPU (a new node, or a
	// replaced GPU) and it does not hold the profile in force's layout.
	NotAdvertisedNew = "not yet partitioned"
	// NotAdvertisedDriverUpgrade: the driver is being replaced
	// (LabelDriverUpgrade); a reload loses the MIG instances as a reboot
	// does, so an agent that starts and finds it treats the GPU as
	// NotAdvertisedLost.
	NotAdvertisedDriverUpgrade = "driver upgrade"
)

// InstanceRecord is one MIG instance in the NodeRecord.
type InstanceRecord struct {
	Profile   string    `json:"profile"`
	Placement Placement `json:"placement"`
	GIID      int       `json:"giID"`
	// UUID is the MIG device UUID, "" for an incomplete instance.
	UUID string `json:"uuid,omitempty"`
	// Replicas is how many times the device is advertised (0 when it is
	// not advertised).
	Replicas int `json:"replicas,omitempty"`
	// ComputeInstances are the GPU instance's compute instances, by ID:
	// one that fills it for a complete instance, none or others for an
	// incomplete one. A record an older agent wrote has none, and its GPUs
	// no MemoryMiB.
	ComputeInstances []ComputeInstanceRecord `json:"computeInstances,omitempty"`
	// Claim is set on an instance carve made for a DRA claim: the claim
	// it belongs to. Nil on other instances.
	Claim *ClaimRecord `json:"claim,omitempty"`
}

// ClaimRecord is the ResourceClaim a MIG instance was made for.
type ClaimRecord struct {
	// UID is the claim's UID.
	UID string `json:"uid"`
	// Namespace and Name are the claim's, empty until its prepare has
	// finished (and after the claim is gone, until the instance is
	// destroyed).
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	// State is InstanceMaking, InstanceMade or InstanceRemoving.
	State string `json:"state"`
}

// String is the claim as "namespace/name", or "claim UID" while its name
// is not known.
func (c ClaimRecord) String() string {
	if c.Name == "" {
		return "claim " + c.UID
	}
	return c.Namespace + "/" + c.Name
}

// ComputeInstanceRecord is one compute instance of a MIG instance.
type ComputeInstanceRecord struct {
	ID int `json:"id"`
	// ComputeSlices is how many of the GPU instance's compute slices it
	// has.
	ComputeSlices int `json:"computeSlices"`
	// UUID is its MIG device UUID.
	UUID string `json:"uuid,omitempty"`
}

// Encode returns the annotation value: compact JSON, fields in a fixed
// order, lists in index, placement and key order.
func (r NodeRecord) Encode() (string, error) {
	if r.GPUs == nil {
		r.GPUs = []GPURecord{}
	}
	b, err := json.Marshal(r)
	if err != nil {
		return "", fmt.Errorf("encode %s annotation: %w", AnnotationRecord, err)
	}
	return string(b), nil
}

// ReadsConfigMap reports whether the record in a Node's annotations names
// the profile ConfigMap file ("namespace/name") as the one its agent
// reads: the node is one of that file's rollout. A missing or unreadable
// record names none.
func ReadsConfigMap(annotations map[string]string, file string) bool {
	raw, ok := annotations[AnnotationRecord]
	if !ok {
		return false
	}
	rec, err := DecodeNodeRecord(raw)
	return err == nil && rec.ConfigMap == file
}

// DecodeNodeRecord parses an annotation value written by Encode. Fields it
// does not know are ignored, not refused: during a rolling upgrade agents
// and carvectl of two versions read each other's records.
func DecodeNodeRecord(s string) (NodeRecord, error) {
	var r NodeRecord
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return NodeRecord{}, fmt.Errorf("decode %s annotation: %w", AnnotationRecord, err)
	}
	return r, nil
}

// SameContent reports whether two records say the same, Generation and
// LastTransition aside.
func (r NodeRecord) SameContent(o NodeRecord) bool {
	r.Generation, o.Generation = 0, 0
	r.LastTransition, o.LastTransition = "", ""
	a, err1 := r.Encode()
	b, err2 := o.Encode()
	return err1 == nil && err2 == nil && a == b
}

// Next returns the record to write when the content is next and the node
// carries prev (nil when it carries none): prev itself, unchanged, when the
// content is the same; else next with the generation one more than prev's
// and LastTransition set to now.
func Next(prev *NodeRecord, next NodeRecord, now time.Time) NodeRecord {
	if prev != nil && prev.SameContent(next) {
		return *prev
	}
	next.Generation = 1
	if prev != nil {
		next.Generation = prev.Generation + 1
	}
	next.LastTransition = now.UTC().Format(time.RFC3339)
	return next
}

// Wrote reports whether the record lists key among the labels carve
// wrote.
func (r NodeRecord) Wrote(key string) bool {
	_, found := slices.BinarySearch(r.Labels, key)
	return found
}

// Owns reports whether carve owns the label key of a node whose record is
// rec (nil when the node carries none): one of carve's own carve.dev/
// labels (LabelApplied, LabelSource, LabelWindow, LabelState), or a key the
// record lists as written by carve. carve removes owned labels only, so a
// label another component wrote, GPU feature discovery's nvidia.com/* keys
// among them, is never removed.
func Owns(rec *NodeRecord, key string) bool {
	switch key {
	case LabelApplied, LabelSource, LabelWindow, LabelState:
		return true
	}
	return rec != nil && rec.Wrote(key)
}

// MayWrite reports whether carve may write the label key at all: a key in
// its carve.dev/ domain other than LabelProfile and LabelHold, which an
// operator sets, or a GPU key in the nvidia.com/ domain other than
// LabelMIGManagerConfig, which an operator sets too, and
// LabelDriverUpgrade, which the GPU Operator's upgrade controller sets.
func MayWrite(key string) bool {
	if key == LabelProfile || key == LabelHold || key == LabelMIGManagerConfig || key == LabelDriverUpgrade {
		return false
	}
	return strings.HasPrefix(key, CarvePrefix) || strings.HasPrefix(key, vendorPrefix)
}
