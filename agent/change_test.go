package agent

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/partition"
)

// A disruptive change is recorded in progress before its first disruptive
// step (no device withdrawn, no op run yet), the slot renewed after that
// record; the record after the change no longer says so, and only then is
// the slot released.
func TestChangeRecordedBeforeTheFirstDisruptiveStep(t *testing.T) {
	h := newHarness(t, "h100-80gb*1")
	fr := &fakeRollout{grant: true}
	h.r.Rollout = fr
	f := h.parse(testProfiles)
	h.reconcile(f, nil, "balanced")
	h.changes, fr.calls = nil, nil
	h.m.ResetOpLog()
	withdrawnBefore := len(h.adv.withdrawn)
	var opsAtRecord, withdrawnAtRecord int
	var callsAtRecord []string
	h.r.Hooks.RecordChange = func(ctx context.Context, rec carvev1.NodeRecord) error {
		opsAtRecord, withdrawnAtRecord = len(h.mutations()), len(h.adv.withdrawn)-withdrawnBefore
		callsAtRecord = append([]string(nil), fr.calls...)
		return h.recordChange(ctx, rec)
	}
	res := h.reconcile(f, nil, "small")
	if res.State != carvev1.StateSuccess {
		t.Fatalf("state %s, err %v", res.State, res.Err)
	}
	if len(h.changes) != 1 || h.changes[0].Change == nil || h.changes[0].Change.Profile != "small" || h.changes[0].Change.Slot != "s-0" {
		t.Fatalf("records of a change in progress %+v, want one for small in slot s-0", h.changes)
	}
	if opsAtRecord != 0 || withdrawnAtRecord != 0 {
		t.Errorf("at the record of the change: %d ops run, %d withdrawals; want none yet", opsAtRecord, withdrawnAtRecord)
	}
	if diff := cmp.Diff([]string{"acquire"}, callsAtRecord); diff != "" {
		t.Errorf("rollout calls before the record (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"acquire", "confirm", "report ok", "release"}, fr.calls); diff != "" {
		t.Errorf("rollout calls (-want +got):\n%s", diff)
	}
	if res.Annotation.Change != nil || !res.ReleaseSlot || res.Annotation.Generation != h.changes[0].Generation+1 {
		t.Errorf("final record: change %+v, release %v, generation %d after %d", res.Annotation.Change, res.ReleaseSlot, res.Annotation.Generation, h.changes[0].Generation)
	}
}

// A change whose record cannot be written does not start: no op, devices
// as they were, state pending with the reason.
func TestChangeNotStartedWithoutItsRecord(t *testing.T) {
	h := newHarness(t, "h100-80gb*1")
	fr := &fakeRollout{grant: true}
	h.r.Rollout = fr
	f := h.parse(testProfiles)
	h.reconcile(f, nil, "balanced")
	h.m.ResetOpLog()
	h.recordErr = errors.New("the API server is unreachable")
	res := h.reconcile(f, nil, "small")
	if res.State != carvev1.StatePending || len(h.mutations()) != 0 || !strings.Contains(res.Annotation.Waiting, "unreachable") {
		t.Fatalf("state %s, ops %v, waiting %q; want pending, no op, the reason", res.State, h.mutations(), res.Annotation.Waiting)
	}
	if res.Annotation.Change != nil {
		t.Errorf("record says mid-change though nothing started: %+v", res.Annotation.Change)
	}
}

// When the slot cannot be renewed right after the record (taken over
// before the record was written), nothing changes and the record says no
// change is in progress again.
func TestChangeNotStartedWhenTheSlotIsLost(t *testing.T) {
	h := newHarness(t, "h100-80gb*1")
	fr := &fakeRollout{grant: true}
	h.r.Rollout = fr
	f := h.parse(testProfiles)
	h.reconcile(f, nil, "balanced")
	h.m.ResetOpLog()
	h.changes, fr.confirmErr = nil, errors.New("the slot was taken over")
	res := h.reconcile(f, nil, "small")
	if res.State != carvev1.StatePending || len(h.mutations()) != 0 || !hasEvent(res.Events, carvev1.ReasonRolloutFenced, true) {
		t.Fatalf("state %s, ops %v, events %v; want pending, no op, %s", res.State, h.mutations(), reasons(res.Events), carvev1.ReasonRolloutFenced)
	}
	if len(h.changes) == 0 || res.Annotation.Change != nil {
		t.Errorf("records %d, final change %+v; want the change recorded, then taken back", len(h.changes), res.Annotation.Change)
	}
}

// A fence that closes mid-apply stops the change at the next operation
// boundary: pending, a RolloutFenced Warning, the record still mid-change,
// the slot kept and the checkpoint too. Once the fence opens, the next
// pass finishes with the remaining ops and releases the slot.
func TestFenceStopsTheApplyAtAnOpBoundary(t *testing.T) {
	h := newHarness(t, "h100-80gb*1")
	fr := &fakeRollout{grant: true}
	h.r.Rollout = fr
	f := h.parse(testProfiles)
	h.reconcile(f, nil, "balanced")
	h.m.ResetOpLog()
	h.changes = nil
	h.r.Hooks.AfterOp = func(_, step int, _ partition.Op) error {
		if step == 2 {
			fr.fenceErr = errors.New("the API server is unreachable")
		}
		return nil
	}
	fr.calls = nil
	res := h.reconcile(f, nil, "small")
	if res.State != carvev1.StatePending || len(h.mutations()) != 2 || !hasEvent(res.Events, carvev1.ReasonRolloutFenced, true) {
		t.Fatalf("state %s, %d ops, events %v; want pending after 2 ops, %s", res.State, len(h.mutations()), reasons(res.Events), carvev1.ReasonRolloutFenced)
	}
	if res.Annotation.Change == nil || res.ReleaseSlot || !fr.holding || !strings.Contains(res.Annotation.Waiting, "unreachable") {
		t.Errorf("change %+v, release %v, holding %v, waiting %q; want still mid-change, slot kept", res.Annotation.Change, res.ReleaseSlot, fr.holding, res.Annotation.Waiting)
	}
	if in, err := (&Checkpoints{Dir: h.dir}).Load(); err != nil || in == nil {
		t.Errorf("checkpoint after the fence: %+v, %v; want kept", in, err)
	}
	fr.fenceErr, h.r.Hooks.AfterOp = nil, nil
	res = h.reconcile(f, nil, "small")
	if res.State != carvev1.StateSuccess || layout(h.gpus()) != "0:[1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6]" {
		t.Fatalf("after the fence opened: state %s (%v), layout %s", res.State, res.Err, layout(h.gpus()))
	}
	if res.Annotation.Change != nil || !res.ReleaseSlot || fr.holding {
		t.Errorf("after the change: change %+v, release %v, holding %v", res.Annotation.Change, res.ReleaseSlot, fr.holding)
	}
	if len(h.changes) != 1 {
		t.Errorf("%d records of a change in progress, want 1 (the change went on)", len(h.changes))
	}
}

// A change interrupted by a restart is still in progress for the new
// agent: it keeps the record's change until the change is done.
func TestChangeInProgressSurvivesARestart(t *testing.T) {
	h := newHarness(t, "h100-80gb*1")
	fr := &fakeRollout{grant: true}
	h.r.Rollout = fr
	f := h.parse(testProfiles)
	h.reconcile(f, nil, "balanced")
	h.r.Hooks.AfterOp = func(_, step int, _ partition.Op) error {
		if step == 2 {
			return errors.New("killed here")
		}
		return nil
	}
	h.changes = nil
	h.reconcile(f, nil, "small")
	if len(h.changes) != 1 {
		t.Fatalf("%d records of a change in progress, want 1", len(h.changes))
	}
	// Killed after two ops: the record the pass would write at its end
	// never is; the node carries the one written before the change.
	h.prev = &h.changes[0]
	h.r = h.newReconciler()
	h.r.Rollout, fr.fenceErr = fr, errors.New("not renewed yet")
	res := h.reconcile(f, nil, "small")
	if res.Annotation.Change == nil || res.State != carvev1.StatePending {
		t.Fatalf("the restarted agent, fenced: state %s, change %+v; want pending, still mid-change", res.State, res.Annotation.Change)
	}
	fr.fenceErr = nil
	if res := h.reconcile(f, nil, "small"); res.State != carvev1.StateSuccess || res.Annotation.Change != nil {
		t.Fatalf("after the fence opened: state %s, change %+v", res.State, res.Annotation.Change)
	}
}
