package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/timeslice"
)

const smallLayout = "0:[1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6]"

// hold sets or removes carve.dev/hold on the harness's node, in its labels
// and in what the Reconciler's Hold hook reports, as the Controller's
// informer would.
func (h *harness) hold(on bool) {
	if on {
		h.labels[carvev1.LabelHold] = carvev1.HoldTrue
	} else {
		delete(h.labels, carvev1.LabelHold)
	}
	h.r.Hold = func() bool { return on }
}

// checkObserved checks a pass on a held node: state held, no NVML
// mutation, no withdrawal, no rollout call, no change recorded, the
// devices advertised as before and the record saying what it would do.
func checkObserved(t *testing.T, h *harness, fr *fakeRollout, res Result, before map[string]int, wantWaiting string) {
	t.Helper()
	if res.State != carvev1.StateHeld || res.Labels[carvev1.LabelState] != carvev1.StateHeld || res.Err != nil {
		t.Errorf("state %s, label %q, err %v; want held", res.State, res.Labels[carvev1.LabelState], res.Err)
	}
	if ops := h.mutations(); len(ops) != 0 {
		t.Errorf("held node: %d mutating NVML calls %v, want none", len(ops), ops)
	}
	if len(h.adv.withdrawn) != 0 || len(fr.calls) != 0 || len(h.changes) != 0 {
		t.Errorf("held node: withdrawals %v, rollout calls %v, change records %d; want none", h.adv.withdrawn, fr.calls, len(h.changes))
	}
	if diff := cmp.Diff(before, h.adv.counts()); diff != "" {
		t.Errorf("advertised devices changed on a held node (-before +after):\n%s", diff)
	}
	if !strings.Contains(res.Annotation.Waiting, wantWaiting) || res.Annotation.Change != nil {
		t.Errorf("record: waiting %q, change %+v; want %q, no change", res.Annotation.Waiting, res.Annotation.Change, wantWaiting)
	}
}

// A held node observes only: a new pinned profile, an edit of the profile
// in force and a window that opens all wait, with the devices as they were
// and the change the agent would make in the record; once the hold is
// removed the change happens.
func TestHeldNodeObservesOnly(t *testing.T) {
	h, fr, f := onBalanced(t)
	before := h.adv.counts()
	h.adv.withdrawn = nil
	h.hold(true)

	res := h.reconcile(f, nil, "small")
	checkObserved(t, h, fr, res, before, "it would then apply profile small (label): ")
	if !strings.Contains(res.Annotation.Waiting, "on GPU 0, disruptive") {
		t.Errorf("waiting %q, want the ops of the change", res.Annotation.Waiting)
	}
	if res.Annotation.Profile != "balanced" || res.Annotation.Selected == nil || res.Annotation.Selected.Profile != "small" {
		t.Errorf("record: profile %q, selected %+v; want balanced realised, small selected", res.Annotation.Profile, res.Annotation.Selected)
	}
	if !hasEvent(res.Events, carvev1.ReasonHeld, false) {
		t.Errorf("events %v, want a Normal %s", reasons(res.Events), carvev1.ReasonHeld)
	}

	// An edit of the profile in force (replicas only, no MIG change).
	edited := h.parse(strings.Replace(testProfiles, "replicas: {1g.10gb: 2}", "replicas: {1g.10gb: 5}", 1))
	res = h.reconcile(edited, nil, "balanced")
	checkObserved(t, h, fr, res, before, "it would then apply profile balanced (label): no MIG change, the sharing of the devices changes")

	// A window that opens (Monday 20:00) and selects another profile.
	win := h.parse(testProfiles + "windows:\n  - name: nightly\n    schedule: \"0 20 * * 1-5\"\n    duration: 10h\n    profile: full\n")
	h.now = time.Date(2026, 3, 2, 21, 0, 0, 0, time.UTC)
	res = h.reconcile(win, nil, "balanced")
	checkObserved(t, h, fr, res, before, "it would then apply profile full (window): ")

	h.hold(false)
	h.now = time.Date(2026, 3, 3, 12, 0, 0, 0, time.UTC)
	res = h.reconcile(f, nil, "small")
	if res.State != carvev1.StateSuccess || layout(h.gpus()) != smallLayout || res.Annotation.Waiting != "" {
		t.Fatalf("after the hold: state %s (%v), layout %s, waiting %q; want small realised", res.State, res.Err, layout(h.gpus()), res.Annotation.Waiting)
	}
	if !hasEvent(res.Events, carvev1.ReasonHoldLifted, false) {
		t.Errorf("events %v, want %s", reasons(res.Events), carvev1.ReasonHoldLifted)
	}
}

// A value of carve.dev/hold other than "true" holds nothing, and says so
// in a Warning.
func TestHoldOtherValuesHoldNothing(t *testing.T) {
	h, _, f := onBalanced(t)
	h.labels[carvev1.LabelHold] = "yes"
	res := h.reconcile(f, nil, "small")
	if res.State != carvev1.StateSuccess || layout(h.gpus()) != smallLayout {
		t.Fatalf("hold=yes: state %s (%v), layout %s; want small realised", res.State, res.Err, layout(h.gpus()))
	}
	if !hasEvent(res.Events, carvev1.ReasonHoldIgnored, true) {
		t.Errorf("events %v, want a Warning %s", reasons(res.Events), carvev1.ReasonHoldIgnored)
	}
}

// heldMidChange makes the change balanced -> small on a harness, with a
// hold set after its first op (the node's label and the live hook, as the
// informer sees it), and returns the pass's result. The first op destroys
// the compute instance of the 2g.20gb instance; the 3g.40gb instance,
// which the change removes too, is still complete and must stay
// withdrawn.
func heldMidChange(t *testing.T, h *harness, f *configs.File) Result {
	t.Helper()
	h.r.Hooks.AfterOp = func(_, step int, _ partition.Op) error {
		if step == 1 {
			h.hold(true)
		}
		return nil
	}
	res := h.reconcile(f, nil, "small")
	h.r.Hooks.AfterOp = nil
	return res
}

// A hold set while a change runs stops it at the next operation boundary:
// held, still mid-change, slot and checkpoint kept, the devices the rest
// of the change removes still withdrawn; passes while held change nothing;
// once the hold is removed the change finishes with exactly the remaining
// ops, the ones an uninterrupted change would have run after the first.
func TestHoldMidChangeStopsAtTheNextOpBoundary(t *testing.T) {
	ref, _, rf := onBalanced(t)
	ref.reconcile(rf, nil, "small")
	whole := ref.mutations()
	if len(whole) < 4 {
		t.Fatalf("the reference change has %d ops; the test needs more", len(whole))
	}

	h, fr, f := onBalanced(t)
	res := heldMidChange(t, h, f)
	first := h.mutations()
	if res.State != carvev1.StateHeld || len(first) != 1 || !hasEvent(res.Events, carvev1.ReasonHeld, false) {
		t.Fatalf("hold after op 1: state %s (%v), %d ops, events %v; want held after 1 op", res.State, res.Err, len(first), reasons(res.Events))
	}
	checkHeldMidChange(t, h, fr, res)

	h.m.ResetOpLog()
	res = h.reconcile(f, nil, "small")
	if res.State != carvev1.StateHeld || len(h.mutations()) != 0 {
		t.Fatalf("a pass while held: state %s, ops %v; want held, none", res.State, h.mutations())
	}
	checkHeldMidChange(t, h, fr, res)

	h.hold(false)
	res = h.reconcile(f, nil, "small")
	if res.State != carvev1.StateSuccess || layout(h.gpus()) != smallLayout {
		t.Fatalf("after the hold: state %s (%v), layout %s", res.State, res.Err, layout(h.gpus()))
	}
	if diff := cmp.Diff(opCalls(whole), opCalls(append(first, h.mutations()...))); diff != "" {
		t.Errorf("ops before the hold and after it, against an uninterrupted change (-want +got):\n%s", diff)
	}
	if res.Annotation.Change != nil || !res.ReleaseSlot || fr.holding {
		t.Errorf("after the change: change %+v, release %v, holding %v; want done, slot released", res.Annotation.Change, res.ReleaseSlot, fr.holding)
	}
}

// checkHeldMidChange checks a node held mid-change: the record still says
// mid-change, the slot is kept, the checkpoint too, and none of the
// devices the rest of the change removes is advertised.
func checkHeldMidChange(t *testing.T, h *harness, fr *fakeRollout, res Result) {
	t.Helper()
	if res.Annotation.Change == nil || res.ReleaseSlot || !fr.holding || !res.Rollout.Holding {
		t.Errorf("change %+v, release %v, holding %v/%v; want still mid-change, slot kept", res.Annotation.Change, res.ReleaseSlot, fr.holding, res.Rollout.Holding)
	}
	if in, err := (&Checkpoints{Dir: h.dir}).Load(); err != nil || in == nil {
		t.Errorf("checkpoint while held: %+v, %v; want kept", in, err)
	}
	going := 0
	for _, g := range h.gpus() {
		for _, in := range g.Instances {
			if in.Profile == "1g.10gb" || !in.Complete() {
				continue
			}
			going++
			if advertises(res.Resources, in.UUID()) {
				t.Errorf("%s instance %s, which the change removes, is advertised while held", in.Profile, in.UUID())
			}
		}
	}
	if going == 0 {
		t.Errorf("layout %s: no complete instance the change removes; the check of what is advertised checks nothing", layout(h.gpus()))
	}
	if !strings.Contains(res.Annotation.Waiting, "its hold to be removed") {
		t.Errorf("waiting %q, want the hold", res.Annotation.Waiting)
	}
}

// advertises reports whether res holds a device of the physical device
// uuid.
func advertises(res timeslice.Resources, uuid string) bool {
	for _, devs := range res {
		for _, d := range devs {
			if d.UUID == uuid {
				return true
			}
		}
	}
	return false
}

// opCalls are the ops as calls and arguments, without the handles they
// return (GI IDs and UUIDs differ between machines).
func opCalls(ops []sim.Op) []string {
	out := make([]string, len(ops))
	for i, op := range ops {
		out[i] = op.Call + " " + op.Args
	}
	return out
}

// A node held mid-change stays counted unavailable by the rollout, from
// its record: its agent stopped renewing (the slot expired), yet another
// node does not take the slot over while the held node's record says
// mid-change; it does once the record says the change is over.
func TestHeldMidChangeKeepsItsSlot(t *testing.T) {
	h, _, f := onBalanced(t)
	res := heldMidChange(t, h, f)
	if res.State != carvev1.StateHeld {
		t.Fatalf("state %s (%v), want held", res.State, res.Err)
	}
	fl := newFleet(t, "gpu-a", "gpu-b")
	a, b := fl.agent("gpu-a"), fl.agent("gpu-b")
	if d := fl.acquire(a); !d.Granted {
		t.Fatalf("gpu-a: %+v", d)
	}
	fl.writeRecord("gpu-a", res.Annotation)
	a.pause()
	fl.wall.Add(time.Minute)
	if d := fl.acquire(b); d.Granted || len(d.Stuck) != 1 || d.Stuck[0].Holder != "gpu-a" {
		t.Fatalf("gpu-b while gpu-a is held mid-change: %+v; want refused, gpu-a's slot stuck", d)
	}

	h.hold(false)
	done := h.reconcile(f, nil, "small")
	if done.State != carvev1.StateSuccess || done.Annotation.Change != nil {
		t.Fatalf("after the hold: state %s, change %+v", done.State, done.Annotation.Change)
	}
	fl.writeRecord("gpu-a", done.Annotation)
	if d := fl.acquire(b); !d.Granted {
		t.Fatalf("gpu-b once gpu-a's record says the change is over: %+v", d)
	}
}
