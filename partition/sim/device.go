package sim

import (
	"fmt"

	"github.com/carve-dev/carve/partition"
)

// device is a handle to one simulated GPU; its state lives in the Machine.
type device struct {
	m     *Machine
	index int
}

var _ partition.Device = (*device)(nil)

// read runs a read-only call on the device with the machine locked, after
// the Init and fault checks.
func (d *device) read(call string, fn func(g *gpuState) error) error {
	d.m.mu.Lock()
	defer d.m.mu.Unlock()
	if err := d.m.ready(call, d.index); err != nil {
		return err
	}
	return fn(d.m.gpus[d.index])
}

// write runs a mutating NVML call on the device; see Machine.mutation.
func (d *device) write(call, args string, fn func(g *gpuState) (string, error)) error {
	d.m.mu.Lock()
	defer d.m.mu.Unlock()
	return d.m.mutation(d.index, true, call, args, fn)
}

// Index returns the GPU's index.
func (d *device) Index() int { return d.index }

// UUID returns the GPU's stable UUID.
func (d *device) UUID() (string, error) {
	var s string
	err := d.read("UUID", func(g *gpuState) error { s = g.uuid; return nil })
	return s, err
}

// Name returns the product name.
func (d *device) Name() (string, error) {
	var s string
	err := d.read("Name", func(g *gpuState) error { s = g.model.Product; return nil })
	return s, err
}

// PCIBusID returns the PCI bus ID.
func (d *device) PCIBusID() (string, error) {
	var s string
	err := d.read("PCIBusID", func(g *gpuState) error { s = g.busID; return nil })
	return s, err
}

// PCIDeviceID returns the model's first PCI device ID; a model that lists
// none fails with ErrNotSupported.
func (d *device) PCIDeviceID() (uint32, error) {
	var id uint32
	err := d.read("PCIDeviceID", func(g *gpuState) error {
		if len(g.model.PCIDeviceIDs) == 0 {
			return fmt.Errorf("GPU %d: PCI device ID: %s lists none: %w", g.index, g.model.Key, partition.ErrNotSupported)
		}
		id = g.model.PCIDeviceIDs[0]
		return nil
	})
	return id, err
}

// MemoryMiB returns the total memory.
func (d *device) MemoryMiB() (uint64, error) {
	var n uint64
	err := d.read("MemoryMiB", func(g *gpuState) error { n = g.model.MemoryMiB; return nil })
	return n, err
}

// MIGMode returns the current and pending MIG modes.
func (d *device) MIGMode() (current, pending partition.MIGMode, err error) {
	err = d.read("MIGMode", func(g *gpuState) error {
		if !g.migCapable() {
			return fmt.Errorf("GPU %d: MIG mode: %s has no MIG: %w", g.index, g.model.Product, partition.ErrNotSupported)
		}
		current, pending = g.current, g.pending
		return nil
	})
	return current, pending, err
}

// SetMIGMode sets the pending MIG mode. Disabling MIG while GPU instances
// exist fails with ErrInUse.
func (d *device) SetMIGMode(mode partition.MIGMode) error {
	args := mode.String()
	if mode != partition.MIGEnabled && mode != partition.MIGDisabled {
		args = fmt.Sprintf("mode %d", int(mode))
	}
	return d.write("SetMIGMode", args, func(g *gpuState) (string, error) {
		what := fmt.Sprintf("GPU %d: set MIG mode %s", g.index, mode)
		if !g.migCapable() {
			return "", fmt.Errorf("%s: %s has no MIG: %w", what, g.model.Product, partition.ErrNotSupported)
		}
		if mode != partition.MIGEnabled && mode != partition.MIGDisabled {
			return "", fmt.Errorf("GPU %d: set MIG mode %d: %w", g.index, int(mode), partition.ErrInvalidArgument)
		}
		if mode == partition.MIGDisabled && len(g.gis) > 0 {
			return "", fmt.Errorf("%s: %d GPU instances exist: %w", what, len(g.gis), partition.ErrInUse)
		}
		g.pending = mode
		return fmt.Sprintf("current %s, pending %s", g.current, g.pending), nil
	})
}

// Reset resets the GPU: the pending MIG mode becomes current and the MIG
// instances are gone. It fails with ErrInUse while processes hold the GPU
// or its MIG devices (a *partition.InUseError naming them), and with
// ErrNotSupported on reboot-only GPUs.
func (d *device) Reset() error {
	return d.write("Reset", "", func(g *gpuState) (string, error) {
		if g.rebootOnly {
			return "", fmt.Errorf("GPU %d: reset: this platform needs a reboot: %w", g.index, partition.ErrNotSupported)
		}
		if n := g.processes(); n > 0 {
			devices, procs := g.holders()
			return "", inUse(fmt.Errorf("GPU %d: reset: %d processes hold the GPU: %w", g.index, n, partition.ErrInUse), devices, procs)
		}
		g.applyPending()
		if !g.migCapable() {
			return "", nil
		}
		return fmt.Sprintf("MIG %s", g.current), nil
	})
}

// Processes returns the number of processes holding the GPU or its MIG
// devices (see Machine.SetProcesses and SetBusy).
func (d *device) Processes() (int, error) {
	var n int
	err := d.read("Processes", func(g *gpuState) error { n = g.processes(); return nil })
	return n, err
}

// GPUInstanceProfiles lists the model's GPU instance profiles with their
// placements; it needs MIG mode.
func (d *device) GPUInstanceProfiles() ([]partition.GIProfile, error) {
	var ps []partition.GIProfile
	err := d.read("GPUInstanceProfiles", func(g *gpuState) error {
		if err := g.needMIG("GPU instance profiles"); err != nil {
			return err
		}
		ps = cloneProfiles(g.model.Profiles)
		return nil
	})
	return ps, err
}

// GPUInstances lists the GPU instances in ID order; it needs MIG mode.
func (d *device) GPUInstances() ([]partition.GPUInstance, error) {
	var out []partition.GPUInstance
	err := d.read("GPUInstances", func(g *gpuState) error {
		if err := g.needMIG("GPU instances"); err != nil {
			return err
		}
		for _, gi := range g.sortedGIs() {
			out = append(out, gi.public())
		}
		return nil
	})
	return out, err
}

// CreateGPUInstance creates a GPU instance of a profile at a placement. An
// unknown profile or a placement the profile does not have fail with
// ErrInvalidArgument; an overlap, a profile at its maximum count, a second
// "+me" instance, too few compute slices or media engines (a "+me.all"
// instance takes them all) with ErrInsufficientResources.
// The new instance gets the lowest free ID from 1.
func (d *device) CreateGPUInstance(profileID int, at partition.Placement) (partition.GPUInstance, error) {
	var out partition.GPUInstance
	args := fmt.Sprintf("profile %d at %s", profileID, at.String())
	if p, ok := d.m.spec.GPUs[d.index].ProfileByID(profileID); ok {
		args = fmt.Sprintf("%s (profile %d) at %s", p.Name, profileID, at.String())
	}
	err := d.write("CreateGPUInstance", args, func(g *gpuState) (string, error) {
		gi, err := g.createGI(profileID, at, -1)
		if err != nil {
			return "", err
		}
		out = gi.public()
		return fmt.Sprintf("gi %d (%s)", gi.id, gi.profile.Name), nil
	})
	return out, err
}

// DestroyGPUInstance destroys a GPU instance. An unknown ID fails with
// ErrNotFound; a GPU instance that still has compute instances, or whose
// MIG device a process holds, fails with ErrInUse.
func (d *device) DestroyGPUInstance(giID int) error {
	return d.write("DestroyGPUInstance", fmt.Sprintf("gi %d", giID), func(g *gpuState) (string, error) {
		gi, err := g.lookupGI("destroy GPU instance", giID)
		if err != nil {
			return "", err
		}
		what := fmt.Sprintf("GPU %d: destroy GPU instance %d (%s at %s)", g.index, giID, gi.profile.Name, gi.placement.String())
		if devices, procs := gi.holders(); len(procs) > 0 {
			return "", inUse(fmt.Errorf("%s: a process holds its MIG device: %w", what, partition.ErrInUse), devices, procs)
		}
		if len(gi.cis) > 0 {
			return "", fmt.Errorf("%s: it still has %d compute instance(s): %w", what, len(gi.cis), partition.ErrInUse)
		}
		delete(g.gis, giID)
		return "", nil
	})
}

// ComputeInstances lists the compute instances of a GPU instance in ID
// order; an unknown GPU instance fails with ErrNotFound.
func (d *device) ComputeInstances(giID int) ([]partition.ComputeInstance, error) {
	var out []partition.ComputeInstance
	err := d.read("ComputeInstances", func(g *gpuState) error {
		gi, err := g.lookupGI("compute instances", giID)
		if err != nil {
			return err
		}
		for _, ci := range gi.sortedCIs() {
			out = append(out, ci.public(giID))
		}
		return nil
	})
	return out, err
}

// CreateComputeInstance creates one compute instance filling the GPU
// instance, with the lowest free ID from 0; its UUID is the MIG device's.
// A GPU instance that already has a compute instance fails with
// ErrInsufficientResources.
func (d *device) CreateComputeInstance(giID int) (partition.ComputeInstance, error) {
	var out partition.ComputeInstance
	err := d.write("CreateComputeInstance", fmt.Sprintf("gi %d", giID), func(g *gpuState) (string, error) {
		ci, err := g.createCI(d.m.spec, giID, 0, -1)
		if err != nil {
			return "", err
		}
		out = ci.public(giID)
		return fmt.Sprintf("ci %d %s", ci.id, ci.uuid), nil
	})
	return out, err
}

// DestroyComputeInstance destroys a compute instance. Unknown IDs fail with
// ErrNotFound, a compute instance whose MIG device a process holds with
// ErrInUse.
func (d *device) DestroyComputeInstance(giID, ciID int) error {
	return d.write("DestroyComputeInstance", fmt.Sprintf("gi %d ci %d", giID, ciID), func(g *gpuState) (string, error) {
		what := fmt.Sprintf("destroy compute instance %d of GPU instance %d", ciID, giID)
		gi, err := g.lookupGI(what, giID)
		if err != nil {
			return "", err
		}
		ci := gi.cis[ciID]
		if ci == nil {
			return "", fmt.Errorf("GPU %d: %s: no such compute instance: %w", g.index, what, partition.ErrNotFound)
		}
		if len(ci.procs) > 0 {
			return "", inUse(fmt.Errorf("GPU %d: %s: a process holds MIG device %s: %w", g.index, what, ci.uuid, partition.ErrInUse),
				[]string{ci.uuid}, onDevice(ci.uuid, ci.procs))
		}
		delete(gi.cis, ciID)
		return "", nil
	})
}
