package sim

import (
	"fmt"

	"github.com/carve-dev/carve/partition"
)

// UnloadDriver unloads the simulated GPU driver, as a driver upgrade does
// before it loads the new one. Like the kernel refusing to remove a module
// in use, it fails, with an error wrapping partition.ErrInUse, while the
// library is initialised (an Init without its Shutdown) or an XID event
// set is open: some process still holds the driver. The refusal is
// counted (RefusedUnloads). Once unloaded, Init fails with an error
// wrapping partition.ErrDriverNotLoaded until LoadDriver. Unloading an
// unloaded driver does nothing. It is a test call, not an NVML one, like
// Reboot.
func (m *Machine) UnloadDriver() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.unloaded {
		return nil
	}
	if m.inits > 0 || len(m.watchers) > 0 {
		m.refusedUnloads++
		return fmt.Errorf("unload the driver: %d NVML initialisation(s) and %d XID event set(s) still open: %w",
			m.inits, len(m.watchers), partition.ErrInUse)
	}
	m.unloaded = true
	return nil
}

// LoadDriver loads the simulated driver again after UnloadDriver. The GPUs
// come back as after a reboot (see Reboot): no MIG instance is left, no
// process holds a GPU, pending MIG modes are current. Loading a loaded
// driver does nothing. An opened machine writes its state file; when that
// fails the load is undone.
func (m *Machine) LoadDriver() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.unloaded {
		return nil
	}
	if err := m.rebootLocked(); err != nil {
		return fmt.Errorf("load the driver: %w", err)
	}
	m.unloaded = false
	return nil
}

// DriverLoaded reports whether the simulated driver is loaded (it is
// unless UnloadDriver unloaded it).
func (m *Machine) DriverLoaded() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.unloaded
}

// RefusedUnloads is the number of UnloadDriver calls refused because the
// driver was held.
func (m *Machine) RefusedUnloads() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.refusedUnloads
}
