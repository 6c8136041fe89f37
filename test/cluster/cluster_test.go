package cluster

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestCluster brings up a real single-node cluster, runs a pod through the
// scheduler, kubelet and containerd, restarts the kubelet, leaves a stale
// device-plugin endpoint and clears it, runs a container
// with a CDI device, takes the API server down and up again, and checks
// that Stop leaves nothing behind.
func TestCluster(t *testing.T) {
	c := ForTest(t, Options{NodeName: "carve-smoke", NodeLabels: map[string]string{"carve.dev/test": "smoke"}})
	t.Logf("warm start (lock held to usable cluster): %s", c.StartupTime().Round(100*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	node, err := c.Clientset().CoreV1().Nodes().Get(ctx, c.NodeName(), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get node: %v", err)
	}
	if got := node.Labels["carve.dev/test"]; got != "smoke" {
		t.Errorf("node label carve.dev/test = %q, want smoke", got)
	}
	if v := node.Status.NodeInfo.KubeletVersion; v != KubernetesVersion() {
		t.Errorf("kubelet version %q, want %s", v, KubernetesVersion())
	}
	for _, s := range []string{c.KubeletSocket(), c.PodResourcesSocket()} {
		if st, err := os.Stat(s); err != nil || st.Mode().Type() != os.ModeSocket {
			t.Errorf("%s is not a socket: %v", s, err)
		}
	}

	t.Run("pod termination message and logs", func(t *testing.T) {
		runPod(ctx, t, c, "smoke-1")
	})

	t.Run("restart kubelet", func(t *testing.T) {
		pid := c.PIDs()[compKubelet]
		start := time.Now()
		if err := c.RestartKubelet(ctx); err != nil {
			t.Fatalf("restart kubelet: %v", err)
		}
		t.Logf("kubelet restarted and node Ready in %s", time.Since(start).Round(100*time.Millisecond))
		if newPID := c.PIDs()[compKubelet]; newPID == pid || newPID == 0 {
			t.Errorf("kubelet pid %d after restart, was %d", newPID, pid)
		}
		st, err := os.Stat(c.KubeletSocket())
		if err != nil {
			t.Fatalf("kubelet socket after restart: %v", err)
		}
		if st.ModTime().Before(start) {
			t.Errorf("kubelet socket %s (%s) predates the restart (%s)", c.KubeletSocket(), st.ModTime(), start)
		}
	})

	t.Run("a stale device-plugin endpoint is seen, and gone after a kubelet restart", func(t *testing.T) {
		checkStaleEndpoint(ctx, t, c)
	})

	t.Run("CDI device from CDIDir", func(t *testing.T) {
		start := time.Now()
		checkCDI(ctx, t, c)
		t.Logf("CDI checked and kubelet back in %s", time.Since(start).Round(100*time.Millisecond))
	})

	t.Run("API server down and up", func(t *testing.T) {
		stopStart := time.Now()
		if err := c.StopAPIServer(); err != nil {
			t.Fatalf("stop API server: %v", err)
		}
		t.Logf("API server stopped in %s", time.Since(stopStart).Round(100*time.Millisecond))
		short, cancelShort := context.WithTimeout(ctx, 3*time.Second)
		_, err := c.Clientset().CoreV1().Nodes().Get(short, c.NodeName(), metav1.GetOptions{})
		cancelShort()
		if err == nil {
			t.Fatalf("API server still answers after StopAPIServer")
		}
		time.Sleep(2 * time.Second)
		start := time.Now()
		if err := c.StartAPIServer(ctx); err != nil {
			t.Fatalf("start API server: %v", err)
		}
		if err := c.WaitNodeReady(ctx); err != nil {
			t.Fatalf("node after API server restart: %v", err)
		}
		t.Logf("API server back and node Ready in %s", time.Since(start).Round(100*time.Millisecond))
		// The whole chain works again: scheduler, kubelet and runtime
		// reconnected.
		runPod(ctx, t, c, "smoke-2")
	})

	t.Run("stop leaves nothing behind", func(t *testing.T) {
		dir := c.Dir()
		endpoints := c.Endpoints()
		pids := c.PIDs()
		cgroups, err := cgroupDirs(c.cgroupRoot)
		if err != nil {
			t.Fatal(err)
		}
		socket := c.ContainerdSocket()
		if err := c.Stop(); err != nil {
			t.Fatalf("stop: %v", err)
		}
		if shims, err := shimsOf(socket); err != nil || len(shims) > 0 {
			t.Errorf("containerd shims %v left after Stop (%v)", shims, err)
		}
		for name, addr := range endpoints {
			conn, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				conn.Close()
				t.Errorf("%s still listening on %s after Stop", name, addr)
			}
		}
		for name, pid := range pids {
			if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
				t.Errorf("%s (pid %d) still exists after Stop: %v", name, pid, err)
			}
		}
		if mps, err := mountsUnder(dir); err != nil || len(mps) > 0 {
			t.Errorf("mounts left under %s: %v %v", dir, mps, err)
		}
		if _, err := os.Stat(dir); !c.opts.KeepDir && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cluster directory %s still exists: %v", dir, err)
		}
		for _, d := range cgroups {
			if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("cgroup %s still exists: %v", d, err)
			}
		}
		if _, err := os.Stat(filepath.Join(DevicePluginDir, "kubelet.sock")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("kubelet.sock left in %s: %v", DevicePluginDir, err)
		}
		// The machine lock is free again.
		lctx, lcancel := context.WithTimeout(ctx, 2*time.Second)
		defer lcancel()
		l, _, err := acquireLock(lctx, DefaultLockPath, t.Logf)
		if err != nil {
			t.Fatalf("machine lock still held after Stop: %v", err)
		}
		if err := l.release(); err != nil {
			t.Error(err)
		}
	})
}

// runPod runs a busybox pod that writes a termination message and a log
// line, and checks both through the API.
func runPod(ctx context.Context, t *testing.T, c *Cluster, name string) {
	t.Helper()
	pods := c.Clientset().CoreV1().Pods(metav1.NamespaceDefault)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			HostNetwork:                   true,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: new(int64(1)),
			Containers: []corev1.Container{{
				Name:            "main",
				Image:           BusyboxImage,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"sh", "-c", `echo "log line from $0"; printf 'done on %s' "$(hostname)" > /dev/termination-log`, name},
			}},
		},
	}
	start := time.Now()
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	t.Cleanup(func() {
		_ = pods.Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))})
	})
	var got *corev1.Pod
	err := c.waitFor(ctx, "pod "+name+" to succeed", c.watchedProcs(), func(ctx context.Context) error {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		got = p
		switch p.Status.Phase {
		case corev1.PodSucceeded:
			return nil
		case corev1.PodFailed:
			return nil // reported below
		}
		return errors.New("pod phase " + string(p.Status.Phase))
	})
	if err != nil {
		t.Fatalf("%v\npod status: %+v", err, got.Status)
	}
	t.Logf("pod %s ran on %s and succeeded in %s", name, got.Spec.NodeName, time.Since(start).Round(100*time.Millisecond))
	if got.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("pod %s failed: %+v", name, got.Status)
	}
	if got.Spec.NodeName != c.NodeName() {
		t.Errorf("pod ran on %q, want %q", got.Spec.NodeName, c.NodeName())
	}
	host, _ := os.Hostname()
	term := got.Status.ContainerStatuses[0].State.Terminated
	if term == nil || term.Message != "done on "+host {
		t.Errorf("termination message = %+v, want %q", term, "done on "+host)
	}
	logs, err := pods.GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Errorf("pod logs: %v", err)
	} else if strings.TrimSpace(string(logs)) != "log line from "+name {
		t.Errorf("pod logs = %q, want %q", logs, "log line from "+name)
	}
}
