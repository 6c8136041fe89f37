package agent

import (
	"context"
	"errors"
	"strings"
	"testing"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/plugin"
)

// TestReconcileNamesWhoHoldsTheGPU: an op the GPU refuses because
// processes hold its device is reported, in the Event and the record's
// lastError alike, on one line with the processes NVML lists and the pods
// that hold the device by the kubelet's account.
func TestReconcileNamesWhoHoldsTheGPU(t *testing.T) {
	tests := []struct {
		name string
		from string
		to   string
		// hold makes the device busy just before the ops run (a pod that
		// started after the plan, or a process outside Kubernetes).
		hold       func(h *harness)
		wantState  string
		wantReason string
		wantEnd    string
	}{
		{
			name: "destroy refused, a pod that started since the plan", from: "balanced", to: "small",
			hold: func(h *harness) {
				uuid := h.migUUID(0, "3g.40gb")
				h.setProcesses(uuid, partition.Process{PID: 4300, Name: "tritonserver"}, partition.Process{PID: 4242, Name: "python3"})
				h.inUse.hold(uuid, "infer-7")
			},
			wantState: carvev1.StateFailed, wantReason: carvev1.ReasonApplyFailed,
			wantEnd: ": in use; held by pid 4242 (python3), pid 4300 (tritonserver); pods: default/infer-7",
		},
		{
			name: "reset refused, a process outside Kubernetes", from: "full", to: "balanced",
			hold: func(h *harness) {
				h.setProcesses(h.gpus()[0].UUID, partition.Process{PID: 17, Name: "dcgm-exporter"})
			},
			wantState: carvev1.StateRebootRequired, wantReason: carvev1.ReasonRebootRequired,
			wantEnd: ": in use; held by pid 17 (dcgm-exporter); no pod holds them by the kubelet's account",
		},
		{
			name: "the kubelet cannot say", from: "balanced", to: "small",
			hold: func(h *harness) {
				h.setProcesses(h.migUUID(0, "3g.40gb"), partition.Process{PID: 4242, Name: "python3"})
				h.inUse.mu.Lock()
				h.inUse.err = errors.New("pod resources: List: connection refused")
				h.inUse.mu.Unlock()
			},
			wantState: carvev1.StateFailed, wantReason: carvev1.ReasonApplyFailed,
			wantEnd: ": in use; held by pid 4242 (python3); pods: unknown (pod resources: List: connection refused)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, "h100-80gb*1")
			f := h.parse(testProfiles)
			h.reconcile(f, nil, tt.from)
			h.r.Hooks.BeforeApply = func(context.Context, string, []partition.GPUPlan) { tt.hold(h) }
			res := h.reconcile(f, nil, tt.to)
			if res.State != tt.wantState || !hasEvent(res.Events, tt.wantReason, true) {
				t.Fatalf("state %s events %v (%v), want %s with %s", res.State, reasons(res.Events), res.Err, tt.wantState, tt.wantReason)
			}
			if partition.InUseOf(res.Err) == nil || !errors.Is(res.Err, partition.ErrInUse) {
				t.Errorf("Err %v: no InUseError in its chain", res.Err)
			}
			for what, msg := range map[string]string{"Event": eventMessage(res.Events, tt.wantReason), "lastError": res.Annotation.LastError} {
				if !strings.HasSuffix(msg, tt.wantEnd) || strings.Contains(msg, "\n") {
					t.Errorf("%s\n %q\nwant one line ending in\n %q", what, msg, tt.wantEnd)
				}
			}
		})
	}
}

// TestPodNames: pods named once each, claims without a pod named as
// claims, and the list bounded.
func TestPodNames(t *testing.T) {
	as := []plugin.Assignment{
		{Namespace: "team-a", Pod: "infer-7", Container: "a"},
		{Namespace: "team-a", Pod: "infer-7", Container: "b"},
		{Namespace: "team-b", Resource: "resourceclaim/gpu-claim"},
	}
	if got, want := podNames(as), "team-a/infer-7, claim team-b/gpu-claim"; got != want {
		t.Errorf("podNames = %q, want %q", got, want)
	}
	for _, p := range []string{"p1", "p2", "p3", "p4", "p5", "p6", "p7"} {
		as = append(as, plugin.Assignment{Namespace: "ns", Pod: p})
	}
	if got, want := podNames(as), "team-a/infer-7, claim team-b/gpu-claim, ns/p1, ns/p2, ns/p3 and 4 more"; got != want {
		t.Errorf("podNames = %q, want %q", got, want)
	}
}

// setProcesses makes processes hold the GPU or MIG device uuid.
func (h *harness) setProcesses(uuid string, procs ...partition.Process) {
	h.t.Helper()
	if err := h.m.SetProcesses(uuid, procs); err != nil {
		h.t.Fatal(err)
	}
}

// eventMessage is the message of the first Event with the reason.
func eventMessage(evs []Event, reason string) string {
	for _, e := range evs {
		if e.Reason == reason {
			return e.Message
		}
	}
	return ""
}
