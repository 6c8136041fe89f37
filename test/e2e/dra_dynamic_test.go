package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/carve-dev/carve/dra"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/test/harness"
)

// TestDRADynamicSlices publishes the pool of a node with two on-demand
// H100s, as the carve-agent ServiceAccount under configs/deploy/dra's RBAC
// and admission policies: the real API server accepts the counter slice
// and the device slices and keeps the counters (Kubernetes 1.37's default
// features); the real scheduler, allocating the claims of pods one after
// the other, packs them as the slices' order says: a 3g.40gb at 4:4 and
// then a 4g.40gb at 0:4 share the first GPU, a 7g.80gb takes the second,
// and a second 7g.80gb finds no device: its pod is unschedulable, not
// failed. No MIG device is made (the pods wait in ContainerCreating).
func TestDRADynamicSlices(t *testing.T) {
	c := suite.Cluster(t)
	freshNode(t, c)
	e := &draEnv{t: t, ctx: testCtx(t, 10*time.Minute), c: c, cs: c.Clientset()}
	e.create(anySlice(draClasses())...)
	e.agent = e.agentClient()
	h100, _ := partition.LookupModel("H100-80GB")
	off, err := dra.Describe(nil, nil,
		dra.DynamicGPU{Index: 0, UUID: "GPU-e2e-dynamic-0", Model: h100},
		dra.DynamicGPU{Index: 1, UUID: "GPU-e2e-dynamic-1", Model: h100})
	if err != nil {
		t.Fatal(err)
	}
	p := &dra.Publisher{Client: e.agentKube, Node: c.NodeName()}
	t.Cleanup(func() { deleteDriverSlices(t, e) })
	if err := p.Publish(e.ctx, off.Devices, off.CounterSets...); err != nil {
		t.Fatalf("publish: %v", err)
	}
	l, err := e.cs.ResourceV1().ResourceSlices().List(e.ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + dra.DriverName})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range l.Items {
		names = append(names, s.Name)
	}
	prefix := c.NodeName() + "-" + dra.DriverName + "-"
	if diff := cmp.Diff([]string{prefix + "counters-00", prefix + "devices-00"}, names); diff != "" {
		t.Errorf("slices (-want +got):\n%s", diff)
	}

	steps := []struct{ claim, profile, want string }{
		{"dyn-3g", "3g.40gb", "gpu-0-dyn-3g40gb-4"},
		{"dyn-4g", "4g.40gb", "gpu-0-dyn-4g40gb-0"},
		{"dyn-7g", "7g.80gb", "gpu-1-dyn-7g80gb-0"},
	}
	for _, st := range steps {
		e.create(draClaim(st.claim, "mig.carve.dev", `device.attributes["gpu.carve.dev"].profile == "`+st.profile+`"`, 1, false),
			claimPod("dra-"+st.claim, st.claim, 10*time.Minute))
		if got := e.allocated(st.claim); got != st.want {
			t.Errorf("claim %s for a %s got %s, want %s", st.claim, st.profile, got, st.want)
		}
	}
	e.create(draClaim("dyn-7g-more", "mig.carve.dev", `device.attributes["gpu.carve.dev"].profile == "7g.80gb"`, 1, false),
		claimPod("dra-dyn-7g-more", "dyn-7g-more", 0))
	e.waitUnschedulable("dra-dyn-7g-more")
	claim, err := e.cs.ResourceV1().ResourceClaims(metav1.NamespaceDefault).Get(e.ctx, "dyn-7g-more", metav1.GetOptions{})
	if err != nil || claim.Status.Allocation != nil {
		t.Errorf("claim dyn-7g-more, which no GPU can hold: %v, allocation %+v", err, claim.Status.Allocation)
	}
}

// waitUnschedulable waits until the scheduler reports the pod
// unschedulable.
func (e *draEnv) waitUnschedulable(pod string) {
	e.t.Helper()
	if err := harness.Poll(e.ctx, time.Minute, func(ctx context.Context) (bool, error) {
		p, err := e.cs.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		e.t.Fatalf("pod %s was not held back (phase %s): %v", pod, harness.PodPhase(e.ctx, e.cs, metav1.NamespaceDefault, pod), err)
	}
}

// deleteDriverSlices deletes the node's slices of carve's driver.
func deleteDriverSlices(t *testing.T, e *draEnv) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := e.cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + dra.DriverName})
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	for _, s := range l.Items {
		if err := e.cs.ResourceV1().ResourceSlices().Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("cleanup: delete ResourceSlice %s: %v", s.Name, err)
		}
	}
}
