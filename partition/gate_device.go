package partition

import "fmt"

// gatedDevice is a GPU handed out by a Gate: every call goes through the
// Gate, and a handle from before a Reacquire is fetched again by index.
type gatedDevice struct {
	g     *Gate
	index int
	gen   int // the Gate's generation inner comes from
	inner Device
}

// deviceCall runs f on the device's current handle, through the Gate.
func deviceCall[T any](d *gatedDevice, call string, f func(Device) (T, error)) (T, error) {
	var zero T
	if err := d.g.enter(call); err != nil {
		return zero, fmt.Errorf("GPU %d: %w", d.index, err)
	}
	defer d.g.mu.RUnlock()
	dev, err := d.current()
	if err != nil {
		return zero, err
	}
	return f(dev)
}

// current returns the handle of this generation of the Gate, fetching it
// again after a Reacquire. It runs with the read lock held; a stale
// handle is replaced in a fresh value, never in d, so concurrent callers
// never race on d's fields.
func (d *gatedDevice) current() (Device, error) {
	if d.gen == d.g.gen {
		return d.inner, nil
	}
	dev, err := d.g.lib.Device(d.index)
	if err != nil {
		return nil, fmt.Errorf("GPU %d again after the driver came back: %w", d.index, err)
	}
	return dev, nil
}

// do runs f, which returns only an error, through the Gate.
func (d *gatedDevice) do(call string, f func(Device) error) error {
	_, err := deviceCall(d, call, func(dev Device) (struct{}, error) { return struct{}{}, f(dev) })
	return err
}

func (d *gatedDevice) Index() int { return d.index }

func (d *gatedDevice) UUID() (string, error) {
	return deviceCall(d, "UUID", Device.UUID)
}

func (d *gatedDevice) Name() (string, error) {
	return deviceCall(d, "Name", Device.Name)
}

func (d *gatedDevice) PCIBusID() (string, error) {
	return deviceCall(d, "PCIBusID", Device.PCIBusID)
}

func (d *gatedDevice) PCIDeviceID() (uint32, error) {
	return deviceCall(d, "PCIDeviceID", Device.PCIDeviceID)
}

func (d *gatedDevice) MemoryMiB() (uint64, error) {
	return deviceCall(d, "MemoryMiB", Device.MemoryMiB)
}

func (d *gatedDevice) MIGMode() (current, pending MIGMode, err error) {
	modes, err := deviceCall(d, "MIGMode", func(dev Device) ([2]MIGMode, error) {
		c, p, err := dev.MIGMode()
		return [2]MIGMode{c, p}, err
	})
	return modes[0], modes[1], err
}

func (d *gatedDevice) SetMIGMode(mode MIGMode) error {
	return d.do("SetMIGMode", func(dev Device) error { return dev.SetMIGMode(mode) })
}

func (d *gatedDevice) Reset() error {
	return d.do("Reset", Device.Reset)
}

func (d *gatedDevice) Processes() (int, error) {
	return deviceCall(d, "Processes", Device.Processes)
}

func (d *gatedDevice) GPUInstanceProfiles() ([]GIProfile, error) {
	return deviceCall(d, "GPUInstanceProfiles", Device.GPUInstanceProfiles)
}

func (d *gatedDevice) GPUInstances() ([]GPUInstance, error) {
	return deviceCall(d, "GPUInstances", Device.GPUInstances)
}

func (d *gatedDevice) CreateGPUInstance(profileID int, at Placement) (GPUInstance, error) {
	return deviceCall(d, "CreateGPUInstance", func(dev Device) (GPUInstance, error) { return dev.CreateGPUInstance(profileID, at) })
}

func (d *gatedDevice) DestroyGPUInstance(giID int) error {
	return d.do("DestroyGPUInstance", func(dev Device) error { return dev.DestroyGPUInstance(giID) })
}

func (d *gatedDevice) ComputeInstances(giID int) ([]ComputeInstance, error) {
	return deviceCall(d, "ComputeInstances", func(dev Device) ([]ComputeInstance, error) { return dev.ComputeInstances(giID) })
}

func (d *gatedDevice) CreateComputeInstance(giID int) (ComputeInstance, error) {
	return deviceCall(d, "CreateComputeInstance", func(dev Device) (ComputeInstance, error) { return dev.CreateComputeInstance(giID) })
}

func (d *gatedDevice) DestroyComputeInstance(giID, ciID int) error {
	return d.do("DestroyComputeInstance", func(dev Device) error { return dev.DestroyComputeInstance(giID, ciID) })
}
