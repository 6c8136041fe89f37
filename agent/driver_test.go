package agent

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/partition"
)

// onGate puts the harness's Reconciler behind a Gate over its machine, as
// agent.New does.
func onGate(h *harness) *partition.Gate {
	g := partition.NewGate(h.m)
	h.r.Lib, h.r.Driver = g, g
	return g
}

// upgrade sets the driver upgrade state label ("" removes it).
func (h *harness) upgrade(state string) {
	if state == "" {
		delete(h.labels, carvev1.LabelDriverUpgrade)
		return
	}
	h.labels[carvev1.LabelDriverUpgrade] = state
}

// checkAway checks a pass with the driver away: state driver-upgrade,
// nothing advertised, no NVML handle held (the simulated driver can be
// unloaded), no GPU change, the record waiting.
func checkAway(t *testing.T, h *harness, g *partition.Gate, res Result, wantWaiting string) {
	t.Helper()
	if res.State != carvev1.StateDriverUpgrade || res.Labels[carvev1.LabelState] != carvev1.StateDriverUpgrade {
		t.Errorf("state %s, label %q; want %s", res.State, res.Labels[carvev1.LabelState], carvev1.StateDriverUpgrade)
	}
	if got := h.adv.counts(); len(got) != 0 {
		t.Errorf("advertised %v with the driver away, want nothing", got)
	}
	if !g.Released() {
		t.Error("the Gate is open with the driver away")
	}
	if ops := h.mutations(); len(ops) != 0 {
		t.Errorf("GPU changes %v with the driver away, want none", ops)
	}
	if !strings.Contains(res.Annotation.Waiting, wantWaiting) {
		t.Errorf("record waiting %q, want %q in it", res.Annotation.Waiting, wantWaiting)
	}
	for _, gr := range res.Annotation.GPUs {
		if gr.NotAdvertised != carvev1.NotAdvertisedDriverUpgrade {
			t.Errorf("record GPU %d: notAdvertised %q, want %q", gr.Index, gr.NotAdvertised, carvev1.NotAdvertisedDriverUpgrade)
		}
	}
}

// Through a driver upgrade: the agent lets go of the driver when the GPU
// pods are deleted (the unload then succeeds), advertises nothing, keeps
// retrying while the driver is not loaded after the label says the
// upgrade is over, and realises the profile again once it is.
func TestDriverUpgradeStepsAsideAndComesBack(t *testing.T) {
	h, _, f := onBalanced(t)
	g := onGate(h)
	want := layout(h.gpus())
	before := h.adv.counts()
	for _, state := range []string{carvev1.DriverUpgradeRequired, carvev1.DriverCordonRequired, carvev1.DriverWaitForJobsRequired} {
		h.upgrade(state)
		if res := h.reconcile(f, nil, "balanced"); res.State != carvev1.StateSuccess || g.Released() {
			t.Fatalf("%s: state %s, released %v; want success with the driver held", state, res.State, g.Released())
		}
	}
	if err := h.m.UnloadDriver(); !errors.Is(err, partition.ErrInUse) {
		t.Fatalf("unload before the GPU pods go: %v, want %v", err, partition.ErrInUse)
	}

	h.upgrade(carvev1.DriverPodDeletionRequired)
	res := h.reconcile(f, nil, "balanced")
	checkAway(t, h, g, res, "the driver upgrade to end ("+carvev1.LabelDriverUpgrade+"=pod-deletion-required)")
	if !hasEvent(res.Events, carvev1.ReasonDriverUpgrade, false) {
		t.Errorf("events %v, want %s", reasons(res.Events), carvev1.ReasonDriverUpgrade)
	}
	if res.Labels[carvev1.LabelApplied] != "balanced" {
		t.Errorf("labels %v: the applied profile's label went", res.Labels)
	}
	h.upgrade(carvev1.DriverPodRestartRequired)
	checkAway(t, h, g, h.reconcile(f, nil, "balanced"), "pod-restart-required")
	if err := h.m.UnloadDriver(); err != nil {
		t.Fatalf("unload with the agent stepped aside: %v", err)
	}

	h.upgrade(carvev1.DriverValidationRequired)
	res = h.reconcile(f, nil, "balanced")
	checkAway(t, h, g, res, "the GPU driver to load")
	if !hasEvent(res.Events, carvev1.ReasonDriverNotLoaded, true) || !strings.Contains(res.Annotation.LastError, "driver not loaded") {
		t.Errorf("events %v, last error %q; want %s and the cause", reasons(res.Events), res.Annotation.LastError, carvev1.ReasonDriverNotLoaded)
	}
	if got, wantAt := res.Requeue, h.now.Add(driverRetryFirst); !got.Equal(wantAt) {
		t.Errorf("retry at %v, want %v", got, wantAt)
	}
	if res = h.reconcile(f, nil, "balanced"); !res.Requeue.Equal(h.now.Add(2 * driverRetryFirst)) {
		t.Errorf("second retry at %v, want %v", res.Requeue, h.now.Add(2*driverRetryFirst))
	}

	if err := h.m.LoadDriver(); err != nil {
		t.Fatal(err)
	}
	if err := h.m.Init(); err != nil { // the test's own look, closed at once
		t.Fatal(err)
	}
	reloaded := layout(h.gpus())
	if err := h.m.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if reloaded == want {
		t.Fatal("the driver reload left the MIG layout")
	}
	h.now = h.now.Add(time.Minute)
	res = h.reconcile(f, nil, "balanced")
	if res.State != carvev1.StateSuccess || layout(h.gpus()) != want || g.Released() {
		t.Fatalf("driver back: state %s (%v), layout %s, released %v; want success with %s", res.State, res.Err, layout(h.gpus()), g.Released(), want)
	}
	if !hasEvent(res.Events, carvev1.ReasonDriverBack, false) {
		t.Errorf("events %v, want %s", reasons(res.Events), carvev1.ReasonDriverBack)
	}
	h.upgrade(carvev1.DriverUpgradeDone)
	h.reconcile(f, nil, "balanced")
	if diff := cmp.Diff(before, h.adv.counts()); diff != "" {
		t.Errorf("advertised after the upgrade (-before +after):\n%s", diff)
	}
}

// An agent restarted while the driver is away starts with its GPUs behind
// a released Gate, and realises the profile once the driver is back; the
// record of the upgrade marks its GPUs as lost partitions.
func TestDriverUpgradeAcrossAnAgentRestart(t *testing.T) {
	h, _, f := onBalanced(t)
	onGate(h)
	want := layout(h.gpus())
	h.upgrade(carvev1.DriverPodRestartRequired)
	h.reconcile(f, nil, "balanced")
	if err := h.m.UnloadDriver(); err != nil {
		t.Fatal(err)
	}

	h.r = h.newReconciler() // the agent restarts, without a driver
	g := partition.NewReleasedGate(h.m)
	h.r.Lib, h.r.Driver = g, g
	checkAway(t, h, g, h.reconcile(f, nil, "balanced"), "pod-restart-required")

	if err := h.m.LoadDriver(); err != nil {
		t.Fatal(err)
	}
	h.upgrade(carvev1.DriverUpgradeDone)
	res := h.reconcile(f, nil, "balanced")
	if res.State != carvev1.StateSuccess || layout(h.gpus()) != want {
		t.Fatalf("driver back after a restart: state %s (%v), layout %s; want success with %s", res.State, res.Err, layout(h.gpus()), want)
	}
	for _, gr := range res.Annotation.GPUs {
		if gr.NotAdvertised != "" {
			t.Errorf("record GPU %d: notAdvertised %q after the profile is realised again", gr.Index, gr.NotAdvertised)
		}
	}
}

// A held node steps aside too; with the driver back it changes nothing
// while held, and its GPUs, which lost their instances, advertise nothing
// until the hold is removed.
func TestDriverUpgradeOnAHeldNode(t *testing.T) {
	h, _, f := onBalanced(t)
	g := onGate(h)
	want := layout(h.gpus())
	h.hold(true)
	h.upgrade(carvev1.DriverPodRestartRequired)
	checkAway(t, h, g, h.reconcile(f, nil, "balanced"), "pod-restart-required")
	if err := h.m.UnloadDriver(); err != nil {
		t.Fatalf("unload on a held node: %v", err)
	}
	if err := h.m.LoadDriver(); err != nil {
		t.Fatal(err)
	}
	h.upgrade(carvev1.DriverUpgradeDone)
	res := h.reconcile(f, nil, "balanced")
	if res.State != carvev1.StateHeld || len(h.mutations()) != 0 || len(h.adv.counts()) != 0 {
		t.Fatalf("held, driver back: state %s, ops %v, advertised %v; want held, none, nothing", res.State, h.mutations(), h.adv.counts())
	}
	h.hold(false)
	if res = h.reconcile(f, nil, "balanced"); res.State != carvev1.StateSuccess || layout(h.gpus()) != want || len(h.adv.counts()) == 0 {
		t.Fatalf("hold removed: state %s (%v), layout %s, advertised %v; want success with %s", res.State, res.Err, layout(h.gpus()), h.adv.counts(), want)
	}
}
