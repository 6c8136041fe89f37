package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/rollout"
)

// fakeRollout grants or refuses as told and records the calls.
type fakeRollout struct {
	grant, halted bool
	err           error
	holding       bool
	// fenceErr makes Fence refuse; confirmErr makes Confirm fail.
	fenceErr, confirmErr error
	calls                []string
	recovered            int // Recovered calls, kept apart from calls
}

func (f *fakeRollout) Recovered(context.Context) error {
	f.recovered++
	return nil
}

func (f *fakeRollout) Acquire(_ context.Context, p configs.Rollout, _ string) (rollout.Decision, error) {
	f.calls = append(f.calls, "acquire")
	if f.err != nil {
		return rollout.Decision{}, f.err
	}
	if f.grant {
		f.holding = true
		return rollout.Decision{Granted: true, Slot: "s-0", Nodes: 3, Bound: p.MaxUnavailable.Of(3)}, nil
	}
	d := rollout.Decision{Nodes: 3, Bound: p.MaxUnavailable.Of(3), Holders: []string{"other"}, Halted: f.halted}
	if f.halted {
		d.Failed = []string{"broken"}
	}
	return d, nil
}

func (f *fakeRollout) Holding() bool { return f.holding }

func (f *fakeRollout) Slot() string {
	if f.holding {
		return "s-0"
	}
	return ""
}

// Fence refuses with fenceErr, and once holding is false.
func (f *fakeRollout) Fence() error {
	switch {
	case f.fenceErr != nil:
		return fmt.Errorf("%w: %w", ErrFenced, f.fenceErr)
	case !f.holding:
		return fmt.Errorf("%w: no slot", ErrFenced)
	}
	return nil
}

func (f *fakeRollout) Confirm(context.Context) error {
	f.calls = append(f.calls, "confirm")
	if f.confirmErr != nil {
		return fmt.Errorf("%w: %w", ErrFenced, f.confirmErr)
	}
	return nil
}

func (f *fakeRollout) Release(context.Context) error {
	f.calls = append(f.calls, "release")
	f.holding = false
	return nil
}

func (f *fakeRollout) Report(_ context.Context, _ configs.Rollout, _ string, failed bool) (bool, error) {
	if failed {
		f.calls = append(f.calls, "report failed")
		return true, nil
	}
	f.calls = append(f.calls, "report ok")
	return false, nil
}

// A disruptive change waits for a slot: no NVML op, devices as they were,
// state pending with the reason recorded; once granted it applies and
// gives the slot back after advertising.
func TestReconcileWaitsForARolloutSlot(t *testing.T) {
	h := newHarness(t, "h100-80gb*2")
	fr := &fakeRollout{}
	h.r.Rollout = fr
	f := h.parse(testProfiles)
	if res := h.reconcile(f, nil, "full"); res.State != carvev1.StateSuccess || len(fr.calls) != 0 {
		t.Fatalf("fresh node to whole GPUs: state %s, rollout calls %v; want success without a slot", res.State, fr.calls)
	}
	h.m.ResetOpLog()
	before := h.adv.current
	res := h.reconcile(f, nil, "balanced")
	if res.State != carvev1.StatePending || len(h.mutations()) != 0 {
		t.Fatalf("without a slot: state %s, ops %v; want pending and no op", res.State, h.mutations())
	}
	if diff := cmp.Diff(before, res.Resources); diff != "" {
		t.Errorf("advertised devices changed while waiting (-before +after):\n%s", diff)
	}
	if !hasEvent(res.Events, carvev1.ReasonRolloutQueued, false) || !strings.Contains(res.Annotation.Waiting, "all 1 rollout slots are held") {
		t.Errorf("events %v, waiting %q; want RolloutQueued and the reason", reasons(res.Events), res.Annotation.Waiting)
	}
	if wait := res.Requeue.Sub(h.now); wait < DefaultSlotRetry || wait > DefaultSlotRetry*3/2 {
		t.Errorf("asks again after %s, want %s to %s", wait, DefaultSlotRetry, DefaultSlotRetry*3/2)
	}

	fr.grant, fr.calls = true, nil
	res = h.reconcile(f, nil, "balanced")
	if res.State != carvev1.StateSuccess || len(h.mutations()) == 0 || res.Annotation.Waiting != "" {
		t.Fatalf("with a slot: state %s, %d ops, waiting %q", res.State, len(h.mutations()), res.Annotation.Waiting)
	}
	if diff := cmp.Diff([]string{"acquire", "confirm", "report ok", "release"}, fr.calls); diff != "" {
		t.Errorf("rollout calls (-want +got):\n%s", diff)
	}

	// Replicas alone destroy nothing: no slot asked for.
	fr.grant, fr.calls = false, nil
	if res := h.reconcile(f, nil, "balanced-3"); res.State != carvev1.StateSuccess || len(fr.calls) != 0 {
		t.Errorf("a replica change: state %s, rollout calls %v; want success without a slot", res.State, fr.calls)
	}
}

// A failed change with a slot is reported against the revision and frees
// the slot; the budget spent, an Event goes to the ConfigMap.
func TestReconcileReportsAFailedChange(t *testing.T) {
	h := newHarness(t, "h100-80gb*1")
	fr := &fakeRollout{grant: true}
	h.r.Rollout = fr
	f := h.parse(testProfiles)
	h.reconcile(f, nil, "full")
	if err := h.m.InjectFault(sim.Fault{Call: "CreateGPUInstance", GPU: 0, Err: partition.ErrInsufficientResources, Times: 1}); err != nil {
		t.Fatal(err)
	}
	res := h.reconcile(f, nil, "balanced")
	if res.State != carvev1.StateFailed {
		t.Fatalf("state %s, want failed", res.State)
	}
	if diff := cmp.Diff([]string{"acquire", "confirm", "report failed", "release"}, fr.calls); diff != "" {
		t.Errorf("rollout calls (-want +got):\n%s", diff)
	}
	var onCM []Event
	for _, e := range res.Events {
		if e.OnConfigMap {
			onCM = append(onCM, e)
		}
	}
	if len(onCM) != 1 || onCM[0].Reason != carvev1.ReasonRolloutHalted || !onCM[0].Warning {
		t.Errorf("events on the ConfigMap %+v, want one Warning %s", onCM, carvev1.ReasonRolloutHalted)
	}
}

// A halted rollout holds back disruptive changes with a Warning; a node
// that cannot read the Leases waits too, and says why.
func TestReconcileHeldBack(t *testing.T) {
	tests := []struct {
		name    string
		fr      *fakeRollout
		reason  string
		warning bool
		waiting string
	}{
		{"halted", &fakeRollout{halted: true}, carvev1.ReasonRolloutHalted, true, "the rollout is halted: 1 of at most 1 nodes failed on this revision of the profile file (broken)"},
		{"Leases unreadable", &fakeRollout{err: errors.New("connection refused")}, carvev1.ReasonRolloutQueued, true, "the rollout Leases cannot be read: connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, "h100-80gb*1")
			h.r.Rollout = tt.fr
			f := h.parse(testProfiles)
			h.reconcile(f, nil, "full")
			h.m.ResetOpLog()
			res := h.reconcile(f, nil, "small")
			if res.State != carvev1.StatePending || len(h.mutations()) != 0 {
				t.Fatalf("state %s, ops %v; want pending, no op", res.State, h.mutations())
			}
			if !hasEvent(res.Events, tt.reason, tt.warning) || !strings.Contains(res.Annotation.Waiting, tt.waiting) {
				t.Errorf("events %v, waiting %q; want %s and %q", reasons(res.Events), res.Annotation.Waiting, tt.reason, tt.waiting)
			}
		})
	}
}

// A change whose operations all ran but whose devices could not be
// advertised (a kubelet restarting) is reported failed; once the next pass
// advertises them, with no slot needed, the failure is taken back, so it
// does not go on spending the fleet's failure budget.
func TestReconcileRecoveredFailureTakenBack(t *testing.T) {
	h := newHarness(t, "h100-80gb*1")
	fr := &fakeRollout{grant: true}
	h.r.Rollout = fr
	f := h.parse(testProfiles)
	h.reconcile(f, nil, "full")
	h.adv.updateErr = errors.New("kubelet restarting")
	if res := h.reconcile(f, nil, "small"); res.State != carvev1.StateFailed {
		t.Fatalf("state %s, want failed while advertising fails", res.State)
	}
	if diff := cmp.Diff([]string{"acquire", "confirm", "report failed", "release"}, fr.calls); diff != "" {
		t.Errorf("rollout calls (-want +got):\n%s", diff)
	}
	before := fr.recovered
	h.adv.updateErr = nil
	if res := h.reconcile(f, nil, "small"); res.State != carvev1.StateSuccess {
		t.Fatalf("state %s after the kubelet came back", res.State)
	}
	if fr.recovered == before {
		t.Error("the failure was not taken back after the node converged")
	}
}
