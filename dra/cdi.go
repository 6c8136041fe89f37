package dra

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/carve-dev/carve/internal/atomicfile"
)

// CDI names of carve's claim devices: the runtime injects the device
// "gpu.carve.dev/claim=<claim UID>", defined in the spec file
// "gpu.carve.dev_claim_<claim UID>.json" of the CDI directory. A claim's UID
// is never reused, so a runtime that caches specs cannot mistake one claim's
// device for another's.
const (
	// DefaultCDIDir is the standard directory of CDI specs made at run
	// time (carve-agent --cdi-dir).
	DefaultCDIDir = "/var/run/cdi"
	// CDIKind is the vendor/class of carve's CDI devices.
	CDIKind   = DriverName + "/claim"
	cdiPrefix = DriverName + "_claim_"
	cdiSuffix = ".json"
)

// CDI writes and removes the CDI specs of prepared claims in one directory.
type CDI struct {
	// Dir is the CDI spec directory the container runtime reads.
	Dir string
}

// DeviceID is the CDI device name of a claim.
func (CDI) DeviceID(claimUID string) string { return CDIKind + "=" + claimUID }

// SpecPath is the file of a claim's spec.
func (c CDI) SpecPath(claimUID string) string {
	return filepath.Join(c.Dir, cdiPrefix+claimUID+cdiSuffix)
}

// Write writes the spec of a claim whose devices are the physical devices
// uuids: one CDI device that sets NVIDIA_VISIBLE_DEVICES to them, which the
// NVIDIA container runtime turns into device nodes and driver libraries,
// as it does for the device plugin's answers. It returns the file written.
func (c CDI) Write(claimUID string, uuids []string) (string, error) {
	visible := slices.Compact(slices.Clone(uuids))
	spec := &cdispec.Spec{
		Kind: CDIKind,
		Devices: []cdispec.Device{{
			Name:           claimUID,
			ContainerEdits: cdispec.ContainerEdits{Env: []string{"NVIDIA_VISIBLE_DEVICES=" + strings.Join(visible, ",")}},
		}},
	}
	v, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return "", fmt.Errorf("CDI spec of claim %s: %w", claimUID, err)
	}
	spec.Version = v
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return "", fmt.Errorf("CDI spec of claim %s: %w", claimUID, err)
	}
	path := c.SpecPath(claimUID)
	if err := atomicfile.Write(path, data, 0o644); err != nil {
		return "", fmt.Errorf("write CDI spec %s: %w", path, err)
	}
	return path, nil
}

// Remove removes a claim's spec; a spec already gone is not an error.
func (c CDI) Remove(claimUID string) error {
	path := c.SpecPath(claimUID)
	if err := atomicfile.Remove(path); err != nil {
		return fmt.Errorf("remove CDI spec %s: %w", path, err)
	}
	return nil
}

// Sweep removes the specs of claims that keep does not list: left by an
// agent that died between writing a spec and recording the claim, or
// between forgetting a claim and removing its spec. It returns the claim
// UIDs whose specs it removed.
func (c CDI) Sweep(keep func(claimUID string) bool) ([]string, error) {
	entries, err := os.ReadDir(c.Dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read CDI directory %s: %w", c.Dir, err)
	}
	var gone []string
	for _, e := range entries {
		uid, ok := strings.CutPrefix(e.Name(), cdiPrefix)
		if !ok || !strings.HasSuffix(uid, cdiSuffix) {
			continue
		}
		uid = strings.TrimSuffix(uid, cdiSuffix)
		if keep(uid) {
			continue
		}
		if err := c.Remove(uid); err != nil {
			return gone, err
		}
		gone = append(gone, uid)
	}
	return gone, nil
}
