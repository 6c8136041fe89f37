package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/test/harness"
)

// gfdLabels are labels GPU feature discovery writes on an H100 node: keys
// in the nvidia.com/ domain that carve does not write here, among them the
// per-profile labels of a MIG profile (7g.80gb) no example profile uses.
var gfdLabels = map[string]string{
	"nvidia.com/gpu.family":           "hopper",
	"nvidia.com/gpu.machine":          "DGX-H100",
	"nvidia.com/mig-7g.80gb.count":    "1",
	"nvidia.com/mig-7g.80gb.memory":   "81920",
	"nvidia.com/mig-7g.80gb.replicas": "1",
	"nvidia.com/gpu.compute.major":    "9",
}

// TestAgentLeavesLabelsItDidNotWrite: labels GPU feature discovery wrote
// before the agent started stay as they were through repartitions, and
// the labels carve wrote for a profile go when it goes, since carve
// removes only the keys its node record says it wrote.
func TestAgentLeavesLabelsItDidNotWrite(t *testing.T) {
	c := suite.Cluster(t)
	cs := c.Clientset()
	ctx := testCtx(t, 10*time.Minute)
	freshNode(t, c)
	if err := harness.SetNodeLabels(ctx, cs, c.NodeName(), gfdLabels); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		gone := map[string]string{}
		for k := range gfdLabels {
			gone[k] = ""
		}
		if err := harness.SetNodeLabels(ctx, cs, c.NodeName(), gone); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	m := newSim(t, "dgx-h100")
	applyProfiles(ctx, t, c, readExample(t))
	startAgent(t, c, m, nil)

	foreignStay := func(step string, labels map[string]string) {
		t.Helper()
		for k, v := range gfdLabels {
			if labels[k] != v {
				t.Errorf("%s: label %s = %q, want %q as GPU feature discovery wrote it", step, k, labels[k], v)
			}
		}
	}

	n := waitState(ctx, t, c, carvev1.StateSuccess, "full")
	foreignStay("whole GPUs", n.Labels)

	setProfileLabel(ctx, t, c, "all-1g")
	n = waitState(ctx, t, c, carvev1.StateSuccess, "all-1g")
	foreignStay("all-1g", n.Labels)
	if got := n.Labels["nvidia.com/mig-1g.10gb.count"]; got != "56" {
		t.Errorf("all-1g: nvidia.com/mig-1g.10gb.count = %q, want 56", got)
	}
	rec, err := harness.RecordOf(n)
	if err != nil {
		t.Fatal(err)
	}
	for k := range gfdLabels {
		if rec.Wrote(k) {
			t.Errorf("the node record lists %s, which carve did not write", k)
		}
	}
	if !rec.Wrote("nvidia.com/mig-1g.10gb.count") {
		t.Errorf("the node record does not list nvidia.com/mig-1g.10gb.count, which carve wrote: %v", rec.Labels)
	}

	setProfileLabel(ctx, t, c, "full")
	n, err = harness.WaitNode(ctx, cs, c.NodeName(), 2*time.Minute, "full applied without 1g.10gb labels", func(n *corev1.Node) bool {
		_, stale := n.Labels["nvidia.com/mig-1g.10gb.count"]
		return n.Labels[carvev1.LabelApplied] == "full" && n.Labels[carvev1.LabelState] == carvev1.StateSuccess && !stale
	})
	if err != nil {
		t.Fatal(err)
	}
	foreignStay("back to whole GPUs", n.Labels)
}
