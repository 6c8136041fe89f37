// Package e2e holds carve's end-to-end tests: carve's own packages against a
// real kube-apiserver, kube-scheduler, kubelet and containerd (test/cluster),
// with simulated GPUs (partition/sim).
package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/plugin"
	"github.com/carve-dev/carve/test/cluster"
	"github.com/carve-dev/carve/timeslice"
)

var suite = cluster.NewSuite(cluster.Options{NodeName: "carve-e2e"})

func TestMain(m *testing.M) { os.Exit(suite.Run(m)) }

const (
	mig1g = "nvidia.com/mig-1g.10gb"
	gpu   = "nvidia.com/gpu"
)

// simNode builds a simulated DGX H100 whose GPU 0 holds seven 1g.10gb MIG
// instances and whose GPUs 1-7 are whole, and returns it with the resources
// carve would advertise for it (whole GPUs with the given replicas).
func simNode(t *testing.T, replicas int) (*sim.Machine, []partition.GPU, timeslice.Resources) {
	t.Helper()
	m, err := sim.New("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Init(); err != nil {
		t.Fatal(err)
	}
	node, err := partition.ReadNode(m)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := partition.PlanGPU(node.GPUs[0], node.Models[0], partition.Target{MIG: map[string]int{"1g.10gb": 7}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ap := partition.Applier{Lib: m}
	if err := ap.Apply(context.Background(), plan); err != nil {
		t.Fatal(err)
	}
	gpus, err := partition.ReadInventory(m)
	if err != nil {
		t.Fatal(err)
	}
	return m, gpus, expand(t, gpus, replicas)
}

func expand(t *testing.T, gpus []partition.GPU, replicas int) timeslice.Resources {
	t.Helper()
	sharing := map[int]timeslice.Sharing{}
	for i := 1; i < len(gpus); i++ {
		sharing[i] = timeslice.Sharing{Replicas: replicas}
	}
	res, err := timeslice.Expand(gpus, sharing)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// waitAllocatable waits until the node's allocatable has exactly these
// counts for the named resources.
func waitAllocatable(ctx context.Context, t *testing.T, cs kubernetes.Interface, node string, want map[string]int64) {
	t.Helper()
	var last map[string]int64
	err := poll(ctx, 90*time.Second, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil // the API server may be restarting
		}
		last = map[string]int64{}
		for name := range want {
			q := n.Status.Allocatable[corev1.ResourceName(name)]
			last[name] = q.Value()
		}
		for name, v := range want {
			if last[name] != v {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("allocatable: want %v, last seen %v: %v", want, last, err)
	}
}

func poll(ctx context.Context, limit time.Duration, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		ok, err := cond(ctx)
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gave up after %s: %w", limit, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// devicePod asks for n devices of a resource and writes the devices it sees
// to its termination message; with hold it sleeps first.
func devicePod(name, res string, n int64, hold time.Duration) *corev1.Pod {
	script := `printf "%s" "$NVIDIA_VISIBLE_DEVICES" > /dev/termination-log`
	if hold > 0 {
		script = fmt.Sprintf("sleep %d; %s", int(hold.Seconds()), script)
	}
	q := *resource.NewQuantity(n, resource.DecimalSI)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			HostNetwork:                   true,
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name:            "c",
				Image:           cluster.BusyboxImage,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"/bin/sh", "-c", script},
				Resources: corev1.ResourceRequirements{
					Limits: corev1.ResourceList{corev1.ResourceName(res): q},
				},
			}},
		},
	}
}

func createPod(ctx context.Context, t *testing.T, cs kubernetes.Interface, pod *corev1.Pod) {
	t.Helper()
	if _, err := cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", pod.Name, err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = cs.CoreV1().Pods(pod.Namespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		_ = poll(context.Background(), 60*time.Second, func(ctx context.Context) (bool, error) {
			_, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
			return err != nil, nil
		})
	})
}

// terminationMessage waits for the pod to succeed and returns its message.
func terminationMessage(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) string {
	t.Helper()
	var msg string
	var phase corev1.PodPhase
	err := poll(ctx, 3*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		phase = p.Status.Phase
		if phase == corev1.PodFailed {
			return false, fmt.Errorf("pod %s failed: %+v", name, p.Status)
		}
		if phase != corev1.PodSucceeded || len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Terminated == nil {
			return false, nil
		}
		msg = p.Status.ContainerStatuses[0].State.Terminated.Message
		return true, nil
	})
	if err != nil {
		t.Fatalf("pod %s (phase %s): %v", name, phase, err)
	}
	return msg
}

func TestDevicePluginOnRealKubelet(t *testing.T) {
	c := suite.Cluster(t)
	cs := c.Clientset()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	m, gpus, res := simNode(t, 1)
	mgr, err := plugin.New(plugin.Options{
		DevicePluginDir: c.DevicePluginDir(),
		NVML:            m,
		Logger:          slog.New(slog.NewTextHandler(io.Discard, nil)),
		RetryInterval:   time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stopRun := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Run(runCtx) }()
	t.Cleanup(func() { stopRun(); <-done; mgr.Stop() })
	if err := mgr.Update(ctx, res); err != nil {
		t.Fatalf("update: %v", err)
	}

	t.Run("allocatable shows carve's resources", func(t *testing.T) {
		waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{mig1g: 7, gpu: 7})
	})

	var migUUIDs []string
	for _, in := range gpus[0].Instances {
		migUUIDs = append(migUUIDs, in.UUID())
	}

	t.Run("a pod asking for 2 MIG devices sees 2 distinct ones", func(t *testing.T) {
		createPod(ctx, t, cs, devicePod("two-mig", mig1g, 2, 0))
		got := strings.Split(terminationMessage(ctx, t, cs, "two-mig"), ",")
		if len(got) != 2 || got[0] == got[1] {
			t.Fatalf("NVIDIA_VISIBLE_DEVICES = %v, want 2 distinct devices", got)
		}
		for _, u := range got {
			if !slices.Contains(migUUIDs, u) {
				t.Errorf("%s is not one of GPU 0's MIG devices %v", u, migUUIDs)
			}
		}
	})

	t.Run("a pod asking for more than exist stays Pending", func(t *testing.T) {
		createPod(ctx, t, cs, devicePod("too-many", mig1g, 8, 0))
		var reason string
		err := poll(ctx, 60*time.Second, func(ctx context.Context) (bool, error) {
			p, err := cs.CoreV1().Pods("default").Get(ctx, "too-many", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			if p.Status.Phase != corev1.PodPending {
				return false, fmt.Errorf("phase %s, want Pending", p.Status.Phase)
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse {
					reason = cond.Message
					return strings.Contains(cond.Message, "Insufficient "+mig1g), nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("scheduler's reason %q: %v", reason, err)
		}
	})

	t.Run("PodResources reports the devices a running pod holds", func(t *testing.T) {
		createPod(ctx, t, cs, devicePod("holder", mig1g, 1, 120*time.Second))
		client := plugin.NewPodResourcesClient(c.PodResourcesSocket(), 10*time.Second)
		var inUse *plugin.InUse
		err := poll(ctx, 90*time.Second, func(ctx context.Context) (bool, error) {
			u, err := client.InUse(ctx)
			if err != nil {
				return false, nil
			}
			inUse = u
			for _, a := range u.Assignments {
				if a.Pod == "holder" && a.Resource == mig1g && len(a.UUIDs) == 1 {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("in use %+v: %v", inUse, err)
		}
		for _, u := range inUse.UUIDs {
			if !inUse.Holds(u) || !slices.Contains(migUUIDs, u) {
				t.Errorf("in-use UUID %s is not a MIG device of GPU 0", u)
			}
		}
	})

	t.Run("a changed device set reaches allocatable without a restart", func(t *testing.T) {
		if err := mgr.Update(ctx, expand(t, gpus, 3)); err != nil {
			t.Fatal(err)
		}
		waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{mig1g: 7, gpu: 21})
	})

	t.Run("after a kubelet restart the plugin re-registers", func(t *testing.T) {
		if err := c.RestartKubelet(ctx); err != nil {
			t.Fatalf("restart kubelet: %v", err)
		}
		waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{mig1g: 7, gpu: 21})
		createPod(ctx, t, cs, devicePod("after-restart", gpu, 2, 0))
		got := strings.Split(terminationMessage(ctx, t, cs, "after-restart"), ",")
		if len(got) < 1 || !strings.HasPrefix(got[0], "GPU-") {
			t.Fatalf("NVIDIA_VISIBLE_DEVICES = %v after restart", got)
		}
	})
}
