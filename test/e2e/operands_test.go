package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/carve-dev/carve/agent"
	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/test/cluster"
	"github.com/carve-dev/carve/test/harness"
)

const (
	exporterLabel = "nvidia.com/gpu.deploy.dcgm-exporter"
	exporterName  = "fake-dcgm-exporter"
)

const operandProfiles = `version: v1
defaultProfile: whole
profiles:
  whole:
    - gpus: all
  small:
    - gpus: all
      mig: {1g.10gb: 7}
`

// exporterDaemonSet stands in for the GPU Operator's DCGM exporter: a
// DaemonSet that selects nodes by the operand's deploy label.
func exporterDaemonSet() *appsv1.DaemonSet { return standIn(exporterName, exporterLabel) }

// standIn is a stand-in for a GPU Operator operand: a DaemonSet named name
// whose pods (label app=name) select nodes by the deploy label.
func standIn(name, label string) *appsv1.DaemonSet {
	labels := map[string]string{"app": name}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       sleeperSpec(label),
			},
		},
	}
}

// sleeperSpec is a pod that sleeps on a node whose label is true.
func sleeperSpec(label string) corev1.PodSpec {
	zero := int64(0)
	return corev1.PodSpec{
		NodeSelector:                  map[string]string{label: "true"},
		TerminationGracePeriodSeconds: &zero,
		HostNetwork:                   true, // as the test cluster's pods are
		Containers: []corev1.Container{{
			Name: "sleep", Image: cluster.BusyboxImage, ImagePullPolicy: corev1.PullNever,
			Command: []string{"/bin/sh", "-c", "sleep 3600"},
		}},
	}
}

// exporterPods lists the stand-in exporter's pods on the node.
func exporterPods(ctx context.Context, cs kubernetes.Interface) ([]corev1.Pod, error) {
	list, err := cs.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: "app=" + exporterName})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// operandSetup labels the node for the stand-in exporter, creates it and
// waits until its pod runs; all of it is undone when the test ends.
func operandSetup(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	cs := c.Clientset()
	if err := harness.SetNodeLabels(ctx, cs, c.NodeName(), map[string]string{exporterLabel: "true"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.AppsV1().DaemonSets(metav1.NamespaceDefault).Create(ctx, exporterDaemonSet(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := cs.AppsV1().DaemonSets(metav1.NamespaceDefault).Delete(ctx, exporterName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("cleanup: %v", err)
		}
		if err := harness.SetNodeLabels(ctx, cs, c.NodeName(), map[string]string{exporterLabel: ""}); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		_ = harness.Poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
			pods, err := exporterPods(ctx, cs)
			return err == nil && len(pods) == 0, harness.Retry(err)
		})
	})
	waitExporter(ctx, t, cs)
}

// waitExporter waits until the stand-in exporter's pod runs.
func waitExporter(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	err := harness.Poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		pods, err := exporterPods(ctx, cs)
		return err == nil && len(pods) == 1 && pods[0].Status.Phase == corev1.PodRunning && pods[0].DeletionTimestamp == nil, harness.Retry(err)
	})
	if err != nil {
		ds, dsErr := cs.AppsV1().DaemonSets(metav1.NamespaceDefault).Get(ctx, exporterName, metav1.GetOptions{})
		pods, _ := exporterPods(ctx, cs)
		var seen []string
		for _, p := range pods {
			seen = append(seen, fmt.Sprintf("%s %s %v", p.Name, p.Status.Phase, p.Status.Conditions))
		}
		t.Fatalf("the stand-in exporter never ran: %v; DaemonSet status %+v (err %v); pods %v", err, ds.Status, dsErr, seen)
	}
}

// TestAgentPausesOperands: a disruptive change on a node that runs the GPU
// Operator's DCGM exporter (a stand-in DaemonSet selecting the node by
// nvidia.com/gpu.deploy.dcgm-exporter=true). The agent sets the label to
// paused-for-mig-change, its pod has left the node before the first GPU
// operation, and the label is true again afterwards, with the pod back.
func TestAgentPausesOperands(t *testing.T) {
	c := suite.Cluster(t)
	cs := c.Clientset()
	ctx := testCtx(t, 6*time.Minute)
	freshNode(t, c)
	operandSetup(ctx, t, c)
	applyProfiles(ctx, t, c, operandProfiles)

	var mu sync.Mutex
	var atFirstOp []string
	ops := 0
	startAgent(t, c, newSim(t, "h100-80gb*1"), func(cfg *agent.Config) {
		cfg.PauseOperands = []string{"dcgm-exporter", "dcgm"}
		cfg.AfterOp = func(int, int, partition.Op) error {
			mu.Lock()
			defer mu.Unlock()
			if ops++; ops > 1 {
				return nil
			}
			n, err := cs.CoreV1().Nodes().Get(context.Background(), c.NodeName(), metav1.GetOptions{})
			if err != nil {
				return err
			}
			pods, err := exporterPods(context.Background(), cs)
			if err != nil {
				return err
			}
			atFirstOp = []string{n.Labels[exporterLabel], fmt.Sprint(len(pods))}
			return nil
		}
	})
	waitState(ctx, t, c, carvev1.StateSuccess, "whole")
	mu.Lock()
	early := ops
	mu.Unlock()
	if early != 0 {
		t.Fatalf("%d GPU ops for whole GPUs on a fresh machine", early)
	}

	since := time.Now()
	setProfileLabel(ctx, t, c, "small")
	n := waitState(ctx, t, c, carvev1.StateSuccess, "small")
	mu.Lock()
	got := atFirstOp
	mu.Unlock()
	if want := []string{carvev1.OperandPaused, "0"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("at the first GPU op: label %s and exporter pods = %v, want %v", exporterLabel, got, want)
	}
	if v := n.Labels[exporterLabel]; v != "true" {
		t.Errorf("%s = %q after the change, want true", exporterLabel, v)
	}
	waitEvent(ctx, t, c, carvev1.ReasonOperandsPaused, "paused "+exporterLabel, since)
	waitEvent(ctx, t, c, carvev1.ReasonOperandsRestored, exporterLabel+" restored", since)
	waitExporter(ctx, t, cs)
}

// TestAgentRestoresOperandsAfterAKill: the carve-agent binary killed in the
// middle of a disruptive change leaves the exporter paused; restarted, it
// finishes the change and puts the label back to true.
func TestAgentRestoresOperandsAfterAKill(t *testing.T) {
	c := suite.Cluster(t)
	cs := c.Clientset()
	ctx := testCtx(t, 8*time.Minute)
	freshNode(t, c)
	root, err := harness.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin, err := harness.BuildAgent(ctx, root, dir, harness.TestHooksTag)
	if err != nil {
		t.Fatal(err)
	}
	operandSetup(ctx, t, c)
	applyProfiles(ctx, t, c, operandProfiles)
	setProfileLabel(ctx, t, c, "small")

	logPath := filepath.Join(dir, "agent.log")
	args := []string{
		"--node-name", c.NodeName(), "--kubeconfig", c.Kubeconfig(), "--config-map", cmNamespace + "/" + cmName,
		"--gpus", "sim:h100-80gb*1", "--sim-state", filepath.Join(dir, "sim.json"),
		"--device-plugin-dir", c.DevicePluginDir(), "--pod-resources-socket", c.PodResourcesSocket(),
		"--state-dir", filepath.Join(dir, "state"), "--metrics-addr", "127.0.0.1:19466", "--log-level", "debug",
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent log (tail):\n%s", harness.Tail(logPath, 80))
		}
	})
	killed, err := harness.Start(bin, args, []string{"CARVE_FAULT_EXIT_AFTER_OPS=3"}, logPath)
	if err != nil {
		t.Fatal(err)
	}
	if code, err := killed.Wait(3 * time.Minute); err != nil || code != 86 {
		_, _ = killed.Stop()
		t.Fatalf("the agent did not stop after op 3: code %d, %v", code, err)
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, c.NodeName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := n.Labels[exporterLabel]; v != carvev1.OperandPaused {
		t.Fatalf("%s = %q after the kill, want %s", exporterLabel, v, carvev1.OperandPaused)
	}
	if _, err := os.Stat(filepath.Join(dir, "state", "intent.json")); err != nil {
		t.Fatalf("no checkpoint after the kill: %v", err)
	}

	restarted, err := harness.Start(bin, args, nil, logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if code, err := restarted.Stop(); err != nil || code != 0 {
			t.Errorf("the restarted agent stopped with %d: %v", code, err)
		}
	}()
	_, err = harness.WaitNode(ctx, cs, c.NodeName(), 2*time.Minute, "small applied and the exporter label back", func(n *corev1.Node) bool {
		return n.Labels[carvev1.LabelApplied] == "small" && n.Labels[carvev1.LabelState] == carvev1.StateSuccess && n.Labels[exporterLabel] == "true"
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "state", "intent.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("checkpoint still there after the restore: %v", err)
	}
	waitExporter(ctx, t, cs)
}
