// Package e2e holds carve's end-to-end tests: carve's own packages against a
// real kube-apiserver, kube-scheduler, kubelet and containerd (test/cluster),
// with simulated GPUs (partition/sim).
package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/google/go-cmp/cmp"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/plugin"
	"github.com/carve-dev/carve/test/cluster"
	"github.com/carve-dev/carve/test/harness"
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

// waitAllocatable waits until the node's non-zero nvidia.com resources are
// exactly want.
func waitAllocatable(ctx context.Context, t *testing.T, cs kubernetes.Interface, node string, want map[string]int64) {
	t.Helper()
	if _, err := harness.WaitAllocatable(ctx, cs, node, want, 90*time.Second); err != nil {
		t.Fatal(err)
	}
}

// createPod creates a pod and deletes it when the test ends.
func createPod(ctx context.Context, t *testing.T, cs kubernetes.Interface, pod *corev1.Pod) {
	t.Helper()
	if _, err := cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", pod.Name, err)
	}
	t.Cleanup(func() {
		if err := harness.DeletePod(context.Background(), cs, pod.Namespace, pod.Name); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
}

// terminationMessage waits for the pod to succeed and returns its message.
func terminationMessage(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) string {
	t.Helper()
	msg, err := harness.PodMessage(ctx, cs, metav1.NamespaceDefault, name, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// runManager runs mgr's Run loop until the test ends, then stops it and
// its servers; an error from Run fails the test.
func runManager(ctx context.Context, t *testing.T, mgr *plugin.Manager) {
	t.Helper()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("device plugin manager Run: %v", err)
		}
		mgr.Stop()
	})
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
		// A loaded CI machine's kubelet can take longer than the default
		// to answer a registration; a timeout moves the server to a new
		// socket, which works but makes Update report the failure.
		Timeout: 20 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	runManager(ctx, t, mgr)
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
		createPod(ctx, t, cs, harness.DevicePod("two-mig", mig1g, 2, 0))
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
		createPod(ctx, t, cs, harness.DevicePod("too-many", mig1g, 8, 0))
		var reason string
		err := harness.Poll(ctx, 60*time.Second, func(ctx context.Context) (bool, error) {
			p, err := cs.CoreV1().Pods("default").Get(ctx, "too-many", metav1.GetOptions{})
			if err != nil {
				return false, harness.Retry(err)
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
		createPod(ctx, t, cs, harness.DevicePod("holder", mig1g, 1, 120*time.Second))
		client := plugin.NewPodResourcesClient(c.PodResourcesSocket(), 10*time.Second)
		var inUse *plugin.InUse
		err := harness.Poll(ctx, 90*time.Second, func(ctx context.Context) (bool, error) {
			u, err := client.InUse(ctx)
			if err != nil {
				return false, harness.Retry(err)
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
		// The holder is the only pod holding a device now: the in-use set
		// is its one MIG device, and says no to every other device.
		var held string
		for _, a := range inUse.Assignments {
			if a.Pod == "holder" {
				held = a.UUIDs[0]
			}
		}
		if !slices.Contains(migUUIDs, held) {
			t.Fatalf("the holder holds %q, not a MIG device of GPU 0 %v", held, migUUIDs)
		}
		if diff := cmp.Diff([]string{held}, inUse.UUIDs); diff != "" {
			t.Errorf("in-use set (-want +got):\n%s", diff)
		}
		for _, u := range append(slices.Clone(migUUIDs), gpus[1].UUID) {
			if got := inUse.Holds(u); got != (u == held) {
				t.Errorf("Holds(%s) = %v, want %v", u, got, u == held)
			}
		}
	})

	t.Run("a changed device set reaches allocatable without a restart", func(t *testing.T) {
		if err := mgr.Update(ctx, expand(t, gpus, 3)); err != nil {
			t.Fatal(err)
		}
		waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{mig1g: 7, gpu: 21})
	})

	// A resource that goes and at once comes back is registered again at
	// once, before the kubelet may have noticed the old server's stream
	// end. Had it the old server's socket path, kubelet 1.37 would refuse
	// it and keep the old, dead endpoint for good ("device plugin already
	// connected").
	t.Run("a resource that goes and comes back at once is registered each time", func(t *testing.T) {
		res := expand(t, gpus, 3)
		without := maps.Clone(res)
		delete(without, mig1g)
		for i := range 10 {
			if err := mgr.Update(ctx, without); err != nil {
				t.Fatalf("round %d, without %s: %v", i, mig1g, err)
			}
			if err := mgr.Update(ctx, res); err != nil {
				t.Fatalf("round %d, with %s again: %v", i, mig1g, err)
			}
		}
		waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{mig1g: 7, gpu: 21})
		createPod(ctx, t, cs, harness.DevicePod("after-flap", mig1g, 1, 0))
		if got := terminationMessage(ctx, t, cs, "after-flap"); !strings.HasPrefix(got, "MIG-") {
			t.Errorf("NVIDIA_VISIBLE_DEVICES = %q, want one MIG device of the last server", got)
		}
	})

	t.Run("after a kubelet restart the plugin re-registers", func(t *testing.T) {
		if err := c.RestartKubelet(ctx); err != nil {
			t.Fatalf("restart kubelet: %v", err)
		}
		waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{mig1g: 7, gpu: 21})
		createPod(ctx, t, cs, harness.DevicePod("after-restart", gpu, 2, 0))
		got := strings.Split(terminationMessage(ctx, t, cs, "after-restart"), ",")
		// Two of the 21 replicas, spread over two of the seven whole GPUs.
		var whole []string
		for _, g := range gpus[1:] {
			whole = append(whole, g.UUID)
		}
		if len(got) != 2 || got[0] == got[1] {
			t.Fatalf("NVIDIA_VISIBLE_DEVICES = %v after restart, want 2 distinct GPUs", got)
		}
		for _, u := range got {
			if !slices.Contains(whole, u) {
				t.Errorf("%s is not one of the machine's whole GPUs %v", u, whole)
			}
		}
	})
	// A restarted agent starts a new Manager while the kubelet may not yet
	// have noticed the old one's streams end. Were the new servers on the
	// old socket paths, kubelet 1.37 would refuse them and keep the old,
	// dead endpoints for good: allocatable would not drop when the last
	// server stops, and Allocate would dial a socket that is gone.
	t.Run("agents restarted in quick succession leave no endpoint behind", func(t *testing.T) {
		newManager := func() *plugin.Manager {
			next, err := plugin.New(plugin.Options{
				DevicePluginDir: c.DevicePluginDir(),
				NVML:            m,
				Logger:          slog.New(slog.NewTextHandler(io.Discard, nil)),
				Timeout:         20 * time.Second,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(next.Stop) // when a check below fails; Stop twice is fine
			return next
		}
		// Each new Manager is made before the one before stops, so that
		// its servers start and register right after the others stop.
		// With the old paths re-used, this left mig-1g.10gb at 7 for good
		// within 150 rounds on an idle machine; a round takes about 30 ms.
		cur := mgr
		for i := range 150 {
			next := newManager()
			cur.Stop()
			if err := next.Update(ctx, res); err != nil {
				t.Fatalf("agent %d: %v", i, err)
			}
			cur = next
		}
		waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{mig1g: 7, gpu: 7})
		cur.Stop()
		waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{})
	})
}
