package agent

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/internal/chaos"
	"github.com/carve-dev/carve/internal/transitions"
	"github.com/carve-dev/carve/partition"
)

const (
	scenarioStateDir = "State directory unusable (agent package)"
	checkedStateDir  = "The apply checkpoint's directory (--state-dir) cannot be written, in the ways an unprivileged test can make: " +
		"a file where the directory should be, a file where its parent should be, a read-only directory (not as root) holding " +
		"the checkpoint of an interrupted apply. The pass must end in state failed with a Warning ApplyFailed Event and an error " +
		"naming the directory, without an NVML call or the applying state (no apply starts), the devices advertised as before " +
		"at the end of the pass (those the change removes are withdrawn from the kubelet before the checkpoint is tried, and " +
		"advertised again in the same pass) and a checkpoint already there unchanged; once the directory is usable again the next pass must converge to exactly " +
		"an uninterrupted apply's layout. And the directory replaced by a file in the middle of an apply: the apply stops at " +
		"the first operation it cannot checkpoint, the checkpoint intact, and converges once the directory is back."
)

// stateDirCase makes a harness's state directory unusable and usable again.
type stateDirCase struct {
	name string
	// root says whether the case works as root (which ignores modes).
	root bool
	// interrupted starts from an apply killed after its first op, whose
	// checkpoint the directory holds.
	interrupted bool
	// breakDir makes dir unusable and returns the function that repairs
	// it.
	breakDir func(t *testing.T, dir string) (repair func())
}

// stateDirCases are the ways an unprivileged test can make the state
// directory unusable; test/e2e/chaos_statedir_test.go adds a read-only
// mount and a full file system, as root.
func stateDirCases() []stateDirCase {
	return []stateDirCase{
		{name: "a file where the directory should be", root: true, breakDir: func(t *testing.T, dir string) func() {
			t.Helper()
			mustRemoveAll(t, dir)
			mustWrite(t, dir, nil)
			return func() { mustRemoveAll(t, dir) }
		}},
		{name: "a file where its parent should be", root: true, breakDir: func(t *testing.T, dir string) func() {
			t.Helper()
			parent := filepath.Dir(dir)
			aside := parent + ".aside"
			if err := os.Rename(parent, aside); err != nil {
				t.Fatal(err)
			}
			mustWrite(t, parent, nil)
			return func() {
				mustRemoveAll(t, parent)
				if err := os.Rename(aside, parent); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{name: "read-only, holding an interrupted apply's checkpoint", interrupted: true, breakDir: func(t *testing.T, dir string) func() {
			t.Helper()
			if err := os.Chmod(dir, 0o500); err != nil {
				t.Fatal(err)
			}
			return func() {
				if err := os.Chmod(dir, 0o700); err != nil {
					t.Fatal(err)
				}
			}
		}},
	}
}

func mustWrite(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func mustRemoveAll(t *testing.T, path string) {
	t.Helper()
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
}

// stateDirTransition is the change the state directory cases make: it
// destroys instances, makes others, and keeps some.
func stateDirTransition(t *testing.T) transitions.Transition {
	t.Helper()
	for _, tr := range transitions.Suite() {
		if tr.Name() == "H100-80GB:half-plus->balanced" {
			return tr
		}
	}
	t.Fatal("transition H100-80GB:half-plus->balanced not in the suite")
	return transitions.Transition{}
}

// TestChaosStateDirUnusable: no apply starts while the state directory
// cannot be written; see checkedStateDir.
func TestChaosStateDirUnusable(t *testing.T) {
	rec := chaosRecorder(t, "agent-4-statedir", scenarioStateDir, checkedStateDir)
	sc := newSuiteCase(t, stateDirTransition(t))
	for _, tt := range stateDirCases() {
		t.Run(tt.name, func(t *testing.T) {
			if !tt.root && os.Geteuid() == 0 {
				t.Skip("root writes to a read-only directory; test/e2e/chaos_statedir_test.go mounts one read-only")
			}
			stateDirUnusable(t, sc, tt, rec)
		})
	}
}

// stateDirUnusable is one case of TestChaosStateDirUnusable.
func stateDirUnusable(t *testing.T, sc suiteCase, tt stateDirCase, rec *chaos.Recorder) {
	t.Helper()
	h, before := sc.start(t)
	h.dir = filepath.Join(h.dir, "state")
	h.r.Checkpoints = &Checkpoints{Dir: h.dir}
	var checkpoint []byte
	if tt.interrupted {
		checkpoint = interruptAfterFirstOp(h, sc)
	}
	advertised := h.adv.counts()
	h.m.ResetOpLog()
	h.adv.withdrawn = nil
	repair := tt.breakDir(t, h.dir)
	applying := false
	h.r.Hooks.BeforeApply = func(context.Context, string, []partition.GPUPlan) { applying = true }

	c := &chaosCheck{t: t}
	res := h.reconcile(sc.file, nil, sc.tr.To)
	if res.State != carvev1.StateFailed || res.Err == nil || !strings.Contains(res.Err.Error(), "state directory "+h.dir) {
		c.fail("state %s, err %v; want failed with an error naming the state directory %s", res.State, res.Err, h.dir)
	}
	if !slices.ContainsFunc(res.Events, func(e Event) bool {
		return e.Reason == carvev1.ReasonApplyFailed && e.Warning && strings.Contains(e.Message, h.dir)
	}) {
		c.fail("events %v, want a Warning %s naming %s", res.Events, carvev1.ReasonApplyFailed, h.dir)
	}
	if ops := h.mutations(); len(ops) != 0 || applying {
		c.fail("an apply started (applying state recorded: %v) with the state directory unusable: %v", applying, ops)
	}
	if tt.interrupted {
		// The GPU the interrupted apply was changing advertises nothing
		// until it is realised, as after any restart mid-apply
		// (startup.go); the other GPUs keep their devices.
		c.keptAdvertised(h, sc, before, func(gpu int) bool { return gpu != sc.ops[0].GPU })
	} else if diff := cmp.Diff(advertised, h.adv.counts()); diff != "" {
		c.lose("advertised devices changed (-before +after):\n%s", diff)
	}
	repair()
	if tt.interrupted {
		if got, err := os.ReadFile(filepath.Join(h.dir, intentFile)); err != nil || !bytes.Equal(got, checkpoint) {
			c.lose("the interrupted apply's checkpoint changed (err %v):\n%s\nwas\n%s", err, got, checkpoint)
		}
	}
	h.now = res.Requeue
	c.converged(h, sc, before, h.reconcile(sc.file, nil, sc.tr.To))
	withdrawn := 0
	for _, ids := range h.adv.withdrawn {
		withdrawn += len(ids)
	}
	c.record(rec, chaos.Record{Scenario: scenarioStateDir, Case: sc.tr.Name(), Fault: tt.name,
		Detail: fmt.Sprintf("%d devices withdrawn before the checkpoint failed, advertised again in the same pass; the pass said: %s", withdrawn, errString(res.Err))})
}

// interruptAfterFirstOp applies the transition on h until its first op is
// done, as a kill there, restarts the reconciler, and returns the
// checkpoint it left.
func interruptAfterFirstOp(h *harness, sc suiteCase) []byte {
	h.t.Helper()
	h.r.Hooks.AfterOp = func(int, int, partition.Op) error { return errCrash }
	prevRecord, prevLabels := h.prev, h.labels
	h.labels = maps.Clone(h.labels)
	h.reconcile(sc.file, nil, sc.tr.To)
	h.prev, h.labels = prevRecord, prevLabels
	h.r = h.newReconciler()
	h.r.Checkpoints = &Checkpoints{Dir: h.dir}
	data, err := os.ReadFile(filepath.Join(h.dir, intentFile))
	if err != nil {
		h.t.Fatalf("no checkpoint after the kill: %v", err)
	}
	return data
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

// TestChaosStateDirLostMidApply replaces the state directory by a file
// after each op k of an apply: the apply stops at op k+1, done but not
// checkpointed, the checkpoint (moved aside with the directory) records k
// ops; with the directory back the next pass converges.
func TestChaosStateDirLostMidApply(t *testing.T) {
	rec := chaos.NewRecorder("agent-4-statedir")
	sc := newSuiteCase(t, stateDirTransition(t))
	for _, k := range opsToTry(len(sc.ops) - 1) {
		t.Run(fmt.Sprintf("after-op-%d", k), func(t *testing.T) {
			h, before := sc.start(t)
			h.dir = filepath.Join(h.dir, "state")
			h.r.Checkpoints = &Checkpoints{Dir: h.dir}
			aside := h.dir + ".aside"
			n := 0
			h.r.Hooks.AfterOp = func(int, int, partition.Op) error {
				if n++; n == k {
					if err := os.Rename(h.dir, aside); err != nil {
						return err
					}
					return os.WriteFile(h.dir, nil, 0o600)
				}
				return nil
			}
			c := &chaosCheck{t: t}
			res := h.reconcile(sc.file, nil, sc.tr.To)
			if res.State != carvev1.StateFailed || !strings.Contains(errString(res.Err), "state directory "+h.dir) || len(h.mutations()) != k+1 {
				c.fail("state %s after %d NVML calls, err %v; want failed after %d, naming %s", res.State, len(h.mutations()), res.Err, k+1, h.dir)
			}
			c.nothingLost(sc, before, h.gpus(), "after the directory went")
			c.checkpoint(aside, sc.tr.To, k)
			mustRemoveAll(t, h.dir)
			if err := os.Rename(aside, h.dir); err != nil {
				t.Fatal(err)
			}
			h.clearFaults()
			h.now = res.Requeue
			c.converged(h, sc, before, h.reconcile(sc.file, nil, sc.tr.To))
			c.record(rec, chaos.Record{Scenario: scenarioStateDir, Case: fmt.Sprintf("%s, after op %d of %d", sc.tr.Name(), k, len(sc.ops)),
				Fault: "the directory replaced by a file mid-apply", Detail: "the pass said: " + errString(res.Err)})
		})
	}
}
