package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/test/harness"
)

const holdProfiles = `version: v1
defaultProfile: whole
profiles:
  whole:
    - gpus: all
  small:
    - gpus: all
      mig: {1g.10gb: 7}
`

// TestAgentHold: an operator holds the node (carve.dev/hold=true), then
// pins another profile. The agent observes only: state held, the change it
// would make in its record and a Held Event, no MIG operation, the whole
// GPUs still allocatable. Once the hold is removed the change happens.
func TestAgentHold(t *testing.T) {
	c := suite.Cluster(t)
	cs := c.Clientset()
	ctx := testCtx(t, 10*time.Minute)
	freshNode(t, c)
	m := newSim(t, "h100-80gb*2")
	applyProfiles(ctx, t, c, holdProfiles)
	r := startAgent(t, c, m, nil)
	waitState(ctx, t, c, carvev1.StateSuccess, "whole")
	waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{gpu: 2})
	m.ResetOpLog()

	since := time.Now()
	if err := harness.SetNodeLabels(ctx, cs, c.NodeName(), map[string]string{carvev1.LabelHold: carvev1.HoldTrue}); err != nil {
		t.Fatal(err)
	}
	waitState(ctx, t, c, carvev1.StateHeld, "whole")
	setProfileLabel(ctx, t, c, "small")
	const would = "it would then apply profile small (label): "
	waitEvent(ctx, t, c, carvev1.ReasonHeld, "without the hold it would apply profile small (label): ", since)
	_, err := harness.WaitNode(ctx, cs, c.NodeName(), time.Minute, "a record that says what the held node would do", func(n *corev1.Node) bool {
		rec, err := harness.RecordOf(n)
		return err == nil && strings.Contains(rec.Waiting, would)
	})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // a pass that were to go on would be under way
	n, err := cs.CoreV1().Nodes().Get(ctx, c.NodeName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Labels[carvev1.LabelState]; got != carvev1.StateHeld {
		t.Errorf("held node: %s=%q, want %s", carvev1.LabelState, got, carvev1.StateHeld)
	}
	if ops := m.OpLog(); len(ops) != 0 {
		t.Errorf("held node: MIG operations %v, want none", ops)
	}
	waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{gpu: 2})

	since = time.Now()
	if err := harness.SetNodeLabels(ctx, cs, c.NodeName(), map[string]string{carvev1.LabelHold: ""}); err != nil {
		t.Fatal(err)
	}
	waitState(ctx, t, c, carvev1.StateSuccess, "small")
	waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{mig1g: 14})
	waitEvent(ctx, t, c, carvev1.ReasonHoldLifted, "carve goes on", since)
	if len(m.OpLog()) == 0 {
		t.Error("no MIG operation after the hold was removed")
	}
	if !r.running() {
		t.Error("the agent stopped")
	}
}
