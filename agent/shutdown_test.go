package agent

// The agent shut down (its context cancelled, as SIGTERM does) while each
// operation of each transition of the reference suite is in flight.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/internal/transitions"
	"github.com/carve-dev/carve/partition"
)

// signalLib is an NVML whose k-th mutating call cancels the context before
// it runs: the shutdown signal arrives while that NVML call is in flight.
type signalLib struct {
	partition.NVML
	// k is the mutating call (1-based) that signals; inFlight is what the
	// reconciler said it was running then.
	k, n     int
	cancel   func()
	inFlight func() string
	seen     string
}

var _ partition.NVML = (*signalLib)(nil)

func (l *signalLib) Device(i int) (partition.Device, error) {
	d, err := l.NVML.Device(i)
	if err != nil {
		return nil, err
	}
	return signalDevice{Device: d, lib: l}, nil
}

// call counts a mutating call and signals on the k-th.
func (l *signalLib) call() {
	if l.n++; l.n == l.k {
		l.seen = l.inFlight()
		l.cancel()
	}
}

// signalDevice counts its mutating calls on its signalLib.
type signalDevice struct {
	partition.Device
	lib *signalLib
}

func (d signalDevice) SetMIGMode(m partition.MIGMode) error {
	d.lib.call()
	return d.Device.SetMIGMode(m)
}

func (d signalDevice) Reset() error {
	d.lib.call()
	return d.Device.Reset()
}

func (d signalDevice) CreateGPUInstance(p int, at partition.Placement) (partition.GPUInstance, error) {
	d.lib.call()
	return d.Device.CreateGPUInstance(p, at)
}

func (d signalDevice) DestroyGPUInstance(gi int) error {
	d.lib.call()
	return d.Device.DestroyGPUInstance(gi)
}

func (d signalDevice) CreateComputeInstance(gi int) (partition.ComputeInstance, error) {
	d.lib.call()
	return d.Device.CreateComputeInstance(gi)
}

func (d signalDevice) DestroyComputeInstance(gi, ci int) error {
	d.lib.call()
	return d.Device.DestroyComputeInstance(gi, ci)
}

// TestChaosShutdownDuringEveryOp cancels the agent's context while operation k
// of each transition's apply is in flight: the operation must finish, be
// checkpointed, and be the last; the pass must end with ErrShutdown and
// leave the change under way (no failure reported, the rollout slot and
// the paused operands kept); a restart must make exactly the operations
// left and converge.
func TestChaosShutdownDuringEveryOp(t *testing.T) {
	for _, tr := range transitions.Suite() {
		t.Run(tr.Name(), func(t *testing.T) {
			sc := newSuiteCase(t, tr)
			for _, k := range opsToTry(len(sc.ops)) {
				t.Run(fmt.Sprintf("during-op-%d", k), func(t *testing.T) { shutdownDuring(t, sc, k) })
			}
		})
	}
}

// shutdownDuring is one case of TestChaosShutdownDuringEveryOp.
func shutdownDuring(t *testing.T, sc suiteCase, k int) {
	t.Helper()
	h, before := sc.start(t)
	fr := &fakeRollout{grant: true}
	ops := &fakeOperands{h: h}
	h.labels[exporterLabel] = "true"
	withParts := func() {
		h.r.Rollout, h.r.Operands, h.r.OperandNames = fr, ops, []string{"dcgm-exporter"}
	}
	withParts()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lib := &signalLib{NVML: h.m, k: k, cancel: cancel, inFlight: h.r.InFlight}
	h.r.Lib = lib
	h.labels[carvev1.LabelProfile] = sc.tr.To
	_, err := h.r.Reconcile(ctx, Input{Config: sc.file, Labels: h.labels, Now: h.now, Previous: h.prev})

	c := &chaosCheck{t: t}
	if !errors.Is(err, ErrShutdown) || !errors.Is(err, context.Canceled) {
		c.fail("Reconcile after the signal: %v, want %v wrapping %v", err, ErrShutdown, context.Canceled)
	}
	if want := fmt.Sprintf("GPU %d op %d ", sc.ops[k-1].GPU, sc.opStep(k)); !strings.HasPrefix(lib.seen, want) {
		c.fail("in flight at the signal: %q, want %q...", lib.seen, want)
	}
	if got := h.r.InFlight(); got != "" {
		c.fail("in flight after the pass: %q, want none", got)
	}
	if diff := cmp.Diff(opNames(sc.ops[:k]), opNames(h.mutations())); diff != "" {
		c.fail("NVML calls up to the shutdown differ from a clean apply's first %d (-clean +got):\n%s", k, diff)
	}
	c.checkpoint(h.dir, sc.tr.To, k)
	c.nothingLost(sc, before, h.gpus(), "after the shutdown")
	if slices.Contains(fr.calls, "release") || slices.Contains(fr.calls, "report failed") {
		c.fail("rollout calls %v: a change cut short by a shutdown is neither failed nor over", fr.calls)
	}
	if fr.Slot() == "" && slices.Contains(fr.calls, "acquire") {
		c.fail("the rollout slot was given up at the shutdown")
	}
	for _, call := range ops.calls {
		if strings.HasPrefix(call, "restore") {
			c.fail("operands restored at the shutdown, mid-change: %v", ops.calls)
		}
	}

	// The restart: a new agent, the same GPUs, checkpoint and record.
	h.r = h.newReconciler()
	withParts()
	h.m.ResetOpLog()
	res := h.reconcile(sc.file, nil, sc.tr.To)
	c.converged(h, sc, before, res)
	if diff := cmp.Diff(opNames(sc.ops[k:]), opNames(h.mutations())); diff != "" {
		c.fail("the restarted agent's NVML calls differ from the rest of a clean apply (-clean +restart):\n%s", diff)
	}
	if h.labels[exporterLabel] != "true" {
		c.fail("operand label %s=%q after the restart converged, want it restored to true", exporterLabel, h.labels[exporterLabel])
	}
	if fr.holding {
		c.fail("the rollout slot is still held after the restart converged")
	}
}

// opStep is the step, within its GPU's plan, of the k-th op (1-based) of
// the clean apply.
func (sc suiteCase) opStep(k int) int {
	step := 0
	for i := range k {
		if i > 0 && sc.ops[i].GPU != sc.ops[i-1].GPU {
			step = 0
		}
		step++
	}
	return step
}
