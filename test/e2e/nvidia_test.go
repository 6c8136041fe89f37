package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/carve-dev/carve/agent"
	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/test/harness"
)

// TestAgentWithMIGManagerLabels: an agent started with --profile-label
// nvidia.com/mig.config and --mig-manager-state-label on the real cluster.
// The MIG manager's label selects the profile (carve.dev/profile no longer
// does), and nvidia.com/mig.config.state follows carve's state: success,
// pending while a pod holds a device the change removes, failed for a
// configuration name the file lacks.
func TestAgentWithMIGManagerLabels(t *testing.T) {
	c := suite.Cluster(t)
	cs := c.Clientset()
	ctx := testCtx(t, 6*time.Minute)
	freshNode(t, c)
	setMIGConfig := func(v string) {
		t.Helper()
		if err := harness.SetNodeLabels(ctx, cs, c.NodeName(), map[string]string{carvev1.LabelMIGManagerConfig: v}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { setMIGConfig("") })
	setMIGConfig("small")
	setProfileLabel(ctx, t, c, "whole") // ignored: another label pins
	applyProfiles(ctx, t, c, `version: v1
defaultProfile: whole
profiles:
  small:
    - gpus: all
      mig: {1g.10gb: 7}
  whole:
    - gpus: all
drain:
  policy: wait
  timeout: 10m
`)
	m := newSim(t, "h100-80gb*1")
	startAgent(t, c, m, func(cfg *agent.Config) {
		cfg.ProfileLabel = carvev1.LabelMIGManagerConfig
		cfg.Labels.MIGManagerState = true
	})

	mirror := func(state, applied, want string) {
		t.Helper()
		n := waitState(ctx, t, c, state, applied)
		if got := n.Labels[carvev1.LabelMIGManagerState]; got != want {
			t.Errorf("state %s: %s = %q, want %q", state, carvev1.LabelMIGManagerState, got, want)
		}
		if src := n.Labels[carvev1.LabelSource]; state == carvev1.StateSuccess && src != "label" {
			t.Errorf("%s = %q, want label", carvev1.LabelSource, src)
		}
	}
	mirror(carvev1.StateSuccess, "small", carvev1.MIGManagerSuccess)
	waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{mig1g: 7})

	// A pod holds a 1g.10gb device; the change to whole waits for it.
	createPod(ctx, t, cs, harness.DevicePod("mig-manager-labels", mig1g, 1, 20*time.Second))
	waitHolds(ctx, t, c, "mig-manager-labels")
	setMIGConfig("whole")
	mirror(carvev1.StateDraining, "small", carvev1.MIGManagerPending)
	mirror(carvev1.StateSuccess, "whole", carvev1.MIGManagerSuccess)
	if ph := harness.PodPhase(ctx, cs, metav1.NamespaceDefault, "mig-manager-labels"); ph != corev1.PodSucceeded {
		t.Errorf("the change completed with the holding pod %s, want Succeeded", ph)
	}

	// A configuration name the file does not have.
	setMIGConfig("all-1g.5gb")
	n := waitState(ctx, t, c, carvev1.StateFailed, "whole")
	if got := n.Labels[carvev1.LabelMIGManagerState]; got != carvev1.MIGManagerFailed {
		t.Errorf("%s = %q for an unknown configuration, want failed", carvev1.LabelMIGManagerState, got)
	}
	rec, err := harness.RecordOf(n)
	if err != nil {
		t.Fatal(err)
	}
	if want := "node label nvidia.com/mig.config=all-1g.5gb"; !strings.Contains(rec.LastError, want) {
		t.Errorf("lastError %q does not name %q", rec.LastError, want)
	}
}
