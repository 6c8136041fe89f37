package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	stubplugin "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/plugin/v1beta1"
)

// staleResource is the resource the stale-endpoint check advertises.
const staleResource = "example.com/stale"

// checkStaleEndpoint makes the kubelet hold a stale endpoint as a device
// plugin that registers twice on one socket path does, and checks that
// the node and the kubelet's own count (what the suite's after-test check
// reads) show it, and that a kubelet restart clears it: the kubelet
// refuses the second registration ("already connected") and, in refusing,
// forgets its client of the first, so when the plugin stops nothing
// disconnects the endpoint and its devices stay allocatable.
func checkStaleEndpoint(ctx context.Context, t *testing.T, c *Cluster) {
	t.Helper()
	devs := []*pluginapi.Device{{ID: "a", Health: pluginapi.Healthy}, {ID: "b", Health: pluginapi.Healthy}}
	stub := stubplugin.NewDevicePluginStub(klog.Background(), devs, filepath.Join(DevicePluginDir, "stale-check.sock"), staleResource, false, false)
	if err := stub.Start(ctx); err != nil {
		t.Fatalf("start the stub plugin: %v", err)
	}
	// Stop may be called again; this one is for a test that ends early.
	defer func() { _ = stub.Stop(klog.Background()) }()
	if err := stub.Register(ctx, c.KubeletSocket(), staleResource, ""); err != nil {
		t.Fatalf("register the stub plugin: %v", err)
	}
	if err := waitOffered(ctx, c, staleResource, 2); err != nil {
		t.Fatal(err)
	}
	if err := stub.Register(ctx, c.KubeletSocket(), staleResource, ""); err == nil {
		t.Skipf("kubelet %s accepts a second registration on one socket path; no stale endpoint to check", KubernetesVersion())
	}
	if err := stub.Stop(klog.Background()); err != nil {
		t.Fatalf("stop the stub plugin: %v", err)
	}
	l, err := c.waitNoDevicePlugins(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if l.offered[staleResource] != 2 || len(l.serving) > 0 {
		t.Fatalf("after the plugin stopped: offered %s, serving %v; want %s=2 offered with nothing serving (a stale endpoint)", l, l.serving, staleResource)
	}
	// The kubelet itself counts them, which is how the suite's check tells
	// a stale endpoint from a stale Node object.
	counted, err := c.kubeletAllocatable(ctx)
	if err != nil || counted.offered[staleResource] != 2 {
		t.Fatalf("the kubelet's own count after the plugin stopped: %s (%v); want %s=2", counted, err, staleResource)
	}
	if err := c.RestartKubelet(ctx); err != nil {
		t.Fatalf("restart kubelet: %v", err)
	}
	if l, err := c.waitNoDevicePlugins(ctx, 30*time.Second); err != nil || len(l.offered) > 0 {
		t.Fatalf("after a kubelet restart the node still offers %s (%v)", l, err)
	}
}

// waitOffered waits until the node offers n devices of a resource.
func waitOffered(ctx context.Context, c *Cluster, resource string, n int64) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return c.waitFor(ctx, fmt.Sprintf("the node to offer %s=%d", resource, n), c.watchedProcs(), func(ctx context.Context) error {
		offered, err := c.offeredDevices(ctx)
		if err != nil {
			return err
		}
		if offered[resource] != n {
			return fmt.Errorf("it offers %s", leftovers{offered: offered})
		}
		return nil
	})
}
