package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	carvev1 "github.com/carve-dev/carve/api/v1"
)

// A state directory that cannot take a checkpoint (a file in its way)
// fails the pass before any of the change happens: no rollout slot asked
// for, no device withdrawn, no NVML call, the devices as they were; once
// the directory is usable the change runs.
func TestReconcileStateDirCheckedFirst(t *testing.T) {
	h := newHarness(t, "h100-80gb*1")
	ro := &fakeRollout{grant: true}
	h.r.Rollout = ro
	f := h.parse(testProfiles)
	h.reconcile(f, nil, "balanced")
	before := h.adv.counts()
	h.m.ResetOpLog()
	ro.calls = nil
	h.adv.withdrawn = nil

	blocker := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h.r.Checkpoints = &Checkpoints{Dir: filepath.Join(blocker, "state")}
	res := h.reconcile(f, nil, "small")
	if res.State != carvev1.StateFailed || res.Err == nil || !strings.Contains(res.Err.Error(), "state directory "+filepath.Join(blocker, "state")) {
		t.Fatalf("state %s, err %v; want failed naming the state directory", res.State, res.Err)
	}
	if len(ro.calls) != 0 || len(h.adv.withdrawn) != 0 || len(h.mutations()) != 0 {
		t.Errorf("rollout calls %v, withdrawn %v, NVML %v; want none", ro.calls, h.adv.withdrawn, h.mutations())
	}
	if diff := cmp.Diff(before, h.adv.counts()); diff != "" {
		t.Errorf("advertised devices changed (-before +after):\n%s", diff)
	}
	if !hasEvent(res.Events, carvev1.ReasonApplyFailed, true) || res.Requeue.IsZero() {
		t.Errorf("events %v, requeue %s; want a Warning ApplyFailed and a retry", reasons(res.Events), res.Requeue)
	}

	h.r.Checkpoints = &Checkpoints{Dir: t.TempDir()}
	if res := h.reconcile(f, nil, "small"); res.State != carvev1.StateSuccess || len(h.mutations()) == 0 {
		t.Fatalf("state %s after the directory came back, %d ops", res.State, len(h.mutations()))
	}
}
