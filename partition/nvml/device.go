//go:build cgo

package nvml

import (
	"errors"
	"fmt"
	"strings"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/carve-dev/carve/partition"
)

// device implements partition.Device over a go-nvml device handle. The
// handle belongs to the NVML session (gen) it was got in; once that ended,
// every call fails with partition.ErrUninitialized.
type device struct {
	l     *library
	gen   uint64
	index int
	dev   gonvml.Device
}

// enter starts one call on the device; what names it in errors.
func (d *device) enter(what string) (func(), error) {
	return d.l.enter(d.gen, fmt.Sprintf("GPU %d: %s", d.index, what))
}

// err wraps a failed NVML call on the device.
func (d *device) err(ret gonvml.Return, format string, args ...any) error {
	return returnError(ret, "GPU %d: %s", d.index, fmt.Sprintf(format, args...))
}

// Index is the GPU's NVML index.
func (d *device) Index() int { return d.index }

// deviceGet runs one NVML getter on the device, inside enter/release.
func deviceGet[T any](d *device, what string, get func() (T, gonvml.Return)) (T, error) {
	var zero T
	release, err := d.enter(what)
	if err != nil {
		return zero, err
	}
	defer release()
	v, ret := get()
	if ret != gonvml.SUCCESS {
		return zero, d.err(ret, "%s", what)
	}
	return v, nil
}

// UUID returns the GPU's UUID.
func (d *device) UUID() (string, error) { return deviceGet(d, "UUID", d.dev.GetUUID) }

// Name returns the product name.
func (d *device) Name() (string, error) { return deviceGet(d, "name", d.dev.GetName) }

// PCIBusID returns the PCI bus ID, e.g. "00000000:07:00.0".
func (d *device) PCIBusID() (string, error) {
	release, err := d.enter("PCI bus ID")
	if err != nil {
		return "", err
	}
	defer release()
	id, err := pciBusID(d.dev)
	if err != nil {
		return "", fmt.Errorf("GPU %d: %w", d.index, err)
	}
	return id, nil
}

// PCIDeviceID returns the PCI device and vendor ID, e.g. 0x233010DE. A
// driver that reports none (0) fails with partition.ErrNotSupported.
func (d *device) PCIDeviceID() (uint32, error) {
	pci, err := deviceGet(d, "PCI info", d.dev.GetPciInfo)
	if err != nil {
		return 0, err
	}
	if pci.PciDeviceId == 0 {
		return 0, fmt.Errorf("GPU %d: PCI device ID: NVML reports none: %w", d.index, partition.ErrNotSupported)
	}
	return pci.PciDeviceId, nil
}

// MemoryMiB returns the total memory.
func (d *device) MemoryMiB() (uint64, error) {
	release, err := d.enter("memory")
	if err != nil {
		return 0, err
	}
	defer release()
	mem, ret := d.dev.GetMemoryInfo()
	if ret != gonvml.SUCCESS {
		return 0, d.err(ret, "memory")
	}
	return mem.Total >> 20, nil
}

// MIGMode returns the current and pending MIG mode.
func (d *device) MIGMode() (current, pending partition.MIGMode, err error) {
	release, err := d.enter("MIG mode")
	if err != nil {
		return 0, 0, err
	}
	defer release()
	cur, pend, ret := d.dev.GetMigMode()
	if ret != gonvml.SUCCESS {
		return 0, 0, d.err(ret, "MIG mode")
	}
	return migMode(cur), migMode(pend), nil
}

// migMode turns go-nvml's DEVICE_MIG_* value into a partition.MIGMode.
func migMode(m int) partition.MIGMode {
	if m == gonvml.DEVICE_MIG_ENABLE {
		return partition.MIGEnabled
	}
	return partition.MIGDisabled
}

// SetMIGMode sets the pending MIG mode. NVML's activation status, which
// says whether a reset is still needed, is not an error: the pending mode
// is what this call sets. A change refused because the GPU is in use
// fails with a *partition.InUseError naming the processes on the GPU and
// its MIG devices.
func (d *device) SetMIGMode(mode partition.MIGMode) error {
	what := fmt.Sprintf("set MIG mode %s", mode)
	if mode != partition.MIGEnabled && mode != partition.MIGDisabled {
		return fmt.Errorf("GPU %d: set MIG mode %d: %w", d.index, int(mode), partition.ErrInvalidArgument)
	}
	release, err := d.enter(what)
	if err != nil {
		return err
	}
	defer release()
	nvmlMode := gonvml.DEVICE_MIG_DISABLE
	if mode == partition.MIGEnabled {
		nvmlMode = gonvml.DEVICE_MIG_ENABLE
	}
	// go-nvml returns the activation status first and the call's result second.
	if _, ret := d.dev.SetMigMode(nvmlMode); ret != gonvml.SUCCESS {
		return d.inUse(d.err(ret, "%s", what), wholeGPU())
	}
	return nil
}

// Reset resets the GPU with `nvidia-smi --gpu-reset` (NVML has no reset
// call); see resetGPU, WithCommandRunner and WithResetTimeout. A reset
// refused because the GPU is in use fails with a *partition.InUseError
// naming the processes on the GPU and its MIG devices.
func (d *device) Reset() error {
	busID, err := d.PCIBusID()
	if err != nil {
		return fmt.Errorf("GPU %d: reset: %w", d.index, err)
	}
	err = resetGPU(d.l.opts, d.index, busID)
	if !errors.Is(err, partition.ErrInUse) {
		return err
	}
	release, eerr := d.enter("reset: processes")
	if eerr != nil {
		return err
	}
	defer release()
	return d.inUse(err, wholeGPU())
}

// Processes counts the distinct processes on the GPU and, in MIG mode, on
// its MIG devices.
func (d *device) Processes() (int, error) {
	release, err := d.enter("processes")
	if err != nil {
		return 0, err
	}
	defer release()
	pids := map[uint32]struct{}{}
	if err := d.addProcesses(d.dev, "processes", pids); err != nil {
		return 0, err
	}
	cur, _, ret := d.dev.GetMigMode()
	switch {
	case ret == gonvml.ERROR_NOT_SUPPORTED:
		return len(pids), nil
	case ret != gonvml.SUCCESS:
		return 0, d.err(ret, "processes: MIG mode")
	case cur != gonvml.DEVICE_MIG_ENABLE:
		return len(pids), nil
	}
	err = d.eachMIGDevice(func(i int, mig gonvml.Device) error {
		return d.addProcesses(mig, fmt.Sprintf("processes of MIG device %d", i), pids)
	})
	if err != nil {
		return 0, err
	}
	return len(pids), nil
}

// addProcesses adds the PIDs of dev's compute and graphics processes to
// pids; a list the device does not support is skipped.
func (d *device) addProcesses(dev gonvml.Device, what string, pids map[uint32]struct{}) error {
	for _, list := range []struct {
		kind string
		get  func() ([]gonvml.ProcessInfo, gonvml.Return)
	}{
		{"compute", dev.GetComputeRunningProcesses},
		{"graphics", dev.GetGraphicsRunningProcesses},
	} {
		ps, ret := list.get()
		switch ret {
		case gonvml.SUCCESS:
		case gonvml.ERROR_NOT_SUPPORTED:
			continue
		default:
			return d.err(ret, "%s: %s", what, list.kind)
		}
		for _, p := range ps {
			pids[p.Pid] = struct{}{}
		}
	}
	return nil
}

// eachMIGDevice calls fn for every MIG device handle of the GPU.
func (d *device) eachMIGDevice(fn func(i int, mig gonvml.Device) error) error {
	n, ret := d.dev.GetMaxMigDeviceCount()
	if ret != gonvml.SUCCESS {
		return d.err(ret, "count MIG devices")
	}
	for i := range n {
		mig, ret := d.dev.GetMigDeviceHandleByIndex(i)
		switch ret {
		case gonvml.SUCCESS:
		case gonvml.ERROR_NOT_FOUND, gonvml.ERROR_INVALID_ARGUMENT:
			continue // an empty slot
		default:
			return d.err(ret, "MIG device %d", i)
		}
		if err := fn(i, mig); err != nil {
			return err
		}
	}
	return nil
}

var _ partition.Device = (*device)(nil)

// pciBusID reads a device's PCI bus ID.
func pciBusID(dev gonvml.Device) (string, error) {
	pci, ret := dev.GetPciInfo()
	if ret != gonvml.SUCCESS {
		return "", returnError(ret, "PCI info")
	}
	return busIDOf(pci), nil
}

// busIDOf returns NVML's bus ID string, falling back to the legacy
// one and then to the numeric fields.
func busIDOf(pci gonvml.PciInfo) string {
	if id := cString(pci.BusId[:]); id != "" {
		return id
	}
	if id := cString(pci.BusIdLegacy[:]); id != "" {
		return id
	}
	return fmt.Sprintf("%08x:%02x:%02x.0", pci.Domain, pci.Bus, pci.Device)
}

// sameBusID compares PCI bus IDs, ignoring case and the width of the
// domain ("00000000:07:00.0" is "0000:07:00.0").
func sameBusID(a, b string) bool {
	norm := func(s string) string {
		s = strings.ToLower(strings.TrimSpace(s))
		if dom, rest, ok := strings.Cut(s, ":"); ok && strings.Count(s, ":") == 2 {
			dom = strings.TrimLeft(dom, "0")
			return dom + ":" + rest
		}
		return s
	}
	return a != "" && norm(a) == norm(b)
}

// cString converts a NUL-terminated C char array.
func cString(b []int8) string {
	var sb strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}
