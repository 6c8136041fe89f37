package v1

import (
	"encoding/json"
	"fmt"
	"time"
)

// XIDHealthVersion is the format version of XIDHealth.
const XIDHealthVersion = 1

// XIDHealthFile is the name of the file, in the agent's state directory,
// that holds XIDHealth.
const XIDHealthFile = "xid-health.json"

// XIDHealth is what the agent keeps in its state directory of the devices
// that critical XIDs made unhealthy, so that a restarted agent keeps them
// unhealthy: only a reset of their GPU or a reboot of the node (a new
// BootID) makes them healthy again. It is written when that set changes.
type XIDHealth struct {
	// Version is XIDHealthVersion.
	Version int `json:"version"`
	// BootID is the node's boot ID (/proc/sys/kernel/random/boot_id) when
	// the file was written; a file of another boot is stale.
	BootID string `json:"bootID"`
	// Devices are the unhealthy devices, in UUID order.
	Devices []XIDUnhealthy `json:"devices"`
}

// XIDUnhealthy is one device a critical XID made unhealthy.
type XIDUnhealthy struct {
	// UUID is the GPU's or MIG device's UUID.
	UUID string `json:"uuid"`
	// GPU is the UUID of the GPU it is on (UUID itself for a GPU).
	GPU string `json:"gpu"`
	// XID is the last critical XID on it, At when it came.
	XID uint64    `json:"xid"`
	At  time.Time `json:"at"`
}

// Encode returns the record's JSON with Version set.
func (h XIDHealth) Encode() ([]byte, error) {
	h.Version = XIDHealthVersion
	if h.Devices == nil {
		h.Devices = []XIDUnhealthy{}
	}
	b, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("encode XID health: %w", err)
	}
	return b, nil
}

// DecodeXIDHealth parses a record written by Encode; another format
// version, a field this version does not know, or anything after the
// object is an error.
func DecodeXIDHealth(data []byte) (XIDHealth, error) {
	var h XIDHealth
	if err := decodeStrict(data, &h); err != nil {
		return XIDHealth{}, fmt.Errorf("decode XID health: %w", err)
	}
	if h.Version != XIDHealthVersion {
		return XIDHealth{}, fmt.Errorf("decode XID health: format version %d, want %d", h.Version, XIDHealthVersion)
	}
	return h, nil
}
