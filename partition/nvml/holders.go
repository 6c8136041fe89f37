//go:build cgo

package nvml

import (
	"errors"
	"fmt"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/carve-dev/carve/partition"
)

// scope names the devices a refused call concerns: the whole GPU with all
// its MIG devices (a MIG mode change, a reset), or the MIG devices of GPU
// instance gi, only that of compute instance ci when ci >= 0 (a destroy).
type scope struct {
	whole  bool
	gi, ci int
}

// wholeGPU is the scope of a call on the whole GPU.
func wholeGPU() scope { return scope{whole: true, gi: -1, ci: -1} }

// inUse turns err, when it wraps partition.ErrInUse, into a
// *partition.InUseError naming the devices s concerns and the processes
// NVML lists on them, with their names; other errors come back as they
// are. A failure to list the processes is told in the InUseError's
// Unlisted, never instead of err. The caller is inside enter.
func (d *device) inUse(err error, s scope) error {
	if !errors.Is(err, partition.ErrInUse) {
		return err
	}
	devices, procs, lerr := d.holders(s)
	e := partition.NewInUseError(err, devices, procs)
	if lerr != nil {
		e.Unlisted = lerr.Error()
		return e
	}
	// Names only for the processes the error names: a bounded number of calls.
	for i := range e.Processes {
		if name, ret := d.l.lib.SystemGetProcessName(int(e.Processes[i].PID)); ret == gonvml.SUCCESS {
			e.Processes[i].Name = name
		}
	}
	return e
}

// holders lists the devices s concerns, by UUID, and the processes NVML
// lists on each (compute and graphics).
func (d *device) holders(s scope) ([]string, []partition.Process, error) {
	var devices []string
	var procs []partition.Process
	add := func(dev gonvml.Device, what string) error {
		uuid, ret := dev.GetUUID()
		if ret != gonvml.SUCCESS {
			return d.err(ret, "%s: UUID", what)
		}
		devices = append(devices, uuid)
		pids := map[uint32]struct{}{}
		if err := d.addProcesses(dev, what, pids); err != nil {
			return err
		}
		for pid := range pids {
			procs = append(procs, partition.Process{PID: pid, Device: uuid})
		}
		return nil
	}
	if s.whole {
		if err := add(d.dev, "processes"); err != nil {
			return devices, procs, err
		}
		cur, _, ret := d.dev.GetMigMode()
		switch {
		case ret == gonvml.ERROR_NOT_SUPPORTED || ret == gonvml.SUCCESS && cur != gonvml.DEVICE_MIG_ENABLE:
			return devices, procs, nil
		case ret != gonvml.SUCCESS:
			return devices, procs, d.err(ret, "processes: MIG mode")
		}
	}
	err := d.eachMIGDevice(func(i int, mig gonvml.Device) error {
		what := fmt.Sprintf("processes of MIG device %d", i)
		if !s.whole {
			gi, ret := mig.GetGpuInstanceId()
			if ret != gonvml.SUCCESS {
				return d.err(ret, "%s: GPU instance ID", what)
			}
			ci, ret := mig.GetComputeInstanceId()
			if ret != gonvml.SUCCESS {
				return d.err(ret, "%s: compute instance ID", what)
			}
			if gi != s.gi || s.ci >= 0 && ci != s.ci {
				return nil
			}
		}
		return add(mig, what)
	})
	return devices, procs, err
}
