package partition

import (
	"errors"
	"fmt"
	"sort"
)

// GPU is a snapshot of one physical GPU and its MIG partition.
type GPU struct {
	Index     int    `json:"index"`
	UUID      string `json:"uuid"`
	Product   string `json:"product"`
	Model     string `json:"model"`
	MemoryMiB uint64 `json:"memoryMiB"`
	PCIBusID  string `json:"pciBusID,omitempty"`
	// MIGCapable is false for GPUs without MIG; their modes are disabled.
	MIGCapable bool `json:"migCapable"`
	// MIGMode is the mode in force; PendingMIGMode the one after a reset.
	MIGMode        MIGMode `json:"migMode"`
	PendingMIGMode MIGMode `json:"pendingMIGMode"`
	// Instances are the GPU instances, in placement order.
	Instances []Instance `json:"instances,omitempty"`
}

// Instance is one GPU instance with its compute instances.
type Instance struct {
	GIID      int `json:"giID"`
	ProfileID int `json:"profileID"`
	// InfoID is its profile's GIProfile.InfoID.
	InfoID    int       `json:"infoID"`
	Profile   string    `json:"profile"`
	Placement Placement `json:"placement"`
	// ComputeSlices is the GPU instance's compute slices.
	ComputeSlices int `json:"computeSlices"`
	// MemoryMiB is the GPU instance's memory.
	MemoryMiB uint64 `json:"memoryMiB"`
	// Engines are its profile's multiprocessors and engines (zero where
	// the profile is unknown).
	Engines
	// CIs are its compute instances.
	CIs []ComputeInstance `json:"cis,omitempty"`
}

// Complete reports whether the instance is in carve's shape: exactly one
// compute instance that fills the GPU instance. Only complete instances are
// advertised as MIG devices.
func (in Instance) Complete() bool {
	return len(in.CIs) == 1 && in.CIs[0].ComputeSlices == in.ComputeSlices
}

// UUID returns the MIG device UUID of a complete instance, else "".
func (in Instance) UUID() string {
	if !in.Complete() {
		return ""
	}
	return in.CIs[0].UUID
}

// ReadInventory takes a snapshot of every GPU behind lib. Profiles of GPUs
// in MIG mode are named from what the device reports, so models missing
// from the catalogue still work.
func ReadInventory(lib NVML) ([]GPU, error) {
	n, err := lib.DeviceCount()
	if err != nil {
		return nil, fmt.Errorf("count GPUs: %w", err)
	}
	gpus := make([]GPU, 0, n)
	for i := range n {
		d, err := lib.Device(i)
		if err != nil {
			return nil, fmt.Errorf("GPU %d: %w", i, err)
		}
		g, err := ReadGPU(d)
		if err != nil {
			return nil, err
		}
		gpus = append(gpus, g)
	}
	return gpus, nil
}

// ReadGPU takes a snapshot of one GPU.
func ReadGPU(d Device) (GPU, error) {
	g := GPU{Index: d.Index()}
	var err error
	wrap := func(what string, err error) error { return fmt.Errorf("GPU %d: %s: %w", g.Index, what, err) }
	if g.UUID, err = d.UUID(); err != nil {
		return g, wrap("UUID", err)
	}
	if g.Product, err = d.Name(); err != nil {
		return g, wrap("name", err)
	}
	if g.MemoryMiB, err = d.MemoryMiB(); err != nil {
		return g, wrap("memory", err)
	}
	if g.PCIBusID, err = d.PCIBusID(); err != nil {
		return g, wrap("PCI bus ID", err)
	}
	pciID, err := devicePCIID(d)
	if err != nil {
		return g, err
	}
	g.Model = IdentifyModelKey(g.Product, g.MemoryMiB, pciID)
	cur, pending, err := d.MIGMode()
	switch {
	case errors.Is(err, ErrNotSupported):
		return g, nil
	case err != nil:
		return g, wrap("MIG mode", err)
	}
	g.MIGCapable, g.MIGMode, g.PendingMIGMode = true, cur, pending
	if cur != MIGEnabled {
		return g, nil
	}
	model, err := ModelFromDevice(d)
	if err != nil {
		return g, err
	}
	gis, err := d.GPUInstances()
	if err != nil {
		return g, wrap("GPU instances", err)
	}
	for _, gi := range gis {
		in := Instance{GIID: gi.ID, ProfileID: gi.ProfileID, InfoID: UnknownInfoID, Placement: gi.Placement, Profile: fmt.Sprintf("profile-%d", gi.ProfileID)}
		if p, ok := model.ProfileByID(gi.ProfileID); ok {
			in.Profile, in.InfoID, in.ComputeSlices, in.MemoryMiB, in.Engines = p.Name, p.InfoID, p.ComputeSlices, p.MemoryMiB, p.Engines
		}
		if in.CIs, err = d.ComputeInstances(gi.ID); err != nil {
			return g, wrap(fmt.Sprintf("compute instances of GPU instance %d", gi.ID), err)
		}
		g.Instances = append(g.Instances, in)
	}
	sort.Slice(g.Instances, func(i, j int) bool { return g.Instances[i].Placement.Start < g.Instances[j].Placement.Start })
	return g, nil
}
