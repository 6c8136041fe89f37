package sim

import (
	"fmt"
	"os"

	"github.com/carve-dev/carve/partition"
)

// Reboot reboots the machine, as a node reboot does to real GPUs:
//
//   - every GPU instance and compute instance is gone (their MIG devices
//     with them);
//   - every process holding a GPU or a MIG device is gone (SetBusy and
//     SetProcesses marks are cleared);
//   - each GPU's pending MIG mode becomes its current one, as after a GPU
//     reset;
//   - the MIG mode itself persists: a GPU in MIG mode comes back in MIG
//     mode, without instances. NVIDIA's MIG user guide ("Deployment
//     Considerations") documents this for Ampere GPUs ("similar to ECC
//     mode, MIG mode setting is persistent across reboots"); the simulator
//     assumes it for every model. A GPU marked with SetMIGModeVolatile
//     models a platform where it does not hold: it comes back with MIG
//     disabled.
//
// Reboot-only and volatile marks, injected faults, open event sets and
// Init stay as they are (the simulated process outlives the reboot). It is
// a test call, not an NVML one: it needs no Init, takes no simulated
// latency, ignores injected faults, and is recorded neither in the op log
// nor in the op journal. An opened machine writes its state file; when
// that fails the reboot is undone. RebootStateFile does the same to a
// state file that no machine has open.
func (m *Machine) Reboot() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.rebootLocked(); err != nil {
		return fmt.Errorf("reboot: %w", err)
	}
	return nil
}

// rebootLocked does to every GPU what a reboot (or a reload of the driver)
// does, and writes the state file; when that fails it is undone. m.mu is
// held.
func (m *Machine) rebootLocked() error {
	saved := make([]*gpuState, len(m.gpus))
	for i, g := range m.gpus {
		saved[i] = g.clone()
		g.reboot()
	}
	if err := m.persist(); err != nil {
		m.gpus = saved
		return fmt.Errorf("undone: %w", err)
	}
	return nil
}

// reboot does what a reboot does to one GPU.
func (g *gpuState) reboot() {
	g.applyPending()
	g.procs = nil
	if g.migVolatile && g.migCapable() {
		g.current, g.pending = partition.MIGDisabled, partition.MIGDisabled
	}
}

// SetMIGModeVolatile marks GPU gpu as one whose MIG mode does not survive
// a reboot (volatile true): Reboot leaves it with MIG disabled, current
// and pending, instead of keeping its mode. This models platforms on which
// the mode is not kept, such as vGPU hosts (NVIDIA's GPU Operator notes
// that there neither the MIG mode nor the SR-IOV functions survive a node
// reboot). A GPU reset is unaffected. A GPU without MIG fails with
// ErrNotSupported, an index out of range with ErrInvalidArgument. The
// mark is kept in the state file.
func (m *Machine) SetMIGModeVolatile(gpu int, volatile bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkGPU("set MIG mode volatile", gpu); err != nil {
		return err
	}
	g := m.gpus[gpu]
	if !g.migCapable() {
		return fmt.Errorf("GPU %d: set MIG mode volatile: %s has no MIG: %w", gpu, g.model.Product, partition.ErrNotSupported)
	}
	was := g.migVolatile
	g.migVolatile = volatile
	if err := m.persist(); err != nil {
		g.migVolatile = was
		return fmt.Errorf("GPU %d: set MIG mode volatile: change undone: %w", gpu, err)
	}
	return nil
}

// RebootStateFile reboots the simulated machine whose state file is at
// path (the file of the agent's --sim-state, Open's statePath) as Reboot
// does: it reads the file, reboots the machine it describes and replaces
// the file atomically with the result. It is meant for a test that stops
// an agent, reboots its node's simulated GPUs and starts the agent again:
// no Machine may have the file open meanwhile, or that machine's next
// change overwrites the reboot. A missing file fails (wrapping
// os.ErrNotExist), as does one that ParseState or the geometry checks
// refuse; the file is then unchanged.
func RebootStateFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reboot simulated machine: %w", err)
	}
	m, err := NewFromState(data)
	if err != nil {
		return fmt.Errorf("reboot simulated machine: state file %s: %w", path, err)
	}
	m.statePath = path
	if err := m.Reboot(); err != nil {
		return fmt.Errorf("reboot simulated machine %s: %w", m.spec.Name, err)
	}
	return nil
}
