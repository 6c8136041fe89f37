package v1

// The plan types below are the public form of a MIG plan: what `carvectl
// plan -o json` prints (PlanDocument) and what the apply checkpoint keeps
// (Checkpoint). They mirror the planner's types in package partition field
// for field, with the same JSON encoding, but are this package's own, so
// that a change to the planner's Go types cannot change a persisted or
// public format by accident. Package partition converts between the two
// (partition.NodePlanToV1, partition.NodePlanFromV1).

// OpKind names an operation of a plan. The values are stable.
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

// InstanceStatus says how a planned instance comes about.
type InstanceStatus string

// The values of InstanceStatus.
const (
	// StatusKept is an existing, complete instance left untouched.
	StatusKept InstanceStatus = "kept"
	// StatusRepair is an existing GPU instance that is kept but whose
	// compute instances are re-made to one that fills it.
	StatusRepair InstanceStatus = "repair"
	// StatusNew is an instance the plan creates.
	StatusNew InstanceStatus = "new"
)

// Placement is where a GPU instance sits on its GPU, counted in memory
// slices: it covers slices [Start, Start+Size).
type Placement struct {
	Start int `json:"start"`
	Size  int `json:"size"`
}

// Target is what one GPU should become.
type Target struct {
	// MIG lists the MIG instances wanted (profile name -> count). null
	// means MIG disabled: the GPU is one whole device. An object, even an
	// empty one, means MIG enabled with exactly those instances.
	MIG map[string]int `json:"mig"`
}

// Op is one NVML operation on a GPU. Fields that do not apply are -1 (IDs)
// or empty.
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

// GPUPlan is what to do to one GPU; docs/plan-schema.md describes it.
type GPUPlan struct {
	// Index and UUID identify the GPU.
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
	// change its MIG mode.
	NeedsReset bool `json:"needsReset"`
}

// NodePlan holds the plans of a node's GPUs, in index order.
type NodePlan struct {
	// GPUs holds one plan per GPU, by index.
	GPUs []GPUPlan `json:"gpus"`
}
