package sim

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/carve-dev/carve/partition"
)

// Fault makes NVML calls fail, for testing error paths. Install one with
// Machine.InjectFault.
type Fault struct {
	// Call is the name of the NVML method to fail, e.g. "CreateGPUInstance",
	// "Reset", "DeviceCount", "Init" or "Wait" (EventSet.Wait).
	Call string
	// GPU is the GPU index the fault hits, or -1 for every GPU. Calls that
	// concern no GPU (Init, Shutdown, DeviceCount) are hit only by faults
	// with GPU -1; Topology by faults on either GPU; WatchXIDs and Wait by
	// faults on any watched GPU.
	GPU int
	// Err is the error the call returns, wrapped with context; usually one
	// of the partition sentinels.
	Err error
	// Times is how many calls fail before the fault goes away; 0 keeps it
	// until ClearFaults.
	Times int
}

// faultCalls are the calls a Fault may name.
func faultCalls() []string {
	return []string{
		"Init", "Shutdown", "DeviceCount", "Device", "Topology", "WatchXIDs", "Wait",
		"UUID", "Name", "PCIBusID", "MemoryMiB", "MIGMode", "SetMIGMode", "Reset", "Processes",
		"GPUInstanceProfiles", "GPUInstances", "CreateGPUInstance", "DestroyGPUInstance",
		"ComputeInstances", "CreateComputeInstance", "DestroyComputeInstance",
	}
}

// InjectFault installs a fault; faults apply in the order installed. It
// fails with ErrInvalidArgument for an unknown call name, a nil Err, a GPU
// index out of range or a negative Times.
func (m *Machine) InjectFault(f Fault) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case !slices.Contains(faultCalls(), f.Call):
		return fmt.Errorf("inject fault: unknown call %q (want one of %s): %w", f.Call, strings.Join(faultCalls(), ", "), partition.ErrInvalidArgument)
	case f.Err == nil:
		return fmt.Errorf("inject fault on %s: no error given: %w", f.Call, partition.ErrInvalidArgument)
	case f.GPU < -1 || f.GPU >= len(m.gpus):
		return fmt.Errorf("inject fault on %s: GPU %d: machine has %d GPUs: %w", f.Call, f.GPU, len(m.gpus), partition.ErrInvalidArgument)
	case f.Times < 0:
		return fmt.Errorf("inject fault on %s: negative times %d: %w", f.Call, f.Times, partition.ErrInvalidArgument)
	}
	m.faults = append(m.faults, &f)
	return nil
}

// ClearFaults removes every injected fault.
func (m *Machine) ClearFaults() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.faults = nil
}

// fault returns the error of the first fault that hits call on one of the
// gpus (none for a call that concerns no GPU), consuming one of its Times;
// the caller holds m.mu.
func (m *Machine) fault(call string, gpus ...int) error {
	for i, f := range m.faults {
		if f.Call != call || !hits(f.GPU, gpus) {
			continue
		}
		if f.Times > 0 {
			f.Times--
			if f.Times == 0 {
				m.faults = slices.Delete(m.faults, i, i+1)
			}
		}
		if len(gpus) == 1 && gpus[0] >= 0 {
			return fmt.Errorf("GPU %d: %s: injected fault: %w", gpus[0], call, f.Err)
		}
		return fmt.Errorf("%s: injected fault: %w", call, f.Err)
	}
	return nil
}

// hits reports whether a fault on GPU fgpu hits a call on gpus.
func hits(fgpu int, gpus []int) bool {
	if fgpu == -1 {
		return true
	}
	return slices.Contains(gpus, fgpu)
}

// Op is one mutating NVML call recorded in the op log: SetMIGMode, Reset,
// CreateGPUInstance, DestroyGPUInstance, CreateComputeInstance or
// DestroyComputeInstance, failed or not.
type Op struct {
	// GPU is the GPU index.
	GPU int
	// Call is the method name.
	Call string
	// Args describes the arguments, e.g. "3g.40gb (profile 2) at 4:4".
	Args string
	// Result describes what the call made, e.g. "gi 1 (3g.40gb)"; empty
	// when it failed.
	Result string
	// Err is the error the call returned.
	Err error
}

// String writes the op on one line, e.g.
// "GPU 0 CreateGPUInstance(3g.40gb (profile 2) at 4:4) = gi 1 (3g.40gb)".
func (o Op) String() string {
	s := fmt.Sprintf("GPU %d %s(%s)", o.GPU, o.Call, o.Args)
	switch {
	case o.Err != nil:
		s += " failed: " + o.Err.Error()
	case o.Result != "":
		s += " = " + o.Result
	}
	return s
}

// OpLog returns the mutating calls made since the machine was made or the
// log was last reset, oldest first. An empty log proves the GPUs were not
// touched.
func (m *Machine) OpLog() []Op {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.ops)
}

// SetOpJournal makes the machine also write every op it logs to w, one
// line each (Op.String), as it happens; nil stops it. A journal outlives
// the process that made the ops, which OpLog does not: a crash test gives
// every run of an agent one file and reads what all of them did to the
// GPUs (test/e2e/crash_test.go).
func (m *Machine) SetOpJournal(w io.Writer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.journal = w
}

// ResetOpLog empties the op log.
func (m *Machine) ResetOpLog() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ops = nil
}
