package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/test/cluster"
	"github.com/carve-dev/carve/test/harness"
)

const previewProfiles = `version: v1
defaultProfile: whole
profiles:
  whole:
    - gpus: all
  small:
    - gpus: all
      mig: {1g.10gb: 7}
  mixed:
    - gpus: [0]
      mig: {3g.40gb: 1, 2g.20gb: 1, 1g.10gb: 1}
    - gpus: [1]
      mig: {1g.10gb: 7}
  halves:
    - gpus: [0]
      mig: {3g.40gb: 2}
    - gpus: [1]
drain:
  policy: wait
  timeout: 10m
`

// preview runs carvectl plan --node for the test node and returns the plan
// document and the table.
func preview(ctx context.Context, t *testing.T, c *cluster.Cluster, bin, profile string) (carvev1.PlanDocument, string) {
	t.Helper()
	args := []string{"plan", "--node", c.NodeName(), "--profile", profile, "--kubeconfig", c.Kubeconfig(), "--config-map", cmNamespace + "/" + cmName}
	table, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("carvectl %s: %v\n%s", strings.Join(args, " "), err, table)
	}
	out, err := exec.CommandContext(ctx, bin, append(args, "-o", "json")...).Output()
	if err != nil {
		t.Fatalf("carvectl %s -o json: %v\n%s", strings.Join(args, " "), err, out)
	}
	var doc carvev1.PlanDocument
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("carvectl plan -o json: %v\n%s", err, out)
	}
	t.Logf("carvectl plan --node %s --profile %s:\n%s", c.NodeName(), profile, table)
	return doc, string(table)
}

// simCalls returns the NVML calls the machine logged, per GPU, as
// "Call(args)"; a failed call fails the test.
func simCalls(t *testing.T, ops []sim.Op) map[int][]string {
	t.Helper()
	out := map[int][]string{}
	for _, o := range ops {
		if o.Err != nil {
			t.Fatalf("NVML call failed: %s", o)
		}
		out[o.GPU] = append(out[o.GPU], fmt.Sprintf("%s(%s)", o.Call, o.Args))
	}
	return out
}

// previewCalls returns the NVML calls the plan's ops make, per GPU, as
// simCalls writes them; would takes a blocked GPU's WouldDo. A compute
// instance of a GPU instance the plan creates gets the ID the machine gave
// that GPU instance (its op log says).
func previewCalls(doc carvev1.PlanDocument, would bool, ops []sim.Op) map[int][]string {
	made := map[string]string{} // "gpu placement" -> "gi N"
	for _, o := range ops {
		if o.Call == "CreateGPUInstance" {
			_, at, _ := strings.Cut(o.Args, " at ")
			gi, _, _ := strings.Cut(o.Result, " (")
			made[fmt.Sprintf("%d %s", o.GPU, at)] = gi
		}
	}
	out := map[int][]string{}
	for _, g := range doc.Plan.GPUs {
		list := g.Ops
		if would {
			list = g.WouldDo
		}
		for _, op := range list {
			at := fmt.Sprintf("%d:%d", op.Placement.Start, op.Placement.Size)
			var call string
			switch op.Kind {
			case carvev1.OpDestroyCI:
				call = fmt.Sprintf("DestroyComputeInstance(gi %d ci %d)", op.GIID, op.CIID)
			case carvev1.OpDestroyGI:
				call = fmt.Sprintf("DestroyGPUInstance(gi %d)", op.GIID)
			case carvev1.OpEnableMIG:
				call = "SetMIGMode(enabled)"
			case carvev1.OpDisableMIG:
				call = "SetMIGMode(disabled)"
			case carvev1.OpResetGPU:
				call = "Reset()"
			case carvev1.OpCreateGI:
				call = fmt.Sprintf("CreateGPUInstance(%s (profile %d) at %s)", op.Profile, op.ProfileID, at)
			case carvev1.OpCreateCI:
				gi := fmt.Sprintf("gi %d", op.GIID)
				if op.GIID < 0 {
					gi = made[fmt.Sprintf("%d %s", g.Index, at)]
				}
				call = fmt.Sprintf("CreateComputeInstance(%s)", gi)
			}
			out[g.Index] = append(out[g.Index], call)
		}
	}
	return out
}

// TestPlanNodePreview: carvectl plan --node, from a workstation's
// kubeconfig, previews what the node's agent then does when the node is
// labelled: the same NVML calls in the same order; and a device a pod
// holds blocks the preview as it blocks the agent.
func TestPlanNodePreview(t *testing.T) {
	c := suite.Cluster(t)
	cs := c.Clientset()

	t.Run("the agent does what the preview says", func(t *testing.T) {
		ctx := testCtx(t, 8*time.Minute)
		bin := buildCarvectl(ctx, t)
		freshNode(t, c)
		m := newSim(t, "h100-80gb*2")
		applyProfiles(ctx, t, c, previewProfiles)
		startAgent(t, c, m, nil)
		setProfileLabel(ctx, t, c, "mixed")
		waitState(ctx, t, c, carvev1.StateSuccess, "mixed")
		m.ResetOpLog()

		doc, _ := preview(ctx, t, c, bin, "halves")
		for _, g := range doc.Plan.GPUs {
			if len(g.Ops) == 0 || len(g.Blocked) > 0 {
				t.Fatalf("GPU %d: preview with %d ops, blocked by %v; want ops, nothing in use", g.Index, len(g.Ops), g.Blocked)
			}
		}
		setProfileLabel(ctx, t, c, "halves")
		waitState(ctx, t, c, carvev1.StateSuccess, "halves")
		ops := m.OpLog()
		if diff := cmp.Diff(previewCalls(doc, false, ops), simCalls(t, ops)); diff != "" {
			t.Errorf("the agent's NVML calls differ from the preview's (-preview +agent):\n%s", diff)
		}
	})

	t.Run("a device in use blocks the preview as it blocks the agent", func(t *testing.T) {
		ctx := testCtx(t, 8*time.Minute)
		bin := buildCarvectl(ctx, t)
		freshNode(t, c)
		m := newSim(t, "h100-80gb*1")
		applyProfiles(ctx, t, c, previewProfiles)
		startAgent(t, c, m, nil)
		setProfileLabel(ctx, t, c, "small")
		waitState(ctx, t, c, carvev1.StateSuccess, "small")
		waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{mig1g: 7})
		const pod = "preview-hold"
		createPod(ctx, t, cs, harness.DevicePod(pod, mig1g, 1, 10*time.Minute))
		waitHolds(ctx, t, c, pod)
		var held string
		_, err := harness.WaitNode(ctx, cs, c.NodeName(), time.Minute, "a record that lists the device the pod holds", func(n *corev1.Node) bool {
			rec, err := harness.RecordOf(n)
			if err != nil || rec.InUse == nil || len(rec.InUse.Devices) != 1 {
				return false
			}
			held = rec.InUse.Devices[0].UUID
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
		m.ResetOpLog()

		doc, table := preview(ctx, t, c, bin, "whole")
		g := doc.Plan.GPUs[0]
		if len(g.Blocked) != 1 || g.Blocked[0].UUID != held || len(g.Ops) != 0 {
			t.Fatalf("preview blocked by %v with ops %v; want blocked by %s alone, no ops", g.Blocked, g.Ops, held)
		}
		if want := "blocked by " + held; !strings.Contains(table, want) || !strings.Contains(table, "(pods default/"+pod+")") {
			t.Errorf("preview table lacks %q with the pod default/%s:\n%s", want, pod, table)
		}

		setProfileLabel(ctx, t, c, "whole")
		waitState(ctx, t, c, carvev1.StateDraining, "small")
		if ops := m.OpLog(); len(ops) != 0 {
			t.Fatalf("the agent made NVML calls while the pod holds its device: %v", ops)
		}
		if err := harness.DeletePod(ctx, cs, metav1.NamespaceDefault, pod); err != nil {
			t.Fatal(err)
		}
		waitState(ctx, t, c, carvev1.StateSuccess, "whole")
		ops := m.OpLog()
		if diff := cmp.Diff(previewCalls(doc, true, ops), simCalls(t, ops)); diff != "" {
			t.Errorf("the agent's NVML calls once the pod ended differ from the preview's (-preview +agent):\n%s", diff)
		}
	})
}
