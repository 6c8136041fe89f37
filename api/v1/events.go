package v1

// Reasons of the Events carve emits on its Node.
const (
	// ReasonConfigRejected (Warning): the profile file is invalid or
	// missing; the GPUs are left as they are.
	ReasonConfigRejected = "ConfigRejected"
	// ReasonOperandsPaused (Normal, or Warning when their pods do not
	// leave in time): GPU Operator operands that hold GPU handles were
	// paused for a disruptive change.
	ReasonOperandsPaused = "OperandsPaused"
	// ReasonOperandsRestored (Normal, or Warning when the labels could not
	// be put back; retried): the paused operands' labels have their values
	// back.
	ReasonOperandsRestored = "OperandsRestored"
	// ReasonConfigUnverified (Warning): entries of the profile file name
	// GPU models neither carve's catalogue nor this node knows; they were
	// not checked here and are checked on the nodes that have such GPUs.
	ReasonConfigUnverified = "ConfigUnverified"
	// ReasonUnrealisable (Warning): the selected profile does not fit
	// this node's GPUs; they are left as they are.
	ReasonUnrealisable = "ProfileUnrealisable"
	// ReasonRepartitioned (Normal): an apply finished.
	ReasonRepartitioned = "Repartitioned"
	// ReasonSharingChanged (Normal): a new profile or sharing setting is
	// in force without any MIG change.
	ReasonSharingChanged = "SharingChanged"
	// ReasonDraining (Normal): a change waits for devices in use.
	ReasonDraining = "Draining"
	// ReasonEvicting (Normal, or Warning when an eviction is refused):
	// pods holding devices a change removes are being evicted.
	ReasonEvicting = "Evicting"
	// ReasonEvicted (Normal): the Eviction API accepted the eviction of a
	// pod that held devices a change removes.
	ReasonEvicted = "Evicted"
	// ReasonBlocked (Warning): devices in use block a change and the
	// drain policy is fail.
	ReasonBlocked = "Blocked"
	// ReasonDrainTimeout (Warning): devices stayed in use past the drain
	// timeout; nothing was killed.
	ReasonDrainTimeout = "DrainTimeout"
	// ReasonPending (Normal): a disruptive change waits for a maintenance
	// window.
	ReasonPending = "WaitingForMaintenance"
	// ReasonRolloutQueued (Normal): a disruptive change waits for a
	// rollout slot, since as many nodes as rollout.maxUnavailable allows
	// are in one.
	ReasonRolloutQueued = "RolloutQueued"
	// ReasonRolloutHalted (Warning, on the Node that waits and on the
	// profile ConfigMap): as many nodes as rollout.maxFailures allows
	// failed on this revision of the profile file; no further node starts
	// a disruptive change until the file changes.
	ReasonRolloutHalted = "RolloutHalted"
	// ReasonRolloutFenced (Warning): the node's rollout slot could not be
	// renewed in time (API server unreachable, the agent paused, the slot
	// lost), so the disruptive change stopped at an operation boundary; it
	// goes on once the node holds its slot again.
	ReasonRolloutFenced = "RolloutFenced"
	// ReasonRebootRequired (Warning): a MIG mode change needs a GPU reset
	// that cannot happen now.
	ReasonRebootRequired = "RebootRequired"
	// ReasonApplyFailed (Warning): an NVML operation failed.
	ReasonApplyFailed = "ApplyFailed"
	// ReasonAdvertiseFailed (Warning): the device-plugin servers could not
	// be updated.
	ReasonAdvertiseFailed = "AdvertiseFailed"
	// ReasonResumingApply (Normal): the agent found the checkpoint of an
	// apply a previous run left unfinished.
	ReasonResumingApply = "ResumingApply"
	// ReasonCheckpointFailed (Warning): the checkpoint could not be
	// removed after an apply.
	ReasonCheckpointFailed = "CheckpointFailed"
	// ReasonPartitionLost (Warning): GPUs advertise nothing until the
	// profile in force is realised on them, because they lost the
	// partition the node record lists (MIG instances gone, as after a
	// reboot) or are new to the agent (a node or GPU without a record)
	// and do not hold that profile's layout yet.
	ReasonPartitionLost = "PartitionLost"
	// ReasonHeld (Normal): an operator holds the node (carve.dev/hold=true):
	// the agent observes only; the message says what it would change, or
	// that a change under way stopped at an operation boundary.
	ReasonHeld = "Held"
	// ReasonHoldLifted (Normal): the hold was removed; the agent goes on.
	ReasonHoldLifted = "HoldLifted"
	// ReasonHoldIgnored (Warning): carve.dev/hold has a value other than
	// "true", which holds nothing.
	ReasonHoldIgnored = "HoldIgnored"
	// ReasonDriverUpgrade (Normal): the GPU driver is being replaced
	// (nvidia.com/gpu-driver-upgrade-state): the agent closed its GPU
	// handles and advertises nothing until the driver is back.
	ReasonDriverUpgrade = "DriverUpgrade"
	// ReasonDriverBack (Normal): the driver is loaded again after an
	// upgrade; the agent realises the profile in force again.
	ReasonDriverBack = "DriverBack"
	// ReasonDriverNotLoaded (Warning): the driver upgrade is over by its
	// label, but the driver cannot be opened yet; the agent retries.
	ReasonDriverNotLoaded = "DriverNotLoaded"
)
