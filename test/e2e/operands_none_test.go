package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/carve-dev/carve/agent"
	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/test/cluster"
	"github.com/carve-dev/carve/test/harness"
)

const (
	pluginLabel = "nvidia.com/gpu.deploy.device-plugin"
	gfdLabel    = "nvidia.com/gpu.deploy.gpu-feature-discovery"
	clientLabel = "nvidia.com/gpu.deploy.client"
	pluginName  = "fake-nvidia-device-plugin"
	gfdName     = "fake-gpu-feature-discovery"
	clientName  = "gpu-client"
)

// appPods lists the pods labelled app=name that are not on their way out.
func appPods(ctx context.Context, cs kubernetes.Interface, name string) ([]corev1.Pod, error) {
	list, err := cs.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// waitRunning waits until one pod labelled app=name runs and returns its
// UID.
func waitRunning(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) types.UID {
	t.Helper()
	var uid types.UID
	err := harness.Poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		pods, err := appPods(ctx, cs, name)
		if err != nil || len(pods) != 1 || pods[0].Status.Phase != corev1.PodRunning {
			return false, harness.Retry(err)
		}
		uid = pods[0].UID
		return true, nil
	})
	if err != nil {
		t.Fatalf("%s never ran: %v", name, err)
	}
	return uid
}

// nvidiaSetup labels the node as the GPU Operator does for its device
// plugin, GFD and third-party GPU clients, creates stand-in DaemonSets for
// the first two, and a bare pod for a client, kept by a
// PodDisruptionBudget; deletePDB lifts it. All of it is undone when the
// test ends.
func nvidiaSetup(ctx context.Context, t *testing.T, c *cluster.Cluster) (deletePDB func()) {
	t.Helper()
	cs := c.Clientset()
	labels := map[string]string{pluginLabel: "true", gfdLabel: "true", clientLabel: "true"}
	if err := harness.SetNodeLabels(ctx, cs, c.NodeName(), labels); err != nil {
		t.Fatal(err)
	}
	one := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: clientName},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": clientName}}},
	}
	client := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: clientName, Labels: map[string]string{"app": clientName}},
		Spec:       sleeperSpec(clientLabel),
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, name := range []string{pluginName, gfdName} {
			if err := cs.AppsV1().DaemonSets(metav1.NamespaceDefault).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("cleanup: %v", err)
			}
		}
		_ = cs.PolicyV1().PodDisruptionBudgets(metav1.NamespaceDefault).Delete(ctx, clientName, metav1.DeleteOptions{})
		_ = cs.CoreV1().Pods(metav1.NamespaceDefault).Delete(ctx, clientName, metav1.DeleteOptions{})
		if err := harness.SetNodeLabels(ctx, cs, c.NodeName(), map[string]string{pluginLabel: "", gfdLabel: "", clientLabel: ""}); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		for _, name := range []string{pluginName, gfdName, clientName} {
			_ = harness.Poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
				pods, err := appPods(ctx, cs, name)
				return err == nil && len(pods) == 0, harness.Retry(err)
			})
		}
	})
	for _, ds := range []string{pluginName, gfdName} {
		label := map[string]string{pluginName: pluginLabel, gfdName: gfdLabel}[ds]
		if _, err := cs.AppsV1().DaemonSets(metav1.NamespaceDefault).Create(ctx, standIn(ds, label), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.PolicyV1().PodDisruptionBudgets(metav1.NamespaceDefault).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, client, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := cs.PolicyV1().PodDisruptionBudgets(metav1.NamespaceDefault).Delete(ctx, clientName, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// seenAtFirstOp is what the API server shows at the first GPU operation of
// a change: the three labels, and how many pods of the stand-in plugin,
// GFD and client are on the node.
func seenAtFirstOp(cs kubernetes.Interface, node string) ([]string, error) {
	ctx := context.Background()
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	out := []string{n.Labels[pluginLabel], n.Labels[gfdLabel], n.Labels[clientLabel]}
	for _, name := range []string{pluginName, gfdName, clientName} {
		pods, err := appPods(ctx, cs, name)
		if err != nil {
			return nil, err
		}
		out = append(out, fmt.Sprintf("%s pods %d", name, len(pods)))
	}
	return out, nil
}

// TestAgentPausesNVIDIAOperandsUnderAdvertiseNone: next to NVIDIA's device
// plugin (--advertise none, carve's default operands for it), a disruptive
// change pauses the device plugin, GFD and the third-party GPU clients. A
// client pod that no DaemonSet removes is evicted, and its
// PodDisruptionBudget holds the change until it is lifted. At the first GPU
// operation none of their pods is on the node; afterwards the labels are
// back and the plugin runs again, a new pod that sees the new layout, and
// carve's Event names what it paused and evicted.
func TestAgentPausesNVIDIAOperandsUnderAdvertiseNone(t *testing.T) {
	c := suite.Cluster(t)
	cs := c.Clientset()
	ctx := testCtx(t, 8*time.Minute)
	freshNode(t, c)
	deletePDB := nvidiaSetup(ctx, t, c)
	applyProfiles(ctx, t, c, operandProfiles)
	pluginBefore := waitRunning(ctx, t, cs, pluginName)
	waitRunning(ctx, t, cs, gfdName)
	waitRunning(ctx, t, cs, clientName)

	var mu sync.Mutex
	var atFirstOp []string
	var firstOpErr error
	ops := 0
	startAgent(t, c, newSim(t, "h100-80gb*1"), func(cfg *agent.Config) {
		cfg.Advertise = agent.AdvertiseNone
		cfg.PauseOperands = agent.DefaultPauseOperands(agent.AdvertiseNone)
		cfg.OperandTimeout = 10 * time.Second
		cfg.AfterOp = func(int, int, partition.Op) error {
			mu.Lock()
			defer mu.Unlock()
			if ops++; ops == 1 {
				atFirstOp, firstOpErr = seenAtFirstOp(cs, c.NodeName())
			}
			return nil
		}
	})
	waitState(ctx, t, c, carvev1.StateSuccess, "whole")

	since := time.Now()
	setProfileLabel(ctx, t, c, "small")
	waitEvent(ctx, t, c, carvev1.ReasonOperandsPaused, "the last eviction refused: pod default/"+clientName, since)
	mu.Lock()
	early := ops
	mu.Unlock()
	if early != 0 {
		t.Fatalf("%d GPU ops while the client's PodDisruptionBudget holds it on the node", early)
	}
	if ph := harness.PodPhase(ctx, cs, metav1.NamespaceDefault, clientName); ph != corev1.PodRunning {
		t.Fatalf("the PodDisruptionBudget did not keep the client: %s", ph)
	}

	stopWatch, err := harness.WatchDisruption(ctx, cs, metav1.NamespaceDefault, clientName)
	if err != nil {
		t.Fatal(err)
	}
	evicting := time.Now()
	deletePDB()
	if err := harness.WaitPodGone(ctx, cs, metav1.NamespaceDefault, clientName, 2*time.Minute); err != nil {
		t.Fatalf("client not evicted: %v", err)
	}
	if reason, seen := stopWatch(); reason != harness.DisruptionReasonEviction {
		t.Errorf("the client's DisruptionTarget reason was %q, want %s; the watch saw: %v", reason, harness.DisruptionReasonEviction, seen)
	}
	n := waitState(ctx, t, c, carvev1.StateSuccess, "small")
	mu.Lock()
	got, gotErr := atFirstOp, firstOpErr
	mu.Unlock()
	want := []string{carvev1.OperandPaused, carvev1.OperandPaused, carvev1.OperandPaused,
		pluginName + " pods 0", gfdName + " pods 0", clientName + " pods 0"}
	if gotErr != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("at the first GPU op: %v (%v),\nwant %v", got, gotErr, want)
	}
	for _, k := range []string{pluginLabel, gfdLabel, clientLabel} {
		if v := n.Labels[k]; v != "true" {
			t.Errorf("%s = %q after the change, want true", k, v)
		}
	}
	paused := clientLabel + ", " + pluginLabel + ", " + gfdLabel
	waitEvent(ctx, t, c, carvev1.ReasonOperandsPaused, "paused "+paused+" for a disruptive change; evicted pod default/"+clientName+" through the Eviction API", evicting)
	waitEvent(ctx, t, c, carvev1.ReasonOperandsRestored, paused+" restored", evicting)
	if after := waitRunning(ctx, t, cs, pluginName); after == pluginBefore {
		t.Errorf("the device plugin's pod %s ran through the change; want a new one", after)
	}
	waitRunning(ctx, t, cs, gfdName)
}
