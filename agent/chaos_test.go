package agent

// The agent package's chaos runs (`make chaos` runs them in full, `make
// test` in a short mode; internal/chaos): the reference suite of geometry
// transitions (internal/transitions) with an NVML call failing at every
// operation of each apply, and with the agent killed after every
// operation; each case asserts that nothing was lost and that the node
// converges to exactly what an uninterrupted apply gives, and is recorded
// for docs/reliability.md. The state directory cases are in
// chaos_statedir_test.go.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/internal/chaos"
	"github.com/carve-dev/carve/internal/transitions"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
)

// errNVML is the error the injected faults return: an NVML error carve
// has no sentinel for, as a driver fault would be.
var errNVML = errors.New("NVML_ERROR_UNKNOWN (injected)")

// suiteCase is a transition of the reference suite on the harness, with
// what a clean, uninterrupted apply of it does.
type suiteCase struct {
	tr   transitions.Transition
	file *configs.File
	// want and wantRes are the layout and the advertised resources a
	// clean apply reaches.
	want    string
	wantRes map[string]int
	// ops are the clean apply's NVML calls, in order.
	ops []sim.Op
	// kept are the instances (instanceKeyOf) the clean apply leaves as
	// they are: both geometries hold them.
	kept []string
	// known are the instances of either geometry.
	known map[string]bool
}

// newSuiteCase runs tr cleanly on a harness of its own and notes what the
// apply did.
func newSuiteCase(t *testing.T, tr transitions.Transition) suiteCase {
	t.Helper()
	h := newHarness(t, tr.Machine)
	sc := suiteCase{tr: tr, file: h.parse(transitions.Profiles(tr.Model)), known: map[string]bool{}}
	h.realise(sc.file, tr.From)
	before := instanceUUIDs(h.gpus())
	h.m.ResetOpLog()
	res := h.realise(sc.file, tr.To)
	after := instanceUUIDs(h.gpus())
	sc.want, sc.wantRes, sc.ops = layout(h.gpus()), h.adv.counts(), h.mutations()
	if len(sc.ops) != res.OpsApplied {
		t.Fatalf("%s: %d NVML calls for %d ops; the chaos runs want one each", tr.Name(), len(sc.ops), res.OpsApplied)
	}
	for k, uuid := range before {
		sc.known[k] = true
		if after[k] == uuid {
			sc.kept = append(sc.kept, k)
		}
	}
	for k := range after {
		sc.known[k] = true
	}
	slices.Sort(sc.kept)
	return sc
}

// start returns a harness at the transition's starting point, its op log
// empty, and the instances it holds there (instanceKey -> UUID).
func (sc suiteCase) start(t *testing.T) (*harness, map[string]string) {
	t.Helper()
	h := newHarness(t, sc.tr.Machine)
	h.realise(sc.file, sc.tr.From)
	h.m.ResetOpLog()
	return h, instanceUUIDs(h.gpus())
}

// realise reconciles to profile and fails the test unless it succeeds.
func (h *harness) realise(f *configs.File, profile string) Result {
	h.t.Helper()
	res := h.reconcile(f, nil, profile)
	if res.State != carvev1.StateSuccess {
		h.t.Fatalf("realise %s: state %s: %v", profile, res.State, res.Err)
	}
	return res
}

// instanceKeyOf names a MIG instance by GPU, profile and placement, e.g.
// "GPU 1 3g.40gb@4:4".
func instanceKeyOf(gpu int, in partition.Instance) string {
	return fmt.Sprintf("GPU %d %s@%s", gpu, in.Profile, in.Placement)
}

// instanceUUIDs maps every MIG instance of the GPUs to its MIG device UUID
// ("" for an incomplete one).
func instanceUUIDs(gpus []partition.GPU) map[string]string {
	out := map[string]string{}
	for _, g := range gpus {
		for _, in := range g.Instances {
			out[instanceKeyOf(g.Index, in)] = in.UUID()
		}
	}
	return out
}

// chaosCheck collects what one chaos case found: what was lost (an
// instance both geometries hold destroyed or re-made, an orphan instance,
// the checkpoint) and what else went wrong (no convergence, a wrong
// state). Each finding also fails the test.
type chaosCheck struct {
	t            *testing.T
	lost, failed []string
}

func (c *chaosCheck) lose(format string, args ...any) {
	c.t.Helper()
	msg := fmt.Sprintf(format, args...)
	c.t.Error("lost: " + msg)
	c.lost = append(c.lost, msg)
}

func (c *chaosCheck) fail(format string, args ...any) {
	c.t.Helper()
	msg := fmt.Sprintf(format, args...)
	c.t.Error(msg)
	c.failed = append(c.failed, msg)
}

// chaosRecorder returns the Recorder of a chaos run (CARVE_CHAOS_OUT),
// with what the run checks in its scenario described.
func chaosRecorder(t *testing.T, name, scenario, checked string) *chaos.Recorder {
	t.Helper()
	rec := chaos.NewRecorder(name)
	if err := rec.Describe(scenario, checked); err != nil {
		t.Fatal(err)
	}
	return rec
}

// record adds the case's Record.
func (c *chaosCheck) record(rec *chaos.Recorder, r chaos.Record) {
	c.t.Helper()
	r.Survived = len(c.lost)+len(c.failed) == 0
	r.Lost = strings.Join(c.lost, "; ")
	if !r.Survived && r.Detail == "" {
		r.Detail = strings.Join(slices.Concat(c.lost, c.failed), "; ")
	}
	if err := rec.Add(r); err != nil {
		c.t.Error(err)
	}
}

// nothingLost checks the GPUs at a stage of a case: the instances both
// geometries hold are there with the UUIDs they had before, and no
// instance is in neither geometry.
func (c *chaosCheck) nothingLost(sc suiteCase, before map[string]string, gpus []partition.GPU, stage string) {
	c.t.Helper()
	now := instanceUUIDs(gpus)
	for _, k := range sc.kept {
		if now[k] != before[k] {
			c.lose("%s: instance %s (%s), which both geometries hold, is now %q", stage, k, before[k], now[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(now)) {
		if !sc.known[k] {
			c.lose("%s: orphan instance %s, in neither geometry", stage, k)
		}
	}
}

// checkpoint checks the apply checkpoint in dir: the one of profile with
// done ops done (any of them), or none when done is nil.
func (c *chaosCheck) checkpoint(dir, profile string, done ...int) {
	c.t.Helper()
	cp, err := (&Checkpoints{Dir: dir}).Load()
	switch {
	case err != nil:
		c.lose("checkpoint unreadable: %v", err)
	case cp == nil && len(done) > 0:
		c.lose("no checkpoint of the interrupted apply")
	case cp != nil && len(done) == 0:
		c.fail("checkpoint of %s (%d ops done) left after converging", cp.Profile, cp.OpsDone())
	case cp != nil && (cp.Profile != profile || !slices.Contains(done, cp.OpsDone())):
		c.fail("checkpoint of %s with %d ops done, want %s with %v", cp.Profile, cp.OpsDone(), profile, done)
	}
}

// converged checks a pass that should have finished the transition: state
// success, exactly the clean apply's layout and resources, nothing lost,
// no checkpoint.
func (c *chaosCheck) converged(h *harness, sc suiteCase, before map[string]string, res Result) {
	c.t.Helper()
	if res.State != carvev1.StateSuccess || res.Labels[carvev1.LabelApplied] != sc.tr.To {
		c.fail("after the fault: state %s, applied %q, want success %s: %v", res.State, res.Labels[carvev1.LabelApplied], sc.tr.To, res.Err)
	}
	gpus := h.gpus()
	if got := layout(gpus); got != sc.want {
		c.fail("after the fault: layout %s, want a clean apply's %s", got, sc.want)
	}
	if diff := cmp.Diff(sc.wantRes, h.adv.counts()); diff != "" {
		c.fail("after the fault: advertised differs from a clean apply's (-clean +got):\n%s", diff)
	}
	c.nothingLost(sc, before, gpus, "after converging")
	c.checkpoint(h.dir, sc.tr.To)
}

// opNames are the calls of ops as "GPU n Call", for comparing what two
// applies did.
func opNames(ops []sim.Op) []string {
	out := make([]string, len(ops))
	for i, op := range ops {
		out[i] = fmt.Sprintf("GPU %d %s", op.GPU, op.Call)
	}
	return out
}

// opsToTry are the ops (1-based) of an apply of n ops that a chaos run
// tries, on every transition of the suite: all of them in full mode; the
// first, one in the middle and the last in short mode (make test).
func opsToTry(n int) []int {
	if chaos.Full() || n <= 3 {
		var all []int
		for k := 1; k <= n; k++ {
			all = append(all, k)
		}
		return all
	}
	return []int{1, (n + 1) / 2, n}
}

// Scenario names and what each checks, as docs/reliability.md shows them.
const (
	scenarioNVMLWrite = "NVML failure at every operation (agent package)"
	checkedNVMLWrite  = "For each transition of carve's reference suite of repartitions and each operation k of its apply, " +
		"the NVML call of operation k fails once (the simulated GPUs fail it on request). The pass must end in state failed " +
		"with a Warning ApplyFailed Event and a retry asked for, having done exactly the k-1 operations before it; the instances " +
		"both geometries hold must keep their UUIDs and stay advertised, no instance may be in neither geometry, and the " +
		"checkpoint must record k-1 operations. The next pass must converge to exactly the layout and resources of an " +
		"uninterrupted apply, making only the calls left (no instance destroyed and re-made), and remove the checkpoint."
	scenarioNVMLRead = "NVML read failure during an apply (agent package)"
	checkedNVMLRead  = "As in the NVML failure at every operation, but the call that fails once is a read: GPUInstances, the agent's check of the instance " +
		"an operation k destroys or completes (the pass must end failed after k-1 operations, without making call k), and " +
		"DeviceCount, the inventory read after the last operation (the pass must return an error, which the agent " +
		"retries with its backoff, the checkpoint recording every operation). Nothing may be lost, and the next pass must " +
		"converge to exactly an uninterrupted apply's layout with only the calls left."
	scenarioCrash = "Agent killed after every operation (agent package)"
	checkedCrash  = "For each transition of the suite and each operation k, the apply stops right after operation k is done and " +
		"checkpointed, as if the agent were killed there, and a restarted agent starts from the checkpoint " +
		"and the node record written before the apply. The checkpoint must record k operations; the restarted agent must " +
		"report ResumingApply, make exactly the calls an uninterrupted apply makes after its k-th, converge to its layout and " +
		"resources, keep the instances both geometries hold, and remove the checkpoint."
)

// TestChaosNVMLFailureAtEveryOp fails the NVML call of each operation of
// each transition of the reference suite once; see checkedNVMLWrite.
func TestChaosNVMLFailureAtEveryOp(t *testing.T) {
	rec := chaosRecorder(t, "agent-1-nvml", scenarioNVMLWrite, checkedNVMLWrite)
	for _, tr := range transitions.Suite() {
		t.Run(tr.Name(), func(t *testing.T) {
			sc := newSuiteCase(t, tr)
			if len(sc.ops) == 0 {
				checkNoOpTransition(t, sc, rec)
				return
			}
			for _, k := range opsToTry(len(sc.ops)) {
				t.Run(fmt.Sprintf("op-%d", k), func(t *testing.T) { nvmlWriteFault(t, sc, k, rec) })
			}
		})
	}
}

// checkNoOpTransition runs a transition that makes no NVML call with every
// mutating call failing: it must succeed without one.
func checkNoOpTransition(t *testing.T, sc suiteCase, rec *chaos.Recorder) {
	t.Helper()
	h, before := sc.start(t)
	for _, call := range []string{"SetMIGMode", "Reset", "CreateGPUInstance", "DestroyGPUInstance", "CreateComputeInstance", "DestroyComputeInstance"} {
		if err := h.m.InjectFault(sim.Fault{Call: call, GPU: -1, Err: errNVML}); err != nil {
			t.Fatal(err)
		}
	}
	c := &chaosCheck{t: t}
	c.converged(h, sc, before, h.reconcile(sc.file, nil, sc.tr.To))
	if ops := h.mutations(); len(ops) != 0 {
		c.fail("NVML calls made: %v", ops)
	}
	c.record(rec, chaos.Record{Scenario: scenarioNVMLWrite, Case: sc.tr.Name() + ", no operation", Fault: "every mutating call fails"})
}

// injectBefore arranges for fault to be installed right before the k-th
// op of the next apply on h: once the apply's ops are about to run (k = 1)
// or op k-1 is done and checkpointed.
func injectBefore(h *harness, k int, fault sim.Fault) {
	h.t.Helper()
	inject := func() {
		if err := h.m.InjectFault(fault); err != nil {
			h.t.Error(err)
		}
	}
	if k == 1 {
		h.r.Hooks.BeforeApply = func(context.Context, string, []partition.GPUPlan) { inject() }
		return
	}
	n := 0
	h.r.Hooks.AfterOp = func(int, int, partition.Op) error {
		if n++; n == k-1 {
			inject()
		}
		return nil
	}
}

// clearFaults takes the injection hooks and the faults away and empties
// the op log: the fault is over.
func (h *harness) clearFaults() {
	h.r.Hooks = Hooks{}
	h.m.ClearFaults()
	h.m.ResetOpLog()
}

// nvmlWriteFault is one case of TestChaosNVMLFailureAtEveryOp: op k's
// NVML call fails once.
func nvmlWriteFault(t *testing.T, sc suiteCase, k int, rec *chaos.Recorder) {
	t.Helper()
	h, before := sc.start(t)
	op := sc.ops[k-1]
	injectBefore(h, k, sim.Fault{Call: op.Call, GPU: op.GPU, Err: errNVML, Times: 1})
	c := &chaosCheck{t: t}
	res := h.reconcile(sc.file, nil, sc.tr.To)
	if res.State != carvev1.StateFailed || !errors.Is(res.Err, errNVML) || !hasEvent(res.Events, carvev1.ReasonApplyFailed, true) {
		c.fail("state %s, events %v, err %v; want failed with a Warning %s for the injected fault", res.State, reasons(res.Events), res.Err, carvev1.ReasonApplyFailed)
	}
	if !res.Requeue.After(h.now) {
		c.fail("no retry asked for (requeue %v)", res.Requeue)
	}
	ops := h.mutations()
	if diff := cmp.Diff(opNames(sc.ops[:k]), opNames(ops)); diff != "" || ops[k-1].Err == nil || res.OpsApplied != k-1 {
		c.fail("NVML calls differ from a clean apply's first %d, the last failing (%d ops reported) (-clean +got):\n%s", k, res.OpsApplied, diff)
	}
	gpus := h.gpus()
	c.nothingLost(sc, before, gpus, "after the failure")
	c.checkpoint(h.dir, sc.tr.To, k-1)
	c.keptAdvertised(h, sc, before, func(int) bool { return true })

	h.clearFaults()
	h.now = res.Requeue
	c.converged(h, sc, before, h.reconcile(sc.file, nil, sc.tr.To))
	if diff := cmp.Diff(opNames(sc.ops[k-1:]), opNames(h.mutations())); diff != "" {
		c.fail("the retry's NVML calls differ from the rest of a clean apply (-clean +retry):\n%s", diff)
	}
	c.record(rec, chaos.Record{
		Scenario: scenarioNVMLWrite, Case: fmt.Sprintf("%s, op %d of %d", sc.tr.Name(), k, len(sc.ops)),
		Fault:  op.Call + " fails once",
		Detail: fmt.Sprintf("GPU %d %s failed; the retry made the %d calls left", op.GPU, op.Call, len(sc.ops)-k+1),
	})
}

// keptAdvertised checks that the instances both geometries hold, on the
// GPUs on says, are advertised.
func (c *chaosCheck) keptAdvertised(h *harness, sc suiteCase, before map[string]string, on func(gpu int) bool) {
	c.t.Helper()
	advertised := advertisedUUIDs(h)
	for _, gp := range h.gpus() {
		for _, in := range gp.Instances {
			key := instanceKeyOf(gp.Index, in)
			if on(gp.Index) && slices.Contains(sc.kept, key) && !advertised[before[key]] {
				c.lose("instance %s (%s), which both geometries hold, is not advertised", key, before[key])
			}
		}
	}
}

// advertisedUUIDs are the devices the harness's advertiser serves, by
// physical UUID.
func advertisedUUIDs(h *harness) map[string]bool {
	h.adv.mu.Lock()
	defer h.adv.mu.Unlock()
	out := map[string]bool{}
	for _, devs := range h.adv.current {
		for _, d := range devs {
			out[d.UUID] = true
		}
	}
	return out
}

// TestChaosNVMLReadFailureDuringApply fails a read once during the apply
// of each transition: the applier's check of the instance an operation
// concerns (GPUInstances), at each operation that reads it, and the
// inventory read after the last operation (DeviceCount); see
// checkedNVMLRead.
func TestChaosNVMLReadFailureDuringApply(t *testing.T) {
	rec := chaosRecorder(t, "agent-2-nvml-read", scenarioNVMLRead, checkedNVMLRead)
	reads := []string{"DestroyComputeInstance", "DestroyGPUInstance", "CreateComputeInstance"}
	for _, tr := range transitions.Suite() {
		t.Run(tr.Name(), func(t *testing.T) {
			sc := newSuiteCase(t, tr)
			if len(sc.ops) == 0 {
				t.Skip("no apply, nothing read during one") // checkNoOpTransition covers it
			}
			for _, k := range opsToTry(len(sc.ops)) {
				if op := sc.ops[k-1]; slices.Contains(reads, op.Call) {
					fault := sim.Fault{Call: "GPUInstances", GPU: op.GPU, Err: errNVML, Times: 1}
					t.Run(fmt.Sprintf("op-%d", k), func(t *testing.T) { nvmlReadFault(t, sc, k, fault, rec) })
				}
			}
			fault := sim.Fault{Call: "DeviceCount", GPU: -1, Err: errNVML, Times: 1}
			t.Run("after-the-last-op", func(t *testing.T) { nvmlReadFault(t, sc, len(sc.ops)+1, fault, rec) })
		})
	}
}

// nvmlReadFault is one case of TestChaosNVMLReadFailureDuringApply: the
// read fault is installed before op k (after the last one for k = ops+1).
// A failed check of op k ends the pass failed after k-1 ops; a failed
// inventory read after the apply ends it with an error, all ops done.
func nvmlReadFault(t *testing.T, sc suiteCase, k int, fault sim.Fault, rec *chaos.Recorder) {
	t.Helper()
	h, before := sc.start(t)
	injectBefore(h, k, fault)
	c := &chaosCheck{t: t}
	h.labels[carvev1.LabelProfile] = sc.tr.To
	res, err := h.r.Reconcile(context.Background(), Input{Config: sc.file, Labels: h.labels, Now: h.now, Previous: h.prev})
	after := k > len(sc.ops)
	switch {
	case after && !errors.Is(err, errNVML):
		c.fail("Reconcile: %v, want an error for the injected fault", err)
	case !after && err != nil:
		c.fail("Reconcile: %v, want a failed pass", err)
	case !after:
		h.record(res)
		if res.State != carvev1.StateFailed || !errors.Is(res.Err, errNVML) || !hasEvent(res.Events, carvev1.ReasonApplyFailed, true) {
			c.fail("state %s, events %v, err %v; want failed with a Warning %s for the injected fault", res.State, reasons(res.Events), res.Err, carvev1.ReasonApplyFailed)
		}
	}
	if diff := cmp.Diff(opNames(sc.ops[:k-1]), opNames(h.mutations())); diff != "" {
		c.fail("NVML calls differ from a clean apply's first %d (-clean +got):\n%s", k-1, diff)
	}
	c.nothingLost(sc, before, h.gpus(), "after the failure")
	c.checkpoint(h.dir, sc.tr.To, k-1)

	h.clearFaults()
	h.now = h.now.Add(MaxRetryBackoff)
	c.converged(h, sc, before, h.reconcile(sc.file, nil, sc.tr.To))
	if diff := cmp.Diff(opNames(sc.ops[k-1:]), opNames(h.mutations())); diff != "" {
		c.fail("the retry's NVML calls differ from the rest of a clean apply (-clean +retry):\n%s", diff)
	}
	what, outcome := fmt.Sprintf("before op %d of %d", k, len(sc.ops)), "the pass ended failed"
	if after {
		what, outcome = "after the last op", "the pass returned an error (retried with backoff)"
	}
	c.record(rec, chaos.Record{
		Scenario: scenarioNVMLRead, Case: sc.tr.Name() + ", " + what,
		Fault:  fault.Call + " fails once",
		Detail: fmt.Sprintf("%s after %d ops; the retry made the %d calls left", outcome, k-1, len(sc.ops)-k+1),
	})
}

// TestChaosCrashAfterEveryOp stops the apply of each transition of the
// reference suite right after each of its operations, as a kill there,
// and restarts the agent; see checkedCrash.
func TestChaosCrashAfterEveryOp(t *testing.T) {
	rec := chaosRecorder(t, "agent-3-crash", scenarioCrash, checkedCrash)
	for _, tr := range transitions.Suite() {
		t.Run(tr.Name(), func(t *testing.T) {
			sc := newSuiteCase(t, tr)
			for _, k := range opsToTry(len(sc.ops)) {
				t.Run(fmt.Sprintf("after-op-%d", k), func(t *testing.T) { crashAfter(t, sc, k, rec) })
			}
		})
	}
}

// crashAfter is one case of TestChaosCrashAfterEveryOp.
func crashAfter(t *testing.T, sc suiteCase, k int, rec *chaos.Recorder) {
	t.Helper()
	h, before := sc.start(t)
	// A killed agent writes nothing to the Node after the apply began.
	prevRecord, prevLabels := h.prev, maps.Clone(h.labels)
	n := 0
	h.r.Hooks.AfterOp = func(int, int, partition.Op) error {
		if n++; n == k {
			return errCrash
		}
		return nil
	}
	c := &chaosCheck{t: t}
	h.reconcile(sc.file, nil, sc.tr.To)
	if diff := cmp.Diff(opNames(sc.ops[:k]), opNames(h.mutations())); diff != "" {
		c.fail("NVML calls before the kill differ from a clean apply's first %d (-clean +got):\n%s", k, diff)
	}
	c.checkpoint(h.dir, sc.tr.To, k)
	c.nothingLost(sc, before, h.gpus(), "after the kill")

	h.prev, h.labels = prevRecord, prevLabels
	h.r = h.newReconciler()
	h.m.ResetOpLog()
	res := h.reconcile(sc.file, nil, sc.tr.To)
	if !hasEvent(res.Events, carvev1.ReasonResumingApply, false) {
		c.fail("events %v, want %s", reasons(res.Events), carvev1.ReasonResumingApply)
	}
	c.converged(h, sc, before, res)
	if diff := cmp.Diff(opNames(sc.ops[k:]), opNames(h.mutations())); diff != "" {
		c.fail("the restarted agent's NVML calls differ from the rest of a clean apply (-clean +restart):\n%s", diff)
	}
	c.record(rec, chaos.Record{
		Scenario: scenarioCrash, Case: fmt.Sprintf("%s, after op %d of %d", sc.tr.Name(), k, len(sc.ops)),
		Fault:  "killed after " + sc.ops[k-1].Call,
		Detail: fmt.Sprintf("the restart made the %d calls left", len(sc.ops)-k),
	})
}
