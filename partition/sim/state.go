package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/carve-dev/carve/partition"
)

// StateVersion is the version of the state file format this package writes
// and reads.
const StateVersion = 1

// State is the MIG state of a simulated machine as the state file holds it
// (format version 1, documented in the package comment). Busy marks are not
// part of it.
type State struct {
	// Version is StateVersion.
	Version int `json:"version"`
	// Machine is the machine spec the state belongs to, e.g. "dgx-h100".
	Machine string `json:"machine"`
	// GPUs holds the GPUs by index; a GPU left out is in factory state.
	GPUs []GPUState `json:"gpus"`
}

// GPUState is one GPU in a State.
type GPUState struct {
	// Index is the GPU's index.
	Index int `json:"index"`
	// Model is the model key, e.g. "H100-80GB"; optional on read, but it
	// must match the machine's GPU when given.
	Model string `json:"model,omitempty"`
	// UUID is the GPU's UUID; written for reference, ignored on read
	// (UUIDs derive from the machine spec).
	UUID string `json:"uuid,omitempty"`
	// MIGMode and PendingMIGMode are "enabled" or "disabled"; empty for
	// GPUs without MIG, and "disabled" when left out on read. A pending
	// mode left out is the current one.
	MIGMode        string `json:"migMode,omitempty"`
	PendingMIGMode string `json:"pendingMIGMode,omitempty"`
	// RebootOnly marks a GPU that only a reboot can reset.
	RebootOnly bool `json:"rebootOnly,omitempty"`
	// MIGModeVolatile marks a GPU whose MIG mode a reboot turns off
	// (Machine.SetMIGModeVolatile); only for GPUs with MIG.
	MIGModeVolatile bool `json:"migModeVolatile,omitempty"`
	// Instances are the GPU instances, in ID order.
	Instances []InstanceState `json:"instances,omitempty"`
}

// InstanceState is one GPU instance in a State.
type InstanceState struct {
	// GIID is the GPU instance ID.
	GIID int `json:"giID"`
	// Profile is the profile name ("3g.40gb"); ProfileID the NVML profile
	// ID. One of them is needed on read; when both are given they must
	// agree.
	Profile   string `json:"profile,omitempty"`
	ProfileID *int   `json:"profileID,omitempty"`
	// Placement is where the instance sits; a size of 0 on read means the
	// profile's.
	Placement partition.Placement `json:"placement"`
	// CIs are the compute instances, in ID order.
	CIs []CIState `json:"cis,omitempty"`
}

// CIState is one compute instance in a State.
type CIState struct {
	// ID is the compute instance ID.
	ID int `json:"id"`
	// ComputeSlices is its size; 0 on read means the whole GPU instance.
	ComputeSlices int `json:"computeSlices,omitempty"`
	// UUID is the MIG device UUID; written for reference, ignored on read.
	UUID string `json:"uuid,omitempty"`
}

// Snapshot returns the machine's current MIG state.
func (m *Machine) Snapshot() State {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.snapshot()
}

// snapshot builds the State; the caller holds m.mu.
func (m *Machine) snapshot() State {
	st := State{Version: StateVersion, Machine: m.spec.Name, GPUs: make([]GPUState, len(m.gpus))}
	for i, g := range m.gpus {
		gs := GPUState{Index: i, Model: g.model.Key, UUID: g.uuid, RebootOnly: g.rebootOnly, MIGModeVolatile: g.migVolatile}
		if g.migCapable() {
			gs.MIGMode, gs.PendingMIGMode = g.current.String(), g.pending.String()
		}
		for _, gi := range g.sortedGIs() {
			id := gi.profile.ID
			in := InstanceState{GIID: gi.id, Profile: gi.profile.Name, ProfileID: &id, Placement: gi.placement}
			for _, ci := range gi.sortedCIs() {
				in.CIs = append(in.CIs, CIState{ID: ci.id, ComputeSlices: ci.slices, UUID: ci.uuid})
			}
			gs.Instances = append(gs.Instances, in)
		}
		st.GPUs[i] = gs
	}
	return st
}

// Marshal encodes the state as the state file holds it: indented JSON with
// a trailing newline.
func (s State) Marshal() ([]byte, error) {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode simulator state: %w", err)
	}
	return append(data, '\n'), nil
}

// ParseState decodes a state file and checks its version; unknown fields
// are rejected. It does not check the geometry; LoadState and Open do.
func ParseState(data []byte) (State, error) {
	var st State
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return State{}, fmt.Errorf("decode simulator state: %w", err)
	}
	// Only white space may follow the object. (dec.More would let a stray
	// "}" or "]" through: it reports the end of an enclosing object or
	// array, not of the input.)
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return State{}, fmt.Errorf("decode simulator state: data after the JSON object: %w", partition.ErrInvalidArgument)
	}
	if st.Version != StateVersion {
		return State{}, fmt.Errorf("simulator state version %d, want %d: %w", st.Version, StateVersion, partition.ErrNotSupported)
	}
	if st.Machine == "" {
		return State{}, fmt.Errorf("simulator state names no machine: %w", partition.ErrInvalidArgument)
	}
	return st, nil
}

// Save writes the machine's state to path atomically (temporary file,
// fsync, rename, fsync of the directory).
func (m *Machine) Save(path string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.saveTo(path)
}

// saveTo writes the state to path; the caller holds m.mu.
func (m *Machine) saveTo(path string) error {
	data, err := m.snapshot().Marshal()
	if err != nil {
		return err
	}
	return writeAtomic(path, data)
}

// persist writes the state file of an opened machine; the caller holds
// m.mu.
func (m *Machine) persist() error {
	if m.statePath == "" {
		return nil
	}
	return m.saveTo(m.statePath)
}

// writeAtomic replaces path with data so that a crash at any point leaves
// either the old or the new content.
func writeAtomic(path string, data []byte) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("write simulator state %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("write simulator state %s: %w", path, err)
	}
	if err := f.Chmod(0o644); err != nil {
		_ = f.Close()
		return fmt.Errorf("write simulator state %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("write simulator state %s: sync: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write simulator state %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write simulator state %s: %w", path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("write simulator state %s: open directory: %w", path, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write simulator state %s: sync directory: %w", path, err)
	}
	return nil
}

// LoadState replaces the machine's MIG state with a state file's content
// (see ParseState). The state must be for the same machine spec and obey
// the MIG geometry; on error the machine is unchanged. Busy marks are
// cleared. An opened machine writes the new state to its file.
func (m *Machine) LoadState(data []byte) error {
	st, err := ParseState(data)
	if err != nil {
		return err
	}
	gpus, err := m.spec.restore(st)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	saved := m.gpus
	m.gpus = gpus
	if err := m.persist(); err != nil {
		m.gpus = saved
		return fmt.Errorf("load simulator state: undone: %w", err)
	}
	return nil
}

// NewFromState returns an in-memory machine for the spec a state file
// names, in that state; carvectl plan --from uses it.
func NewFromState(data []byte) (*Machine, error) {
	st, err := ParseState(data)
	if err != nil {
		return nil, err
	}
	s, err := Parse(st.Machine)
	if err != nil {
		return nil, fmt.Errorf("simulator state: %w", err)
	}
	gpus, err := s.restore(st)
	if err != nil {
		return nil, err
	}
	m := newMachine(s)
	m.gpus = gpus
	return m, nil
}

// restore rebuilds the GPUs of a state made for this spec, replaying every
// instance through the same checks NVML calls pass.
func (s Spec) restore(st State) ([]*gpuState, error) {
	other, err := Parse(st.Machine)
	if err != nil {
		return nil, fmt.Errorf("simulator state: %w", err)
	}
	if other.Name != s.Name {
		return nil, fmt.Errorf("simulator state was made for machine %q, not %q: %w", other.Name, s.Name, partition.ErrInvalidArgument)
	}
	gpus := freshGPUs(s)
	seen := map[int]bool{}
	for _, gs := range st.GPUs {
		if gs.Index < 0 || gs.Index >= len(gpus) {
			return nil, fmt.Errorf("simulator state: GPU %d: machine %s has %d GPUs: %w", gs.Index, s.Name, len(gpus), partition.ErrInvalidArgument)
		}
		if seen[gs.Index] {
			return nil, fmt.Errorf("simulator state: GPU %d listed twice: %w", gs.Index, partition.ErrInvalidArgument)
		}
		seen[gs.Index] = true
		if err := restoreGPU(s, gpus[gs.Index], gs); err != nil {
			return nil, fmt.Errorf("simulator state: %w", err)
		}
	}
	return gpus, nil
}

// restoreGPU applies one GPUState to a GPU in factory state.
func restoreGPU(s Spec, g *gpuState, gs GPUState) error {
	if gs.Model != "" && !strings.EqualFold(gs.Model, g.model.Key) {
		return fmt.Errorf("GPU %d: model %s, the machine has %s: %w", g.index, gs.Model, g.model.Key, partition.ErrInvalidArgument)
	}
	g.rebootOnly = gs.RebootOnly
	g.migVolatile = gs.MIGModeVolatile
	if !g.migCapable() {
		if isEnabled(gs.MIGMode) || isEnabled(gs.PendingMIGMode) || len(gs.Instances) > 0 || gs.MIGModeVolatile {
			return fmt.Errorf("GPU %d: %s has no MIG: %w", g.index, g.model.Product, partition.ErrNotSupported)
		}
		return nil
	}
	cur, err := parseMode(gs.MIGMode, partition.MIGDisabled)
	if err != nil {
		return fmt.Errorf("GPU %d: MIG mode: %w", g.index, err)
	}
	pending, err := parseMode(gs.PendingMIGMode, cur)
	if err != nil {
		return fmt.Errorf("GPU %d: pending MIG mode: %w", g.index, err)
	}
	g.current, g.pending = cur, pending
	for _, in := range gs.Instances {
		p, err := instanceProfile(g, in)
		if err != nil {
			return err
		}
		at := in.Placement
		if at.Size == 0 {
			at.Size = p.MemorySlices
		}
		if in.GIID < 1 {
			return fmt.Errorf("GPU %d: GPU instance ID %d: IDs start at 1: %w", g.index, in.GIID, partition.ErrInvalidArgument)
		}
		if _, err := g.createGI(p.ID, at, in.GIID); err != nil {
			return err
		}
		for _, ci := range in.CIs {
			if ci.ID < 0 {
				return fmt.Errorf("GPU %d: GPU instance %d: compute instance ID %d: %w", g.index, in.GIID, ci.ID, partition.ErrInvalidArgument)
			}
			if _, err := g.createCI(s, in.GIID, ci.ComputeSlices, ci.ID); err != nil {
				return err
			}
		}
	}
	if pending == partition.MIGDisabled && len(g.gis) > 0 {
		return fmt.Errorf("GPU %d: MIG pending disabled while GPU instances exist: %w", g.index, partition.ErrInvalidArgument)
	}
	return nil
}

// instanceProfile finds the profile an InstanceState names.
func instanceProfile(g *gpuState, in InstanceState) (partition.GIProfile, error) {
	var p partition.GIProfile
	var ok bool
	switch {
	case in.Profile != "":
		if p, ok = g.model.Profile(in.Profile); !ok {
			return p, fmt.Errorf("GPU %d: GPU instance %d: %s has no profile %q (valid: %s): %w", g.index, in.GIID, g.model.Key, in.Profile, strings.Join(g.model.ProfileNames(), ", "), partition.ErrInvalidArgument)
		}
		if in.ProfileID != nil && *in.ProfileID != p.ID {
			return p, fmt.Errorf("GPU %d: GPU instance %d: profile %s has ID %d, not %d: %w", g.index, in.GIID, p.Name, p.ID, *in.ProfileID, partition.ErrInvalidArgument)
		}
	case in.ProfileID != nil:
		if p, ok = g.model.ProfileByID(*in.ProfileID); !ok {
			return p, fmt.Errorf("GPU %d: GPU instance %d: %s has no profile ID %d: %w", g.index, in.GIID, g.model.Key, *in.ProfileID, partition.ErrInvalidArgument)
		}
	default:
		return p, fmt.Errorf("GPU %d: GPU instance %d: no profile given: %w", g.index, in.GIID, partition.ErrInvalidArgument)
	}
	return p, nil
}

// isEnabled reports whether a mode string says enabled.
func isEnabled(s string) bool { return strings.EqualFold(strings.TrimSpace(s), "enabled") }

// parseMode reads "enabled" or "disabled"; empty gives def.
func parseMode(s string, def partition.MIGMode) (partition.MIGMode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "":
		return def, nil
	case "enabled":
		return partition.MIGEnabled, nil
	case "disabled":
		return partition.MIGDisabled, nil
	}
	return 0, fmt.Errorf("%q is neither enabled nor disabled: %w", s, partition.ErrInvalidArgument)
}
