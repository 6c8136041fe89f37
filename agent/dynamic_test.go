package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	carvev1 "github.com/carve-dev/carve/api/v1"
)

// dynamicProfiles adds to testProfiles one whose GPU 1 is dynamic.
const dynamicProfiles = testProfiles + `  hybrid:
    - gpus: [0]
      mig: {1g.10gb: 7}
    - gpus: [1]
      dynamic: {profiles: [1g.10gb, 3g.40gb, 7g.80gb]}
`

// TestDynamicNeedsAdvertiseDRA: a profile with a dynamic GPU, on an agent
// that does not advertise through DRA, is unrealisable with that reason,
// naming the GPUs and the flag; nothing is touched, held or not.
func TestDynamicNeedsAdvertiseDRA(t *testing.T) {
	tests := []struct {
		name, advertise, mode string
		held                  bool
	}{
		{"device plugin by default", "", AdvertiseDevicePlugin, false},
		{"none", AdvertiseNone, AdvertiseNone, false},
		{"device plugin, held", AdvertiseDevicePlugin, AdvertiseDevicePlugin, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, "h100-80gb*2")
			h.r.Advertise = tt.advertise
			f := h.parse(dynamicProfiles)
			h.reconcile(f, nil, "balanced")
			before, beforeRes := layout(h.gpus()), h.adv.counts()
			h.m.ResetOpLog()
			if tt.held {
				h.labels[carvev1.LabelHold] = carvev1.HoldTrue
			}

			res := h.reconcile(f, nil, "hybrid")
			if ops := h.mutations(); len(ops) != 0 {
				t.Fatalf("GPUs touched: %v", ops)
			}
			if got := layout(h.gpus()); got != before {
				t.Fatalf("layout %s, want unchanged %s", got, before)
			}
			if diff := cmp.Diff(beforeRes, h.adv.counts()); diff != "" {
				t.Fatalf("advertised changed (-before +after):\n%s", diff)
			}
			if res.State != carvev1.StateFailed || res.Labels[carvev1.LabelApplied] != "balanced" {
				t.Fatalf("state %s applied %q, want failed and balanced kept", res.State, res.Labels[carvev1.LabelApplied])
			}
			want := "profile hybrid cannot be realised on this node, GPUs left as they are: GPU 1 is dynamic (MIG devices made on demand for DRA claims), which needs carve-agent --advertise dra; this agent runs --advertise " + tt.mode
			var got []string
			for _, e := range res.Events {
				if e.Reason == carvev1.ReasonUnrealisable && e.Warning {
					got = append(got, e.Message)
				}
			}
			if diff := cmp.Diff([]string{want}, got); diff != "" {
				t.Fatalf("%s Events (-want +got):\n%s", carvev1.ReasonUnrealisable, diff)
			}
			if !strings.Contains(res.Annotation.LastError, "--advertise dra") {
				t.Fatalf("record's last error %q does not name the flag", res.Annotation.LastError)
			}
		})
	}
}

// TestDynamicUnderDRA: with --advertise dra a GPU turning dynamic becomes
// MIG on with no instances; the ones it held are destroyed as part of the
// change, after the drain policy (wait) let the pod holding one go.
func TestDynamicUnderDRA(t *testing.T) {
	h := newHarness(t, "h100-80gb*2")
	h.r.Advertise = AdvertiseDRA
	f := h.parse(dynamicProfiles)
	h.reconcile(f, nil, "balanced")
	busy := h.migUUID(1, "3g.40gb")
	if err := h.m.SetBusy(busy, true); err != nil {
		t.Fatal(err)
	}
	h.inUse.hold(busy, "trainer")
	h.m.ResetOpLog()

	res := h.reconcile(f, nil, "hybrid")
	if res.State != carvev1.StateDraining {
		t.Fatalf("state %s, want draining (events %v)", res.State, reasons(res.Events))
	}
	for _, op := range h.mutations() {
		if op.GPU == 1 {
			t.Fatalf("GPU 1, held by a pod, was touched: %v", op)
		}
	}
	if h.migUUID(1, "3g.40gb") != busy {
		t.Fatal("the busy instance was destroyed")
	}

	h.inUse.release(busy)
	if err := h.m.SetBusy(busy, false); err != nil {
		t.Fatal(err)
	}
	h.now = h.now.Add(time.Minute)
	res = h.reconcile(f, nil, "hybrid")
	if res.State != carvev1.StateSuccess || res.Labels[carvev1.LabelApplied] != "hybrid" {
		t.Fatalf("state %s applied %q events %v", res.State, res.Labels[carvev1.LabelApplied], reasons(res.Events))
	}
	want := "0:[1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6] 1:[]"
	if got := layout(h.gpus()); got != want {
		t.Fatalf("layout %s, want %s", got, want)
	}
	if diff := cmp.Diff(map[string]int{"nvidia.com/mig-1g.10gb": 7}, h.adv.counts()); diff != "" {
		t.Errorf("advertised (-want +got):\n%s", diff)
	}
}
