package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// leftovers is what a test left of device plugins on the node: resources
// the kubelet still offers, and plugin sockets something still answers on.
type leftovers struct {
	// offered maps each device-plugin resource with allocatable devices
	// to their count.
	offered map[string]int64
	// serving are the plugin sockets a process answers on.
	serving []string
}

func (l leftovers) String() string {
	names := make([]string, 0, len(l.offered))
	for name := range l.offered {
		names = append(names, name)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = fmt.Sprintf("%s=%d", name, l.offered[name])
	}
	return strings.Join(parts, ", ")
}

// checkDevicePlugins fails a test after which the node still offers
// device-plugin resources, once the kubelet had time to see its plugins
// go: every test stops what it started. Where no plugin serves them any
// more there are two causes, told apart by the kubelet's own count of
// allocatable devices (its PodResources API):
//   - the kubelet counts them: it holds a stale endpoint (a plugin that
//     registered twice on one socket path), and the test fails;
//   - it counts none: only the Node object is stale, the kubelet's status
//     updates being computed against an old cached copy of its Node (seen
//     after the API server restarted), which no plugin causes; it is
//     logged.
//
// Either way the kubelet is restarted, so that later tests that count
// devices start clean, and the node must then offer nothing.
func (s *Suite) checkDevicePlugins(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := s.c.waitNoDevicePlugins(ctx, 20*time.Second)
	switch {
	case err != nil:
		t.Errorf("check the node's device-plugin resources after the test: %v", err)
		return
	case len(l.offered) == 0:
		return
	case len(l.serving) > 0:
		t.Errorf("after the test the node still offers %s, served on %s: the test left a device plugin running", l, strings.Join(l.serving, ", "))
		return
	}
	counted, err := s.c.kubeletAllocatable(ctx)
	switch {
	case err != nil:
		t.Errorf("after the test the node still offers %s with no device plugin serving, and the kubelet's own count cannot be read: %v", l, err)
	case len(counted.offered) > 0:
		t.Errorf("after the test the kubelet still counts %s allocatable with no device plugin serving (the node offers %s): it holds a stale endpoint; restarting the kubelet so that later tests start clean", counted, l)
		t.Logf("the kubelet's device-plugin log lines before the restart:\n%s", s.c.devicePluginLog(20000, 60))
	default:
		t.Logf("after the test the node still offers %s, though the kubelet counts none of those devices: its status updates work from a stale cached copy of the Node; restarting the kubelet", l)
	}
	if err := s.c.RestartKubelet(ctx); err != nil {
		t.Errorf("restart the kubelet: %v", err)
		return
	}
	if l, err := s.c.waitNoDevicePlugins(ctx, 30*time.Second); err != nil || len(l.offered) > 0 {
		t.Errorf("after a kubelet restart the node still offers %s (%v)", l, err)
	}
}

// waitNoDevicePlugins waits up to limit until the node offers no
// device-plugin resource, and returns what is left then. It fails early,
// with that component's log, when a cluster process exits.
func (c *Cluster) waitNoDevicePlugins(ctx context.Context, limit time.Duration) (leftovers, error) {
	lctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var offered map[string]int64
	err := c.waitFor(lctx, "the node to offer no device-plugin resource", c.watchedProcs(), func(ctx context.Context) error {
		now, err := c.offeredDevices(ctx)
		if err != nil {
			return err
		}
		if offered = now; len(offered) > 0 {
			return fmt.Errorf("it offers %s", leftovers{offered: offered})
		}
		return nil
	})
	// What is left counts when limit passed (not ctx, not a process exit)
	// and the last successful read found devices.
	if err == nil || ctx.Err() != nil || lctx.Err() == nil || len(offered) == 0 {
		return leftovers{}, err
	}
	return leftovers{offered: offered, serving: servingSockets(ctx)}, nil
}

// offeredDevices returns the node's allocatable extended resources (those
// device plugins advertise) that are not zero.
func (c *Cluster) offeredDevices(ctx context.Context) (map[string]int64, error) {
	node, err := c.clientset.CoreV1().Nodes().Get(ctx, c.opts.NodeName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get node %s: %w", c.opts.NodeName, err)
	}
	out := map[string]int64{}
	for name, q := range node.Status.Allocatable {
		if extended(name) && q.Value() > 0 {
			out[string(name)] = q.Value()
		}
	}
	return out, nil
}

// extended reports whether a resource name is an extended resource: one
// with a domain outside kubernetes.io (hugepages-* and the native
// resources have none).
func extended(name corev1.ResourceName) bool {
	domain, _, ok := strings.Cut(string(name), "/")
	return ok && domain != "kubernetes.io" && !strings.HasSuffix(domain, ".kubernetes.io")
}

// servingSockets returns the plugin sockets of the device-plugin
// directory that a process answers on (the kubelet's own excepted).
func servingSockets(ctx context.Context) []string {
	paths, _ := filepath.Glob(filepath.Join(DevicePluginDir, "*.sock"))
	var out []string
	for _, p := range paths {
		if filepath.Base(p) == "kubelet.sock" {
			continue
		}
		if fi, err := os.Lstat(p); err != nil || fi.Mode()&os.ModeSocket == 0 {
			continue
		}
		d := net.Dialer{Timeout: time.Second}
		conn, err := d.DialContext(ctx, "unix", p)
		if err == nil {
			_ = conn.Close()
			out = append(out, p)
		}
	}
	return out
}

// devicePluginLog returns the last n lines about device plugins among the
// last of lines of the kubelet's log.
func (c *Cluster) devicePluginLog(of, n int) string {
	var out []string
	for line := range strings.SplitSeq(c.LogTail(compKubelet, of), "\n") {
		if strings.Contains(line, "evice plugin") || strings.Contains(line, "resourceName") || strings.Contains(line, "endpoint") {
			out = append(out, line)
		}
	}
	return strings.Join(out[max(len(out)-n, 0):], "\n")
}

// kubeletAllocatable returns the devices the kubelet's device manager
// counts allocatable, by resource, as its PodResources API reports them:
// what the Node's allocatable should show.
func (c *Cluster) kubeletAllocatable(ctx context.Context) (leftovers, error) {
	conn, err := grpc.NewClient("unix://"+c.PodResourcesSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return leftovers{}, fmt.Errorf("PodResources: %w", err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := podresourcesapi.NewPodResourcesListerClient(conn).GetAllocatableResources(ctx, &podresourcesapi.AllocatableResourcesRequest{})
	if err != nil {
		return leftovers{}, fmt.Errorf("PodResources GetAllocatableResources: %w", err)
	}
	l := leftovers{offered: map[string]int64{}}
	for _, d := range resp.GetDevices() {
		l.offered[d.GetResourceName()] += int64(len(d.GetDeviceIds()))
	}
	return l, nil
}
