package partition

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// ErrBlocked means a plan cannot run because devices it would disturb are
// in use (GPUPlan.Blocked).
var ErrBlocked = errors.New("plan blocked by devices in use")

// ErrStateChanged means the GPU no longer matches the snapshot a plan was
// made from (an instance moved, vanished or changed); plan again.
var ErrStateChanged = errors.New("GPU state changed since planning")

// OpError is the error of one op of a plan: which GPU, which op, and what
// the device said. Errors from Applier.Apply are *OpError (use errors.As)
// and unwrap to the device's error, so errors.Is(err, ErrInUse) works.
type OpError struct {
	// GPU is the GPU's index.
	GPU int
	// Step is the op's number, 1-based, of Total.
	Step, Total int
	// Op is the op that failed, or that was about to run when the context
	// ended or the AfterOp hook failed.
	Op Op
	// Err is the cause.
	Err error
}

// Error reads like "GPU 2: op 3/7 create-gi 3g.40gb at 4:4: <cause>".
func (e *OpError) Error() string {
	return fmt.Sprintf("GPU %d: op %d/%d %s: %v", e.GPU, e.Step, e.Total, e.Op, e.Err)
}

// Unwrap returns the cause.
func (e *OpError) Unwrap() error { return e.Err }

// RebootRequired reports whether err is a failed GPU reset that only a
// reboot (or, for ErrInUse, the processes leaving the GPU) will get past:
// a reset-gpu op that failed with ErrInUse or ErrNotSupported.
func RebootRequired(err error) bool {
	var oe *OpError
	if !errors.As(err, &oe) || oe.Op.Kind != OpResetGPU {
		return false
	}
	return errors.Is(oe.Err, ErrInUse) || errors.Is(oe.Err, ErrNotSupported)
}

// Applier runs plans on GPUs through an NVML implementation: the real one
// or the simulator.
type Applier struct {
	// Lib is the NVML to run the ops on; it must be initialised.
	Lib NVML
	// AfterOp, when set, is called after each op that succeeded, with the
	// GPU index, the op's 1-based step and the op: the agent checkpoints
	// there. An error from it stops the apply and is returned, wrapped.
	AfterOp func(gpu int, step int, op Op) error
	// BeforeOp, when set, is called before each op with the same
	// arguments; an error from it stops the apply before the op starts
	// and is returned, wrapped (the agent's rollout fence).
	BeforeOp func(gpu int, step int, op Op) error
}

// Apply runs the ops of a plan in order and stops at the first failure,
// returning an *OpError that names the op. It checks the context before
// each op. A blocked plan returns an error wrapping ErrBlocked and touches
// nothing. Ops on existing instances are checked against the device first
// (the GI must still sit at the planned placement with the planned profile,
// the CI must still have the planned UUID), so a plan made from a stale
// snapshot fails with ErrStateChanged instead of destroying something else.
// A failed apply leaves the GPU part-way; plan again from a fresh snapshot
// (ReadGPU) and apply that plan to finish.
func (a *Applier) Apply(ctx context.Context, p GPUPlan) error {
	if p.IsBlocked() {
		uuids := make([]string, len(p.Blocked))
		for i, b := range p.Blocked {
			uuids[i] = b.UUID
		}
		return fmt.Errorf("GPU %d: %w: %s", p.Index, ErrBlocked, strings.Join(uuids, ", "))
	}
	if len(p.Ops) == 0 {
		return nil
	}
	d, err := a.Lib.Device(p.Index)
	if err != nil {
		return fmt.Errorf("GPU %d: %w", p.Index, err)
	}
	if p.UUID != "" {
		uuid, err := d.UUID()
		if err != nil {
			return fmt.Errorf("GPU %d: UUID: %w", p.Index, err)
		}
		if uuid != p.UUID {
			return fmt.Errorf("GPU %d: %w: the plan is for %s but the GPU at this index is %s", p.Index, ErrStateChanged, p.UUID, uuid)
		}
	}
	for i, op := range p.Ops {
		fail := func(err error) error {
			return &OpError{GPU: p.Index, Step: i + 1, Total: len(p.Ops), Op: op, Err: err}
		}
		if err := ctx.Err(); err != nil {
			return fail(fmt.Errorf("not started: %w", err))
		}
		if a.BeforeOp != nil {
			if err := a.BeforeOp(p.Index, i+1, op); err != nil {
				return fail(fmt.Errorf("not started: %w", err))
			}
		}
		if err := runOp(d, op); err != nil {
			return fail(err)
		}
		if a.AfterOp != nil {
			if err := a.AfterOp(p.Index, i+1, op); err != nil {
				return fail(fmt.Errorf("done, then after-op hook: %w", err))
			}
		}
	}
	return nil
}

// runOp runs one op on a device.
func runOp(d Device, op Op) error {
	switch op.Kind {
	case OpEnableMIG:
		return d.SetMIGMode(MIGEnabled)
	case OpDisableMIG:
		return d.SetMIGMode(MIGDisabled)
	case OpResetGPU:
		return d.Reset()
	case OpDestroyCI:
		if _, err := findGI(d, op); err != nil {
			return err
		}
		cis, err := d.ComputeInstances(op.GIID)
		if err != nil {
			return fmt.Errorf("list compute instances: %w", err)
		}
		found := false
		for _, ci := range cis {
			if ci.ID == op.CIID {
				if op.UUID != "" && ci.UUID != op.UUID {
					return fmt.Errorf("%w: compute instance %d is %s, not %s", ErrStateChanged, ci.ID, ci.UUID, op.UUID)
				}
				found = true
			}
		}
		if !found {
			return fmt.Errorf("%w: GPU instance %d has no compute instance %d", ErrStateChanged, op.GIID, op.CIID)
		}
		return d.DestroyComputeInstance(op.GIID, op.CIID)
	case OpDestroyGI:
		if _, err := findGI(d, op); err != nil {
			return err
		}
		return d.DestroyGPUInstance(op.GIID)
	case OpCreateGI:
		_, err := d.CreateGPUInstance(op.ProfileID, op.Placement)
		return err
	case OpCreateCI:
		id, err := findGI(d, op)
		if err != nil {
			return err
		}
		_, err = d.CreateComputeInstance(id)
		return err
	}
	return fmt.Errorf("unknown op kind %q: %w", op.Kind, ErrInvalidArgument)
}

// findGI reads the device's GPU instances back and returns the ID of the
// one at the op's placement with the op's profile. When the op names a GI
// ID, the GPU instance found must have it.
func findGI(d Device, op Op) (int, error) {
	gis, err := d.GPUInstances()
	if err != nil {
		return 0, fmt.Errorf("list GPU instances: %w", err)
	}
	for _, gi := range gis {
		if gi.Placement != op.Placement {
			continue
		}
		if gi.ProfileID != op.ProfileID || (op.GIID >= 0 && gi.ID != op.GIID) {
			return 0, fmt.Errorf("%w: the GPU instance at %s is ID %d of profile ID %d, not ID %d of profile ID %d",
				ErrStateChanged, op.Placement, gi.ID, gi.ProfileID, op.GIID, op.ProfileID)
		}
		return gi.ID, nil
	}
	return 0, fmt.Errorf("%w: no GPU instance at %s", ErrStateChanged, op.Placement)
}

// ResolveModel returns the MIG geometry of a GPU: read from the device when
// MIG is on (ModelFromDevice), else the catalogue model for its PCI device
// ID or product (IdentifyModel). A GPU without MIG gets an error wrapping
// ErrNotSupported; a MIG-capable GPU that is off and missing from the
// catalogue gets one wrapping ErrUnknownModel that says how to proceed.
func ResolveModel(d Device, g GPU) (Model, error) {
	if !g.MIGCapable {
		return Model{}, fmt.Errorf("GPU %d (%s): no MIG: %w", g.Index, g.Product, ErrNotSupported)
	}
	if g.MIGMode == MIGEnabled {
		m, err := ModelFromDevice(d)
		if err != nil {
			return Model{}, fmt.Errorf("GPU %d: read MIG geometry from the device: %w", g.Index, err)
		}
		return m, nil
	}
	pciID, err := devicePCIID(d)
	if err != nil {
		return Model{}, err
	}
	if m, ok := IdentifyModel(g.Product, g.MemoryMiB, pciID); ok {
		return m, nil
	}
	var keys []string
	for _, m := range Catalogue() {
		keys = append(keys, m.Key)
	}
	return Model{}, fmt.Errorf("GPU %d (%s, model %s): MIG is off and the catalogue has no geometry for this model (it has %s); enable MIG on the GPU so carve can read the geometry from the device: %w",
		g.Index, g.Product, ModelKey(g.Product, g.MemoryMiB), strings.Join(keys, ", "), ErrUnknownModel)
}
