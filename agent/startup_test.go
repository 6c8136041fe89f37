package agent

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/timeslice"
)

// startupMaint is a daily maintenance window, 02:00-04:00 UTC; the
// harness's clock says 12:00, outside it.
const startupMaint = "maintenance:\n  - schedule: \"0 2 * * *\"\n    duration: 2h\n"

var (
	// startupInside is within the maintenance window of the harness's day.
	startupInside = time.Date(2026, 3, 2, 3, 0, 0, 0, time.UTC)
	// startupNextWindow is when the next window opens after 12:00.
	startupNextWindow = time.Date(2026, 3, 3, 2, 0, 0, 0, time.UTC)
)

// advertisedGPUs returns the indices of the GPUs with a device in res.
func advertisedGPUs(res timeslice.Resources) []int {
	var out []int
	for _, devs := range res {
		for _, d := range devs {
			if !slices.Contains(out, d.GPU) {
				out = append(out, d.GPU)
			}
		}
	}
	slices.Sort(out)
	return out
}

// heldGPUs returns what the record says of the GPUs held back: index and
// notAdvertised.
func heldGPUs(rec carvev1.NodeRecord) map[int]string {
	out := map[int]string{}
	for _, g := range rec.GPUs {
		if g.NotAdvertised != "" {
			out[g.Index] = g.NotAdvertised
		}
	}
	return out
}

// partitionLost returns the message of the PartitionLost Warning among
// evs, "" when there is none.
func partitionLost(evs []Event) string {
	for _, e := range evs {
		if e.Reason == carvev1.ReasonPartitionLost && e.Warning {
			return e.Message
		}
	}
	return ""
}

// rebootedHarness realises balanced on two H100s inside the maintenance
// window, marks the volatile GPUs as losing their MIG mode on a reboot,
// reboots the machine and sets the clock to 12:00, outside the window. It
// returns what was advertised before the reboot.
func rebootedHarness(t *testing.T, volatile ...int) (*harness, map[string]int) {
	t.Helper()
	h := newHarness(t, "h100-80gb*2")
	h.now = startupInside
	f := h.parse(testProfiles + startupMaint)
	if res := h.reconcile(f, nil, "balanced"); res.State != carvev1.StateSuccess {
		t.Fatalf("setup: state %s: %v", res.State, res.Err)
	}
	before := h.adv.counts()
	for _, i := range volatile {
		if err := h.m.SetMIGModeVolatile(i, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.m.Reboot(); err != nil {
		t.Fatal(err)
	}
	h.now = time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	h.m.ResetOpLog()
	return h, before
}

// After a reboot a GPU whose partition is gone advertises nothing while
// the profile in force is not realised on it; GPUs that are rebuilt, or
// that carve no longer manages, are advertised.
func TestStartupAfterReboot(t *testing.T) {
	noDefault := strings.Replace(testProfiles, "defaultProfile: full\n", "", 1) + startupMaint
	tests := []struct {
		name string
		// volatile GPUs come back with MIG disabled.
		volatile []int
		// yaml is the profile file after the reboot ("" for the same);
		// cfgErr a parse error instead.
		yaml    string
		cfgErr  error
		profile string
		// sameProcess reconciles with the agent that ran before the
		// reboot (as after a reset by someone else), not a restarted one.
		sameProcess bool
		wantState   string
		// wantHeld are the GPUs held back, by the record's notAdvertised.
		wantHeld map[int]string
		// wantAdvertised are the GPUs with devices advertised.
		wantAdvertised []int
		// wantEvent are substrings of the PartitionLost Warning; none:
		// no such Event.
		wantEvent []string
	}{
		{
			name: "MIG mode kept: the instances are made again at once, window or not", profile: "balanced",
			wantState: carvev1.StateSuccess, wantHeld: map[int]string{}, wantAdvertised: []int{0, 1},
		},
		{
			name: "MIG mode lost: the change waits for a window and the whole GPU is not advertised", volatile: []int{0}, profile: "balanced",
			wantState: carvev1.StatePending, wantHeld: map[int]string{0: heldLost}, wantAdvertised: []int{1},
			wantEvent: []string{"no devices advertised until profile balanced is realised there", "GPU 0: lost the MIG instances the node record lists, as after a reboot"},
		},
		{
			name: "MIG mode lost on both, the same agent process", volatile: []int{0, 1}, profile: "balanced", sameProcess: true,
			wantState: carvev1.StatePending, wantHeld: map[int]string{0: heldLost, 1: heldLost},
			wantEvent: []string{"GPUs 0-1: lost the MIG instances"},
		},
		{
			name: "profile file rejected: the GPUs stay held back", volatile: []int{0}, cfgErr: errors.New("bad yaml"), profile: "balanced",
			wantState: carvev1.StateFailed, wantHeld: map[int]string{0: heldLost, 1: heldLost},
			wantEvent: []string{"until the profile in force is realised there", "GPUs 0-1: lost"},
		},
		{
			name: "profile unrealisable: the GPUs stay held back", volatile: []int{0}, profile: "odd",
			yaml:      testProfiles + "  odd:\n    - gpus: [5]\n      mig: {7g.80gb: 1}\n" + startupMaint,
			wantState: carvev1.StateFailed, wantHeld: map[int]string{0: heldLost, 1: heldLost},
			wantEvent: []string{"until profile odd is realised there", "GPUs 0-1: lost"},
		},
		{
			name: "no profile selects the node: advertised as they are", volatile: []int{0}, yaml: noDefault,
			wantState: carvev1.StateAdopted, wantHeld: map[int]string{}, wantAdvertised: []int{0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, _ := rebootedHarness(t, tt.volatile...)
			if !tt.sameProcess {
				h.r = h.newReconciler()
			}
			f := h.parse(testProfiles + startupMaint)
			if tt.yaml != "" {
				f = h.parse(tt.yaml)
			}
			if tt.cfgErr != nil {
				f = nil
			}
			res := h.reconcile(f, tt.cfgErr, tt.profile)
			if res.State != tt.wantState {
				t.Fatalf("state %s, want %s: %v (events %v)", res.State, tt.wantState, res.Err, reasons(res.Events))
			}
			if diff := cmp.Diff(tt.wantAdvertised, advertisedGPUs(res.Resources)); diff != "" {
				t.Errorf("GPUs advertised (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(res.Resources.Counts(), h.adv.counts()); diff != "" {
				t.Errorf("the kubelet was sent other devices than the result's (-result +sent):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantHeld, heldGPUs(res.Annotation)); diff != "" {
				t.Errorf("record's notAdvertised (-want +got):\n%s", diff)
			}
			msg := partitionLost(res.Events)
			if len(tt.wantEvent) == 0 && msg != "" {
				t.Errorf("unexpected PartitionLost Event %q", msg)
			}
			if len(tt.wantEvent) > 0 && msg == "" {
				t.Errorf("events %v, want a Warning %s", reasons(res.Events), carvev1.ReasonPartitionLost)
			}
			for _, want := range tt.wantEvent {
				if !strings.Contains(msg, want) {
					t.Errorf("PartitionLost message %q lacks %q", msg, want)
				}
			}
		})
	}
}

// The example of the task: after a reboot that lost GPU 0's MIG mode, the
// change waits for the maintenance window; GPU 0 advertises nothing, even
// across a restart of the agent, until the window opens and balanced is
// realised on it; then everything is advertised as before the reboot.
func TestStartupHeldUntilRealised(t *testing.T) {
	h, before := rebootedHarness(t, 0)
	f := h.parse(testProfiles + startupMaint)
	h.r = h.newReconciler()
	res := h.reconcile(f, nil, "balanced")
	if res.State != carvev1.StatePending || !res.Requeue.Equal(startupNextWindow) {
		t.Fatalf("state %s, requeue %v; want pending until %v", res.State, res.Requeue, startupNextWindow)
	}
	if got := advertisedGPUs(res.Resources); slices.Contains(got, 0) {
		t.Fatalf("GPU 0 advertised (%v) while its change waits: %v", res.Resources.Counts(), got)
	}
	if gpu0 := res.Annotation.GPUs[0]; gpu0.MIGMode != "disabled" || gpu0.Replicas != 0 || gpu0.NotAdvertised != heldLost {
		t.Fatalf("record of GPU 0 %+v, want MIG disabled, no replicas, notAdvertised %q", gpu0, heldLost)
	}

	// The agent restarts: the record no longer lists GPU 0's instances,
	// but says it is held back.
	h.now = h.now.Add(time.Hour)
	h.r = h.newReconciler()
	res = h.reconcile(f, nil, "balanced")
	if got := advertisedGPUs(res.Resources); res.State != carvev1.StatePending || slices.Contains(got, 0) {
		t.Fatalf("after a restart: state %s, GPUs advertised %v; want pending without GPU 0", res.State, got)
	}
	if got := heldGPUs(res.Annotation); got[0] != heldLost {
		t.Fatalf("after a restart: held %v, want GPU 0", got)
	}
	if partitionLost(res.Events) == "" {
		t.Errorf("after a restart: events %v, want %s", reasons(res.Events), carvev1.ReasonPartitionLost)
	}

	// The window opens: balanced is realised on GPU 0, which is advertised
	// again.
	h.now = res.Requeue
	res = h.reconcile(f, nil, "balanced")
	if res.State != carvev1.StateSuccess || res.Labels[carvev1.LabelApplied] != "balanced" {
		t.Fatalf("in the window: state %s applied %q: %v", res.State, res.Labels[carvev1.LabelApplied], res.Err)
	}
	if diff := cmp.Diff(before, h.adv.counts()); diff != "" {
		t.Errorf("advertised once realised, want as before the reboot (-before +now):\n%s", diff)
	}
	if diff := cmp.Diff([]int{0, 1}, advertisedGPUs(res.Resources)); diff != "" {
		t.Errorf("GPUs advertised once realised (-want +got):\n%s", diff)
	}
	if got := heldGPUs(res.Annotation); len(got) != 0 {
		t.Errorf("record still holds back %v", got)
	}
	if msg := partitionLost(res.Events); msg != "" {
		t.Errorf("PartitionLost %q once realised", msg)
	}
	// And it stays so.
	h.now = h.now.Add(time.Minute)
	if res := h.reconcile(f, nil, "balanced"); !slices.Equal(advertisedGPUs(res.Resources), []int{0, 1}) || len(res.Events) != 0 {
		t.Errorf("next pass: GPUs advertised %v, events %v", advertisedGPUs(res.Resources), res.Events)
	}
}

// An apply after a reboot that stops part way leaves some instances made:
// they are not advertised until the whole profile is realised.
func TestStartupPartialRebuildNotAdvertised(t *testing.T) {
	h, before := rebootedHarness(t)
	f := h.parse(testProfiles + startupMaint)
	h.r = h.newReconciler()
	// GPU 0's plan makes four GPU instances, then their compute
	// instances: stop after two of those.
	n := 0
	h.r.Hooks.AfterOp = func(int, int, partition.Op) error {
		if n++; n == 6 {
			return errCrash
		}
		return nil
	}
	res := h.reconcile(f, nil, "balanced")
	if res.State != carvev1.StateFailed {
		t.Fatalf("state %s, want failed: %v", res.State, res.Err)
	}
	g0 := h.gpus()[0]
	if complete := len(instancesOf(g0)); complete != 2 {
		t.Fatalf("GPU 0 has %d complete instances (%s), want 2", complete, layout(h.gpus()))
	}
	if got := advertisedGPUs(res.Resources); len(got) != 0 {
		t.Fatalf("GPUs %v advertised (%v) with their partition half made", got, res.Resources.Counts())
	}
	if diff := cmp.Diff(map[int]string{0: heldLost, 1: heldLost}, heldGPUs(res.Annotation)); diff != "" {
		t.Errorf("record's notAdvertised (-want +got):\n%s", diff)
	}
	h.r.Hooks.AfterOp = nil
	h.now = h.now.Add(time.Minute)
	res = h.reconcile(f, nil, "balanced")
	if res.State != carvev1.StateSuccess {
		t.Fatalf("retry: state %s: %v", res.State, res.Err)
	}
	if diff := cmp.Diff(before, h.adv.counts()); diff != "" {
		t.Errorf("advertised after the retry, want as before the reboot (-before +now):\n%s", diff)
	}
}

// A node without a record (a new node, or one whose annotation was lost)
// advertises a GPU only once it holds the profile in force's layout; so
// does a GPU the record does not list (a replaced one).
func TestStartupWithoutRecord(t *testing.T) {
	tests := []struct {
		name string
		// setup runs before the reconcile; the harness then forgets the
		// record unless keepRecord.
		setup      func(t *testing.T, h *harness)
		keepRecord bool
		profile    string
		cfgErr     error
		wantState  string
		wantHeld   map[int]string
		wantGPUs   []int
		wantOps    bool
		// wantRealised reconciles again in the window and wants every GPU
		// advertised.
		wantRealised bool
	}{
		{
			name: "MIG profile waits for the window: nothing advertised", profile: "balanced",
			wantState: carvev1.StatePending, wantHeld: map[int]string{0: heldNew, 1: heldNew}, wantRealised: true,
		},
		{
			name: "profile realised at once", profile: "shared-2",
			wantState: carvev1.StateSuccess, wantHeld: map[int]string{}, wantGPUs: []int{0, 1},
		},
		{
			name: "layout already the profile's: advertised without an op", profile: "balanced",
			setup: func(t *testing.T, h *harness) {
				t.Helper()
				h.now = startupInside
				if res := h.reconcile(h.parse(testProfiles+startupMaint), nil, "balanced"); res.State != carvev1.StateSuccess {
					t.Fatalf("setup: %s: %v", res.State, res.Err)
				}
				h.now = time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
			},
			wantState: carvev1.StateSuccess, wantHeld: map[int]string{}, wantGPUs: []int{0, 1},
		},
		{
			name: "profile file rejected: advertised as they are", cfgErr: errors.New("bad yaml"), profile: "balanced",
			wantState: carvev1.StateFailed, wantHeld: map[int]string{}, wantGPUs: []int{0, 1},
		},
		{
			name: "a GPU the record does not list", profile: "balanced", keepRecord: true,
			setup: func(t *testing.T, h *harness) {
				t.Helper()
				if res := h.reconcile(h.parse(testProfiles+startupMaint), nil, "full"); res.State != carvev1.StateSuccess {
					t.Fatalf("setup: %s: %v", res.State, res.Err)
				}
				h.prev.GPUs[1].UUID = "GPU-replaced"
			},
			// GPU 0 keeps the layout of the node's pending change; GPU 1 is
			// new to the record.
			wantState: carvev1.StatePending, wantHeld: map[int]string{1: heldNew}, wantGPUs: []int{0}, wantRealised: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, "h100-80gb*2")
			f := h.parse(testProfiles + startupMaint)
			if tt.setup != nil {
				tt.setup(t, h)
				h.r = h.newReconciler()
				if !tt.keepRecord {
					h.prev = nil
				}
			}
			h.m.ResetOpLog()
			if tt.cfgErr != nil {
				f = nil
			}
			res := h.reconcile(f, tt.cfgErr, tt.profile)
			if res.State != tt.wantState {
				t.Fatalf("state %s, want %s: %v", res.State, tt.wantState, res.Err)
			}
			if diff := cmp.Diff(tt.wantGPUs, advertisedGPUs(res.Resources)); diff != "" {
				t.Errorf("GPUs advertised (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantHeld, heldGPUs(res.Annotation)); diff != "" {
				t.Errorf("record's notAdvertised (-want +got):\n%s", diff)
			}
			msg := partitionLost(res.Events)
			if (len(tt.wantHeld) > 0) != (msg != "") {
				t.Errorf("PartitionLost Event %q, want one: %v", msg, len(tt.wantHeld) > 0)
			}
			if len(tt.wantHeld) > 0 && !strings.Contains(msg, "not yet partitioned, and unknown to the node record") {
				t.Errorf("PartitionLost message %q does not say the GPUs are new", msg)
			}
			if !tt.wantRealised {
				return
			}
			h.now = startupNextWindow
			res = h.reconcile(f, nil, tt.profile)
			if res.State != carvev1.StateSuccess {
				t.Fatalf("in the window: state %s: %v", res.State, res.Err)
			}
			if diff := cmp.Diff([]int{0, 1}, advertisedGPUs(res.Resources)); diff != "" {
				t.Errorf("in the window: GPUs advertised (-want +got):\n%s", diff)
			}
			if got := heldGPUs(res.Annotation); len(got) != 0 {
				t.Errorf("in the window: record still holds back %v", got)
			}
		})
	}
}

// An agent that restarts without a reboot finds the GPUs as its record
// lists them and advertises what they hold, as before; a node whose change
// is pending keeps advertising the old layout.
func TestStartupNothingLost(t *testing.T) {
	tests := []struct {
		name, profile string
		wantState     string
	}{
		{"nothing to change", "balanced", carvev1.StateSuccess},
		{"a disruptive change pending", "small", carvev1.StatePending},
		{"a change to whole GPUs pending", "full", carvev1.StatePending},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, "h100-80gb*2")
			h.now = startupInside
			f := h.parse(testProfiles + startupMaint)
			h.reconcile(f, nil, "balanced")
			before := h.adv.counts()
			h.now = time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
			h.r = h.newReconciler() // restart
			h.adv.current = nil
			h.m.ResetOpLog()
			res := h.reconcile(f, nil, tt.profile)
			if res.State != tt.wantState {
				t.Fatalf("state %s, want %s: %v", res.State, tt.wantState, res.Err)
			}
			if ops := h.mutations(); len(ops) != 0 {
				t.Fatalf("GPUs touched: %v", ops)
			}
			if diff := cmp.Diff(before, h.adv.counts()); diff != "" {
				t.Errorf("advertised after the restart, want as before (-before +after):\n%s", diff)
			}
			if got := heldGPUs(res.Annotation); len(got) != 0 {
				t.Errorf("record holds back %v", got)
			}
			if msg := partitionLost(res.Events); msg != "" {
				t.Errorf("PartitionLost %q without a loss", msg)
			}
		})
	}
}
