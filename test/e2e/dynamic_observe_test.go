package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/carve-dev/carve/agent"
	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/test/harness"
)

// draSeries returns the agent's carve_dra_* series as
// name{label="value",...} → value; a histogram as its _count.
func draSeries(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "carve_dra_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			key := mf.GetName() + "{" + strings.Join(labels, ",") + "}"
			switch {
			case m.Histogram != nil:
				out[key+"_count"] = float64(m.GetHistogram().GetSampleCount())
			case m.Counter != nil:
				out[key] = m.GetCounter().GetValue()
			default:
				out[key] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// claimsOnGPU returns what the node's record says of a GPU's dynamic
// offer and of the MIG devices made there for claims, one line each:
// "dynamic 1g.10gb,3g.40gb offered" and "3g.40gb@4:4 default/x made".
func (e *draEnv) claimsOnGPU(index int) []string {
	e.t.Helper()
	n, err := e.cs.CoreV1().Nodes().Get(e.ctx, e.c.NodeName(), metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	rec, err := carvev1.DecodeNodeRecord(n.Annotations[carvev1.AnnotationRecord])
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, g := range rec.GPUs {
		if g.Index != index {
			continue
		}
		if d := g.Dynamic; d != nil {
			out = append(out, fmt.Sprintf("dynamic %s offered=%t", strings.Join(d.Profiles, ","), d.Offered))
		}
		for _, in := range g.Instances {
			if in.Claim != nil {
				out = append(out, fmt.Sprintf("%s@%d:%d %s %s", in.Profile, in.Placement.Start, in.Placement.Size, in.Claim, in.Claim.State))
			}
		}
	}
	return out
}

// TestDynamicClaimsObservable: on a hybrid node (GPU 0 static, GPU 1
// dynamic offering 1g.10gb and 3g.40gb) a claim's MIG device made on GPU 1
// shows in the node record with its claim, in carvectl status under the
// table, and in the agent's metrics (devices per profile, the prepare
// timed as dynamic, the largest profile still placeable); once the claim
// is gone, the record and the metrics say so.
func TestDynamicClaimsObservable(t *testing.T) {
	c := suite.Cluster(t)
	freshNode(t, c)
	e := &draEnv{t: t, ctx: testCtx(t, 10*time.Minute), c: c, cs: c.Clientset(), m: newSim(t, "h100-80gb*2"), state: t.TempDir()}
	e.create(anySlice(draClasses())...)
	e.agent = e.agentClient()
	if err := harness.ApplyProfiles(e.ctx, e.cs, deployNS, profilesCM, hybridProfiles); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	startAgent(t, c, e.m, func(cfg *agent.Config) {
		cfg.Client, cfg.ConfigMapNamespace, cfg.ConfigMapName = e.agentKube, deployNS, profilesCM
		cfg.Advertise, cfg.KubeletRootDir, cfg.CDIDir, cfg.StateDir = agent.AdvertiseDRA, c.KubeletRootDir(), c.CDIDir(), e.state
		cfg.Registerer = reg
	})
	waitState(e.ctx, t, c, carvev1.StateSuccess, "hybrid")
	if err := harness.Poll(e.ctx, time.Minute, func(context.Context) (bool, error) {
		return slices.Contains(e.poolDevices(), "gpu-1-dyn-3g40gb-4"), nil
	}); err != nil {
		t.Fatalf("the pool never offered GPU 1's dynamic devices: %v", e.poolDevices())
	}
	const placeable = `carve_dra_largest_placeable_profile_slices{gpu="1",profile="3g.40gb"}`
	if got := draSeries(t, reg); got[placeable] != 4 || got[`carve_dra_dynamic_devices{profile="3g.40gb"}`] != 0 {
		t.Errorf("before any claim: %v, want %s 4 and no 3g.40gb made", got, placeable)
	}

	onGPU1 := `device.attributes["gpu.carve.dev"].index == 1 && device.attributes["gpu.carve.dev"].profile == `
	e.create(draClaim("dyn-obs", "mig.carve.dev", onGPU1+`"3g.40gb"`, 1, false), claimPod("dyn-obs", "dyn-obs", 10*time.Minute))
	waitHolds(e.ctx, t, c, "dyn-obs")
	want := []string{"dynamic 1g.10gb,3g.40gb offered=true", "3g.40gb@4:4 default/dyn-obs made"}
	if err := harness.Poll(e.ctx, time.Minute, func(context.Context) (bool, error) {
		return slices.Equal(e.claimsOnGPU(1), want), nil
	}); err != nil {
		t.Fatalf("the node record says of GPU 1 %q, want %q", e.claimsOnGPU(1), want)
	}
	out, err := exec.CommandContext(e.ctx, buildCarvectl(e.ctx, t), "status", "--kubeconfig", c.Kubeconfig()).CombinedOutput()
	if err != nil {
		t.Fatalf("carvectl status: %v\n%s", err, out)
	}
	_, section, _ := strings.Cut(string(out), "\nDynamic GPUs (MIG devices made for claims):\n")
	line, _, _ := strings.Cut(section, "\n")
	if got, want := strings.Fields(line), []string{c.NodeName(), "GPU", "1", "1g.10gb,3g.40gb", "3g.40gb@4:4", "default/dyn-obs"}; !slices.Equal(got, want) {
		t.Errorf("carvectl status: dynamic GPU line %q, want %q:\n%s", got, want, out)
	}
	got := draSeries(t, reg)
	if got[`carve_dra_dynamic_devices{profile="3g.40gb"}`] != 1 || got[`carve_dra_prepare_duration_seconds{kind="dynamic"}_count`] < 1 || got[placeable] != 4 {
		t.Errorf("with the claim's device made: %v, want one 3g.40gb made, a dynamic prepare timed, %s 4 (0:4 is free)", got, placeable)
	}

	if err := harness.DeletePod(e.ctx, e.cs, metav1.NamespaceDefault, "dyn-obs"); err != nil {
		t.Fatal(err)
	}
	if err := e.cs.ResourceV1().ResourceClaims(metav1.NamespaceDefault).Delete(e.ctx, "dyn-obs", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want = want[:1]
	if err := harness.Poll(e.ctx, 2*time.Minute, func(context.Context) (bool, error) {
		return slices.Equal(e.claimsOnGPU(1), want), nil
	}); err != nil {
		t.Fatalf("after the claim was deleted the node record says of GPU 1 %q, want %q", e.claimsOnGPU(1), want)
	}
	got = draSeries(t, reg)
	if got[`carve_dra_dynamic_devices{profile="3g.40gb"}`] != 0 || got[`carve_dra_unprepare_duration_seconds{kind="dynamic"}_count`] < 1 {
		t.Errorf("after the claim was deleted: %v, want no 3g.40gb made and a dynamic unprepare timed", got)
	}
}
