package v1

import (
	"encoding/json"
	"fmt"
)

// PreparedClaimsVersion is the format version of PreparedClaims.
const PreparedClaimsVersion = 1

// PreparedClaims is the record the DRA driver keeps in the agent's state
// directory of the ResourceClaims it prepared on the node, by claim UID:
// the kubelet may ask to unprepare a claim after an agent restart, after
// the claim is gone from the API server, and a restarted agent must still
// count the claim's devices as in use.
type PreparedClaims struct {
	// Version is PreparedClaimsVersion.
	Version int `json:"version"`
	// Claims by claim UID.
	Claims map[string]PreparedClaim `json:"claims"`
	// Instances are the MIG devices the driver makes on dynamic GPUs for
	// claims, by the device's name in the node's pool. An entry is written
	// before the first operation that makes the device and removed after
	// the last that destroys it, so a restarted agent knows which
	// instances are carve's and for which claim, and finishes or undoes
	// what a crash interrupted. Absent when there are none, so that a
	// record without them stays readable by agents that predate them (one
	// with them is refused there, as a newer format is).
	Instances map[string]ClaimInstance `json:"instances,omitempty"`
}

// ClaimInstance is a MIG device made, or being made or removed, for a
// claim on a dynamic GPU.
type ClaimInstance struct {
	// Claim is the UID of the claim the device is made for.
	Claim string `json:"claim"`
	// GPU and GPUIndex name the parent GPU.
	GPU      string `json:"gpu"`
	GPUIndex int    `json:"gpuIndex"`
	// Profile and ProfileID are the GPU instance's profile, Placement where
	// it sits.
	Profile   string    `json:"profile"`
	ProfileID int       `json:"profileID"`
	Placement Placement `json:"placement"`
	// State is InstanceMaking, InstanceMade or InstanceRemoving.
	State string `json:"state"`
	// UUID is the MIG device's UUID once made.
	UUID string `json:"uuid,omitempty"`
}

// The states of a ClaimInstance.
const (
	// InstanceMaking: the operations that make the device may have run in
	// part; a restart finishes them (or undoes them when the claim is gone).
	InstanceMaking = "making"
	// InstanceMade: the device exists and is the claim's.
	InstanceMade = "made"
	// InstanceRemoving: the operations that destroy the device may have
	// run in part; a restart finishes them.
	InstanceRemoving = "removing"
)

// PreparedClaim is one prepared ResourceClaim.
type PreparedClaim struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Devices are the claim's devices on this node, in allocation order.
	Devices []PreparedDevice `json:"devices"`
	// CDISpec is the CDI spec file written for the claim.
	CDISpec string `json:"cdiSpec"`
}

// PreparedDevice is one device of a prepared claim.
type PreparedDevice struct {
	// Request is the claim's request (or subrequest, "request/sub") the
	// device was allocated for.
	Request string `json:"request"`
	// Device is the device's name in the node's pool.
	Device string `json:"device"`
	// UUID is the physical GPU or MIG device.
	UUID string `json:"uuid"`
	// ShareID tells apart the allocations of a shared device.
	ShareID string `json:"shareID,omitempty"`
	// CDIDevices are the CDI device names given to the runtime.
	CDIDevices []string `json:"cdiDevices"`
}

// Encode returns the record's JSON with Version set.
func (p PreparedClaims) Encode() ([]byte, error) {
	p.Version = PreparedClaimsVersion
	if p.Claims == nil {
		p.Claims = map[string]PreparedClaim{}
	}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode prepared claims: %w", err)
	}
	return b, nil
}

// DecodePreparedClaims parses a record written by Encode; another format
// version, an unknown field, or anything after the object is an error.
func DecodePreparedClaims(data []byte) (PreparedClaims, error) {
	var p PreparedClaims
	if err := decodeStrict(data, &p); err != nil {
		return PreparedClaims{}, fmt.Errorf("decode prepared claims: %w", err)
	}
	if p.Version != PreparedClaimsVersion {
		return PreparedClaims{}, fmt.Errorf("decode prepared claims: format version %d, want %d", p.Version, PreparedClaimsVersion)
	}
	if p.Claims == nil {
		p.Claims = map[string]PreparedClaim{}
	}
	return p, nil
}
