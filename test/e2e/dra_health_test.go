package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/dra"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/test/harness"
)

// TestDRAHealthInPodStatus runs carve as the DRA driver (GPU 0 in MIG
// mode, GPU 1 whole and time-sliced, the default XID policy: critical XIDs
// taint NoSchedule, so pods keep running) and checks what the kubelet
// shows in pod status (KEP-4680, beta and on by default in 1.37): both
// pods' devices are Healthy at first; a critical XID on the MIG device of
// one pod makes that device Unhealthy in its pod's status, with a message
// naming the XID, and leaves the other pod's GPU Healthy; an XID on GPU 1
// then makes the other pod's device Unhealthy too.
func TestDRAHealthInPodStatus(t *testing.T) {
	c := suite.Cluster(t)
	freshNode(t, c)
	e := &draEnv{t: t, ctx: testCtx(t, 10*time.Minute), c: c, cs: c.Clientset(), m: newSim(t, "h100-80gb*2"), state: t.TempDir()}
	e.create(anySlice(draClasses())...)
	e.agent = e.agentClient()
	if err := harness.ApplyProfiles(e.ctx, e.cs, deployNS, profilesCM, draProfiles); err != nil {
		t.Fatal(err)
	}
	e.startAgent()
	waitState(e.ctx, t, c, carvev1.StateSuccess, "small")
	e.waitSlice(0)

	e.create(draClaim("health-mig", "mig.carve.dev", "", 1, false), claimPod("dra-health-mig", "health-mig", 10*time.Minute),
		draClaim("health-gpu", "gpu.carve.dev", "", 1, false), claimPod("dra-health-gpu", "health-gpu", 10*time.Minute))
	waitHolds(e.ctx, t, c, "dra-health-mig")
	waitHolds(e.ctx, t, c, "dra-health-gpu")
	migDev, gpuDev := e.allocated("health-mig"), e.allocated("health-gpu")
	if gpuDev != "gpu-1" {
		t.Fatalf("claim health-gpu got %s, want gpu-1 (GPU 0 is in MIG mode)", gpuDev)
	}
	want := map[string]string{"dra-health-mig": "Healthy", "dra-health-gpu": "Healthy"}
	e.waitPodHealth("before any XID", want)

	gi, ci, uuid := e.migIDs(migDev)
	if err := e.m.RaiseXID(0, 79, gi, ci); err != nil {
		t.Fatal(err)
	}
	want["dra-health-mig"] = "Unhealthy: XID 79 (critical) on MIG device " + uuid + " at "
	e.waitPodHealth("XID 79 on the MIG device", want)
	if err := e.m.RaiseXID(1, 48, -1, -1); err != nil {
		t.Fatal(err)
	}
	want["dra-health-gpu"] = "Unhealthy: XID 48 (critical) on GPU"
	e.waitPodHealth("XID 48 on GPU 1", want)
	for _, pod := range []string{"dra-health-mig", "dra-health-gpu"} {
		if phase := harness.PodPhase(e.ctx, e.cs, metav1.NamespaceDefault, pod); phase != corev1.PodRunning {
			t.Errorf("pod %s is %s: a NoSchedule taint and an unhealthy device must leave it running", pod, phase)
		}
	}
}

// migIDs returns the GPU and compute instance IDs and the UUID of the
// named MIG device on GPU 0, from the simulator.
func (e *draEnv) migIDs(device string) (gi, ci int, uuid string) {
	e.t.Helper()
	gpus, err := partition.ReadInventory(e.m)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, d := range e.slice().Spec.Devices {
		if d.Name != device {
			continue
		}
		uuid = *d.Attributes[dra.AttrUUID].StringValue
		for _, in := range gpus[0].Instances {
			if in.UUID() == uuid {
				return in.GIID, in.CIs[0].ID, uuid
			}
		}
	}
	e.t.Fatalf("MIG device %s not found on GPU 0", device)
	return 0, 0, ""
}

// waitPodHealth waits until each pod of want reports the health of its
// claim's device as want says: "Health" or "Health: message", messages
// compared by prefix.
func (e *draEnv) waitPodHealth(what string, want map[string]string) {
	e.t.Helper()
	var got map[string]string
	err := harness.Poll(e.ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		got = map[string]string{}
		for pod := range want {
			h, err := e.podHealth(ctx, pod)
			if err != nil {
				return false, err
			}
			got[pod] = h
		}
		for pod, w := range want {
			if !strings.HasPrefix(got[pod], w) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		var statuses []string
		for pod := range want {
			if p, err := e.cs.CoreV1().Pods(metav1.NamespaceDefault).Get(e.ctx, pod, metav1.GetOptions{}); err == nil {
				for _, cs := range p.Status.ContainerStatuses {
					statuses = append(statuses, fmt.Sprintf("%s: %+v", pod, cs.AllocatedResourcesStatus))
				}
			}
		}
		var health []string
		for l := range strings.SplitSeq(e.c.LogTail("kubelet", 5000), "\n") {
			if strings.Contains(strings.ToLower(l), "health") {
				health = append(health, l)
			}
		}
		e.t.Fatalf("%s: pods' device health never matched (-want +got):\n%s\nerr: %v\nallocated resources' status:\n%s\nkubelet log on health:\n%s",
			what, cmp.Diff(want, got), err, strings.Join(statuses, "\n"), strings.Join(health[max(0, len(health)-30):], "\n"))
	}
}

// podHealth is the health the pod's container reports for the one device
// of its claim "gpus" (the kubelet names it by the claim's CDI device):
// "" when not reported.
func (e *draEnv) podHealth(ctx context.Context, pod string) (string, error) {
	p, err := e.cs.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("pod %s: %w", pod, err)
	}
	for _, cs := range p.Status.ContainerStatuses {
		for _, st := range cs.AllocatedResourcesStatus {
			if st.Name != "claim:gpus" || len(st.Resources) != 1 {
				continue
			}
			r := st.Resources[0]
			if !strings.HasPrefix(string(r.ResourceID), dra.DriverName+"/") {
				return "", fmt.Errorf("pod %s: resource %s is not carve's", pod, r.ResourceID)
			}
			h := string(r.Health)
			if r.Message != nil && *r.Message != "" {
				h += ": " + *r.Message
			}
			return h, nil
		}
	}
	return "", nil
}
