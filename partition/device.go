package partition

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// MIGMode is a GPU's MIG mode as NVML reports it.
type MIGMode int

const (
	// MIGDisabled means the GPU is one whole device.
	MIGDisabled MIGMode = 0
	// MIGEnabled means the GPU can be split into GPU instances.
	MIGEnabled MIGMode = 1
)

// String returns "enabled" or "disabled".
func (m MIGMode) String() string {
	if m == MIGEnabled {
		return "enabled"
	}
	return "disabled"
}

// Placement is where a GPU instance sits on its GPU, counted in memory
// slices: it covers slices [Start, Start+Size).
type Placement struct {
	Start int `json:"start"`
	Size  int `json:"size"`
}

// End returns the first memory slice after the placement.
func (p Placement) End() int { return p.Start + p.Size }

// String writes the placement as "start:size", as nvidia-smi shows it.
func (p Placement) String() string { return strconv.Itoa(p.Start) + ":" + strconv.Itoa(p.Size) }

// Overlaps reports whether two placements share a memory slice.
func (p Placement) Overlaps(q Placement) bool {
	return p.Start < q.End() && q.Start < p.End()
}

// UnknownInfoID is GIProfile.InfoID and Instance.InfoID where the ID is
// not known: a catalogue model whose IDs NVIDIA does not publish, or an
// instance of a profile the device does not list.
const UnknownInfoID = -1

// GIProfile describes one GPU instance profile a device supports, as NVML's
// GPU instance profile info and possible placements report it.
type GIProfile struct {
	// ID is NVML's profile ID (nvml.GPU_INSTANCE_PROFILE_*).
	ID int `json:"id"`
	// InfoID is the ID NVML's profile info gives the profile on this
	// model: the one nvidia-smi mig -lgip lists and NVIDIA's DRA driver
	// puts in device names (19 for an H100's 1g.10gb, 14 for an A30's
	// 1g.6gb). UnknownInfoID where the catalogue does not know it.
	InfoID int `json:"infoID"`
	// Name is the MIG profile name, e.g. "1g.10gb" or "1g.10gb+me".
	Name string `json:"name"`
	// ComputeSlices is the number of compute slices (the "1g" in "1g.10gb").
	ComputeSlices int `json:"computeSlices"`
	// MemorySlices is the number of memory slices an instance covers.
	MemorySlices int `json:"memorySlices"`
	// MemoryMiB is the memory of one instance.
	MemoryMiB uint64 `json:"memoryMiB"`
	// MaxCount is the most instances of this profile one GPU may hold.
	MaxCount int `json:"maxCount"`
	// MediaExtensions marks the profiles that take the GPU's single set of
	// media extensions: "+me" and "+me.all" (all media engines). A GPU holds
	// at most one such instance in all.
	MediaExtensions bool `json:"mediaExtensions,omitempty"`
	// Engines are what one instance gets besides memory: streaming
	// multiprocessors, copy and media engines. Zero where unknown.
	Engines
	// Placements lists the valid placements, in start order.
	Placements []Placement `json:"placements"`
}

// Engines counts what a GPU instance of a profile holds besides memory, as
// NVML's GPU instance profile info reports it (multiprocessorCount,
// copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount). A
// compute instance that fills its GPU instance, as carve makes them, has
// the same figures, which is what GPU feature discovery labels per MIG
// profile (nvidia.com/mig-<profile>.multiprocessors, .engines.*).
type Engines struct {
	// Multiprocessors is the number of streaming multiprocessors (SMs).
	Multiprocessors int `json:"multiprocessors,omitempty"`
	// CopyEngines is the number of copy engines.
	CopyEngines int `json:"copyEngines,omitempty"`
	// Decoders is the number of video decoders (NVDEC).
	Decoders int `json:"decoders,omitempty"`
	// Encoders is the number of video encoders (NVENC).
	Encoders int `json:"encoders,omitempty"`
	// JPEGs is the number of JPEG decoders (NVJPG).
	JPEGs int `json:"jpegs,omitempty"`
	// OFAs is the number of optical flow accelerators.
	OFAs int `json:"ofas,omitempty"`
}

// Plus returns e with n instances of o added, field by field.
func (e Engines) Plus(o Engines, n int) Engines {
	e.Multiprocessors += n * o.Multiprocessors
	e.CopyEngines += n * o.CopyEngines
	e.Decoders += n * o.Decoders
	e.Encoders += n * o.Encoders
	e.JPEGs += n * o.JPEGs
	e.OFAs += n * o.OFAs
	return e
}

// MediaBeyond names the kinds of media engine of which e, what a set of
// instances needs, has more than total, the GPU's: e.g. "5 of 4 video
// decoders". Nil when every kind fits.
func (e Engines) MediaBeyond(total Engines) []string {
	var over []string
	for _, k := range []struct {
		need, total int
		what        string
	}{
		{e.Decoders, total.Decoders, "video decoders"},
		{e.Encoders, total.Encoders, "video encoders"},
		{e.JPEGs, total.JPEGs, "JPEG decoders"},
		{e.OFAs, total.OFAs, "optical flow accelerators"},
	} {
		if k.need > k.total {
			over = append(over, fmt.Sprintf("%d of %d %s", k.need, k.total, k.what))
		}
	}
	return over
}

// GPUInstance is an existing GPU instance on a device.
type GPUInstance struct {
	ID        int       `json:"id"`
	ProfileID int       `json:"profileID"`
	Placement Placement `json:"placement"`
}

// ComputeInstance is an existing compute instance inside a GPU instance.
type ComputeInstance struct {
	ID   int `json:"id"`
	GIID int `json:"giID"`
	// ComputeSlices is how many of the GPU instance's compute slices it
	// uses; a compute instance that fills its GPU instance uses them all.
	ComputeSlices int `json:"computeSlices"`
	// UUID is the MIG device UUID ("MIG-...") of this GI/CI pair.
	UUID string `json:"uuid"`
}

// Link says how closely two GPUs are connected.
type Link struct {
	// NVLinks is the number of NVLink lanes between the two GPUs.
	NVLinks int `json:"nvlinks"`
	// PCIe is NVML's common-ancestor level (nvml.TOPOLOGY_*): 0 internal,
	// 10 single switch, 20 multiple switches, 30 host bridge, 40 NUMA node,
	// 50 system. Lower is closer.
	PCIe int `json:"pcie"`
}

// XIDEvent is a critical error NVML reported on a device.
type XIDEvent struct {
	// UUID is the GPU's UUID.
	UUID string
	// XID is the error code.
	XID uint64
	// GIID and CIID name the MIG instance the error hit, or -1 when it hit
	// the whole GPU.
	GIID, CIID int
	// Time is when the event was seen.
	Time time.Time
}

// NVML is the part of NVML that carve uses. Implementations return errors
// that wrap the sentinel errors below, so callers can test for them with
// errors.Is whatever the implementation; a destroy, MIG mode change or
// reset refused because processes hold the device is a *InUseError
// naming them (errors.As, InUseOf).
type NVML interface {
	// Init opens the library; every other call needs it first.
	Init() error
	// Shutdown closes the library.
	Shutdown() error
	// DeviceCount returns the number of GPUs.
	DeviceCount() (int, error)
	// Device returns the GPU at an index in [0, DeviceCount).
	Device(index int) (Device, error)
	// Topology tells how closely the GPUs at two indexes are connected.
	Topology(a, b int) (Link, error)
	// WatchXIDs returns an event set that reports critical XID errors of
	// the given GPUs (by index).
	WatchXIDs(indexes []int) (EventSet, error)
}

// EventSet delivers XID events.
type EventSet interface {
	// Wait blocks until an event arrives or the timeout passes; on timeout
	// it returns an error wrapping ErrTimeout.
	Wait(timeout time.Duration) (XIDEvent, error)
	// Close frees the event set.
	Close() error
}

// Device is one physical GPU.
type Device interface {
	// Index is the GPU's NVML index.
	Index() int
	// UUID is the GPU's UUID ("GPU-...").
	UUID() (string, error)
	// Name is the product name, e.g. "NVIDIA H100 80GB HBM3".
	Name() (string, error)
	// PCIBusID is the PCI bus ID, e.g. "00000000:07:00.0".
	PCIBusID() (string, error)
	// PCIDeviceID is the PCI device and vendor ID in one number, the
	// device in the upper 16 bits: 0x233010DE for an H100 80GB HBM3
	// (NVML's pciDeviceId). It identifies the model where product names
	// vary (IdentifyModel); a device that cannot tell returns an error
	// wrapping ErrNotSupported.
	PCIDeviceID() (uint32, error)
	// MemoryMiB is the total memory.
	MemoryMiB() (uint64, error)
	// MIGMode returns the current and the pending MIG mode. A GPU without
	// MIG support returns an error wrapping ErrNotSupported.
	MIGMode() (current, pending MIGMode, err error)
	// SetMIGMode sets the pending MIG mode; it takes effect at the next
	// GPU reset or reboot.
	SetMIGMode(mode MIGMode) error
	// Reset resets the GPU, making a pending MIG mode current. It fails
	// with ErrInUse while processes hold the GPU (an *InUseError naming
	// them), and with ErrNotSupported where only a reboot will do (some
	// VMs).
	Reset() error
	// Processes returns the number of processes that hold the GPU or any
	// of its MIG devices.
	Processes() (int, error)
	// GPUInstanceProfiles lists the GPU instance profiles the GPU supports,
	// with their possible placements. Real GPUs answer in either MIG mode
	// (seen on an H100); the simulator, like older drivers, only with MIG
	// on, so callers fall back to the catalogue (see ResolveModel).
	GPUInstanceProfiles() ([]GIProfile, error)
	// GPUInstances lists the existing GPU instances.
	GPUInstances() ([]GPUInstance, error)
	// CreateGPUInstance creates a GPU instance of a profile at a placement.
	CreateGPUInstance(profileID int, at Placement) (GPUInstance, error)
	// DestroyGPUInstance destroys a GPU instance that has no compute
	// instances left.
	DestroyGPUInstance(giID int) error
	// ComputeInstances lists the compute instances of a GPU instance.
	ComputeInstances(giID int) ([]ComputeInstance, error)
	// CreateComputeInstance creates one compute instance that fills the
	// GPU instance.
	CreateComputeInstance(giID int) (ComputeInstance, error)
	// DestroyComputeInstance destroys a compute instance.
	DestroyComputeInstance(giID, ciID int) error
}

// Errors that NVML implementations wrap.
var (
	// ErrLibraryNotFound means no NVML library is installed.
	ErrLibraryNotFound = errors.New("NVML library not found")
	// ErrNotSupported means the device cannot do what was asked.
	ErrNotSupported = errors.New("not supported")
	// ErrInUse means a process holds the instance or GPU; see InUseError
	// for the processes.
	ErrInUse = errors.New("in use")
	// ErrInsufficientResources means the placement, profile limit or
	// compute slices do not allow the creation.
	ErrInsufficientResources = errors.New("insufficient resources")
	// ErrInvalidArgument means a bad profile, placement or ID.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrNotFound means no such instance.
	ErrNotFound = errors.New("not found")
	// ErrTimeout means an event wait timed out.
	ErrTimeout = errors.New("timeout")
	// ErrUninitialized means Init was not called.
	ErrUninitialized = errors.New("NVML not initialized")
	// ErrDriverNotLoaded means the GPU driver is not loaded, as while it
	// is being replaced.
	ErrDriverNotLoaded = errors.New("driver not loaded")
)
