// Package sim is a simulated NVML that behaves like the hardware, for
// tests, demos and carvectl. A Machine implements partition.NVML for the
// machines of the agent's --gpus sim:<machine> flag (see Parse) and
// enforces docs/hardware.md: placements, overlaps, per-profile
// limits, one "+me" instance per GPU, compute slices, MIG mode changes that
// stay pending until a reset or reboot, and instances in use that refuse
// destruction. Errors wrap the partition sentinels.
//
// # Machines
//
// Presets: dgx-a100 (8x A100-40GB), dgx-a100-80 (8x A100-80GB), dgx-h100
// (8x H100-80GB), hgx-h200 (8x H200-141GB), a30x4 (4x A30-24GB). The list
// form names models and counts: "h100-80gb*2,a100-40gb". Besides the MIG
// catalogue it accepts l4-24gb, an NVIDIA L4 without MIG.
//
// UUIDs are stable: a GPU's derives from the machine spec and its index; a
// MIG device's from the machine, the GPU, the profile and the placement,
// so destroying and re-creating an instance, or reopening a saved state,
// gives the same UUID.
//
// Topology: the DGX/HGX presets connect all GPUs through NVSwitch (12
// NVLinks on A100, 18 on H100/H200); a30x4 bridges the pairs 0-1 and 2-3
// with 4 NVLinks; the list form has no NVLink. On PCIe, pairs share a
// switch (10), quads a NUMA node (40), the rest meet at the system (50).
//
// # Hardware behaviour
//
// SetMIGMode sets the pending mode only. A GPU reset (Device.Reset) or a
// Machine.Reboot makes it current; like on real GPUs, both also destroy
// the GPU's MIG instances. Reset fails with ErrInUse while processes hold
// the GPU or one of its MIG devices (Machine.SetProcesses, SetBusy) and
// with ErrNotSupported on GPUs marked reboot-only (Machine.SetRebootOnly);
// a destroy whose MIG device processes hold fails with ErrInUse. Refusals
// because of processes are *partition.InUseError naming the devices and
// the processes, with their PIDs and names, as the real binding's are.
//
// A reboot (Machine.Reboot, or RebootStateFile on a state file no machine
// has open) also ends every process holding a device, and keeps each GPU's
// MIG mode: a GPU in MIG mode comes back in MIG mode with no instances, as
// NVIDIA documents for Ampere GPUs and the simulator assumes for all. A GPU
// marked with Machine.SetMIGModeVolatile comes back with MIG disabled, as
// on platforms that do not keep the mode (vGPU hosts).
//
// # State file, format version 1
//
// Open keeps the MIG state in a JSON file, replaced atomically after every
// change, so an agent restart finds the instances the hardware still has.
// carvectl plan --from reads the same format (ParseState, NewFromState).
// Example:
//
//	{
//	  "version": 1,
//	  "machine": "dgx-h100",
//	  "gpus": [
//	    {
//	      "index": 0,
//	      "model": "H100-80GB",
//	      "uuid": "GPU-…",
//	      "migMode": "enabled",
//	      "pendingMIGMode": "enabled",
//	      "instances": [
//	        {
//	          "giID": 1,
//	          "profile": "3g.40gb",
//	          "profileID": 2,
//	          "placement": {"start": 4, "size": 4},
//	          "cis": [{"id": 0, "computeSlices": 3, "uuid": "MIG-…"}]
//	        }
//	      ]
//	    }
//	  ]
//	}
//
// Fields: version (must be 1); machine (the spec without "sim:"; a file
// for another machine is refused); gpus, by index, GPUs left out being in
// factory state (MIG disabled, no instances). Per GPU: model (checked when
// given); uuid (informational); migMode and pendingMIGMode ("enabled" or
// "disabled", absent for GPUs without MIG; a missing pending mode equals
// the current one); rebootOnly; migModeVolatile (MIG-capable GPUs only);
// instances with giID (>= 1), profile name and/or profileID, placement (a
// size of 0 means the profile's) and cis with id (>= 0), computeSlices (0
// means the whole GPU instance) and uuid (informational). Reading replays every instance through the geometry
// checks, so a hand-written file cannot describe an impossible layout.
// Unknown fields are errors. Processes (busy marks) and faults are not
// saved.
//
// # Test and fault API
//
// Machine.SetProcesses, SetBusy, SetRebootOnly, SetMIGModeVolatile, Reboot,
// InjectFault/ClearFaults, RaiseXID, OpLog/ResetOpLog and
// CreateComputeInstanceSlices let tests create in-use devices, VMs,
// reboots, failures, XID errors and foreign layouts, and check which
// mutating calls were made; RebootStateFile reboots the machine of a state
// file between two runs of an agent.
package sim
