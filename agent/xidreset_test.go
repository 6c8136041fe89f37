package agent

import (
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// resetAdvertiser is a fakeAdvertiser that also tracks device health, as
// carve's device plugin does: it records the GPUs the agent says it reset.
type resetAdvertiser struct {
	*fakeAdvertiser
	mu     sync.Mutex
	resets []string
}

func (r *resetAdvertiser) GPUReset(gpuUUID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.resets = append(r.resets, gpuUUID)
}

var _ GPUResetter = (*resetAdvertiser)(nil)

// TestReconcileTellsAdvertiserOfResets: each GPU reset the agent makes (a
// MIG mode change) is passed on to the advertiser, which clears what
// critical XIDs did to the GPU; no other op is.
func TestReconcileTellsAdvertiserOfResets(t *testing.T) {
	h := newHarness(t, "h100-80gb*2")
	adv := &resetAdvertiser{fakeAdvertiser: h.adv}
	h.r.Devices = adv
	h.reconcile(h.parse(testProfiles), nil, "")
	h.m.ResetOpLog()
	if res := h.reconcile(h.parse(testProfiles), nil, "small"); res.Err != nil {
		t.Fatalf("reconcile: %v", res.Err)
	}
	gpus := h.gpus()
	var want []string
	for _, op := range h.m.OpLog() {
		if op.Call == "Reset" && op.Err == nil {
			want = append(want, gpus[op.GPU].UUID)
		}
	}
	if len(want) == 0 {
		t.Fatalf("no GPU reset in the change to MIG: ops %v", h.m.OpLog())
	}
	slices.Sort(adv.resets)
	if diff := cmp.Diff(want, adv.resets); diff != "" {
		t.Errorf("GPUs reset told the advertiser (-want +got):\n%s", diff)
	}
}
