package agent

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	carvev1 "github.com/carve-dev/carve/api/v1"
)

// TestDedupeKeepsActions: a state told by the previous pass is not told
// again, but operands paused and put back again are: a second restore is
// news (the recorder counts it on the same Event).
func TestDedupeKeepsActions(t *testing.T) {
	r := &Reconciler{}
	pass := []Event{
		{Reason: carvev1.ReasonPending, Message: "waiting for a maintenance window"},
		{Reason: carvev1.ReasonOperandsPaused, Message: "paused x for a disruptive change"},
		{Reason: carvev1.ReasonOperandsRestored, Message: "x restored"},
	}
	if got := r.dedupe(pass); len(got) != 3 {
		t.Fatalf("first pass: %v", got)
	}
	var reasons []string
	for _, e := range r.dedupe(pass) {
		reasons = append(reasons, e.Reason)
	}
	if diff := cmp.Diff([]string{carvev1.ReasonOperandsPaused, carvev1.ReasonOperandsRestored}, reasons); diff != "" {
		t.Errorf("second pass (-want +got):\n%s", diff)
	}
}
