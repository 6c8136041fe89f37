package v1

// States of a node: the values of LabelState and NodeRecord.State.
const (
	// StateSuccess: the profile in force is realised and advertised.
	StateSuccess = "success"
	// StateAdopted: no profile selects the node; its GPUs are as the
	// agent found them, read and advertised, with no GPU change made
	// (carve.dev/profile.source is SourceAdopted).
	StateAdopted = "adopted"
	// StatePending: a disruptive change waits for a maintenance window.
	StatePending = "pending"
	// StateDraining: devices that a change removes are in use; they are
	// no longer advertised, and the change waits for them (or evicts).
	StateDraining = "draining"
	// StateApplying: NVML operations are running.
	StateApplying = "applying"
	// StateFailed: the profile file was rejected, the profile cannot be
	// realised, an apply failed or a drain timed out (LastError says).
	StateFailed = "failed"
	// StateRebootRequired: a GPU must be reset to change its MIG mode and
	// cannot be now.
	StateRebootRequired = "reboot-required"
	// StateHeld: an operator holds the node (LabelHold): the agent
	// observes only; the node record's Selected and Waiting say what it
	// would change.
	StateHeld = "held"
	// StateDriverUpgrade: the GPU driver is being replaced
	// (LabelDriverUpgrade says so), or is not loaded again yet: the agent
	// holds no GPU handle, advertises nothing and changes nothing; once
	// the driver is back it realises the profile in force again, as after
	// a reboot.
	StateDriverUpgrade = "driver-upgrade"
)

// States returns every state, in the order of the constants above: the
// values carve.dev/state and the state label of carve_agent_state take.
func States() []string {
	return []string{StateSuccess, StateAdopted, StatePending, StateDraining, StateApplying, StateFailed, StateRebootRequired, StateHeld, StateDriverUpgrade}
}

// MIG manager states: the values NVIDIA's MIG manager writes to
// LabelMIGManagerState.
const (
	MIGManagerPending   = "pending"
	MIGManagerRebooting = "rebooting"
	MIGManagerSuccess   = "success"
	MIGManagerFailed    = "failed"
)

// MIGManagerState maps a carve state to the MIG manager state that means
// the most nearly the same for automation that waits on it: success and
// failed as they are; adopted is success (nothing is on its way); pending,
// draining, applying, held and driver-upgrade are pending (a change is on
// its way); reboot-required is rebooting (the change
// continues once the node has restarted, though carve itself never
// reboots a node). Unknown states map to "".
func MIGManagerState(state string) string {
	switch state {
	case StateSuccess, StateAdopted:
		return MIGManagerSuccess
	case StateFailed:
		return MIGManagerFailed
	case StatePending, StateDraining, StateApplying, StateHeld, StateDriverUpgrade:
		return MIGManagerPending
	case StateRebootRequired:
		return MIGManagerRebooting
	}
	return ""
}

// StateRank orders the states by how much attention they need, so that
// the worst of several findings is the node's state: reboot-required >
// failed > driver-upgrade > held > draining > pending > applying > success and adopted (and
// unknown values). A hold outranks the states of a change under way, which
// it stops; a rejected file or an unrealisable profile still shows as
// failed on a held node.
func StateRank(s string) int {
	switch s {
	case StateRebootRequired:
		return 7
	case StateFailed:
		return 6
	case StateDriverUpgrade:
		return 5
	case StateHeld:
		return 4
	case StateDraining:
		return 3
	case StatePending:
		return 2
	case StateApplying:
		return 1
	}
	return 0
}
