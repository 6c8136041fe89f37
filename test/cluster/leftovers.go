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

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// stale reports whether the kubelet offers devices that no plugin serves:
// it holds an endpoint whose plugin is gone, which only a kubelet restart
// clears.
func (l leftovers) stale() bool { return len(l.offered) > 0 && len(l.serving) == 0 }

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
// go: every test stops what it started. A kubelet that offers devices no
// plugin serves holds a stale endpoint, which would make every later test
// that counts those devices fail too; it is restarted, so that the failure
// stays with the test that caused it.
func (s *Suite) checkDevicePlugins(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := s.c.waitNoDevicePlugins(ctx, 20*time.Second)
	switch {
	case err != nil:
		t.Errorf("check the node's device-plugin resources after the test: %v", err)
	case l.stale():
		t.Errorf("after the test the kubelet still offers %s, with no device plugin serving: it holds a stale endpoint; restarting the kubelet so that later tests start clean", l)
		if err := s.c.RestartKubelet(ctx); err != nil {
			t.Errorf("restart the kubelet: %v", err)
		}
	case len(l.offered) > 0:
		t.Errorf("after the test the kubelet still offers %s, served on %s: the test left a device plugin running", l, strings.Join(l.serving, ", "))
	}
}

// waitNoDevicePlugins waits up to limit until the node offers no
// device-plugin resource, and returns what is left then.
func (c *Cluster) waitNoDevicePlugins(ctx context.Context, limit time.Duration) (leftovers, error) {
	deadline := time.Now().Add(limit)
	for {
		offered, err := c.offeredDevices(ctx)
		if err != nil || len(offered) == 0 {
			return leftovers{}, err
		}
		if time.Now().After(deadline) {
			return leftovers{offered: offered, serving: servingSockets(ctx)}, nil
		}
		select {
		case <-ctx.Done():
			return leftovers{}, fmt.Errorf("waiting for the kubelet to offer no device-plugin resource: %w", ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
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
