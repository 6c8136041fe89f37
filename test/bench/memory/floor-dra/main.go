// Command floor-dra is the memory benchmark's floor (DRA library): the
// floor program (its Node watched through client-go's clientset, one gRPC
// health server on a unix socket) plus the kubelet side of a DRA driver
// served by k8s.io/dynamic-resource-allocation's kubeletplugin, with a
// driver that prepares nothing, registered with the node's kubelet. It is
// what a DRA driver written with that library can't go below.
//
//	floor-dra --kubeconfig FILE --node-name NAME --socket PATH --memstats FILE \
//	    --kubelet-root-dir DIR --driver-name NAME
//
// It prints "ready" once the kubelet has registered the driver, writes its
// memory figures on SIGUSR1 and stops as the floor does.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/carve-dev/carve/test/bench/memory/floorkit"
	"github.com/carve-dev/carve/test/bench/memory/floorkit/clientsetfloor"
)

func main() {
	var rootDir, driver string
	flags := func(fs *flag.FlagSet) {
		fs.StringVar(&rootDir, "kubelet-root-dir", "", "the kubelet's root directory (required)")
		fs.StringVar(&driver, "driver-name", "", "the DRA driver's name, a DNS subdomain (required)")
	}
	floorkit.Main("floor-dra", flags, func(ctx context.Context, f floorkit.Flags) error {
		if rootDir == "" || driver == "" {
			return errors.New("--kubelet-root-dir and --driver-name are required")
		}
		client, err := clientsetfloor.WatchNode(ctx, f.Kubeconfig, f.Node)
		if err != nil {
			return err
		}
		data := filepath.Join(rootDir, "plugins", driver)
		if err := os.MkdirAll(data, 0o750); err != nil {
			return fmt.Errorf("DRA kubelet plugin: %w", err)
		}
		helper, err := kubeletplugin.Start(ctx, noop{},
			kubeletplugin.DriverName(driver), kubeletplugin.NodeName(f.Node), kubeletplugin.KubeClient(client),
			kubeletplugin.RegistrarDirectoryPath(filepath.Join(rootDir, "plugins_registry")),
			kubeletplugin.PluginDataDirectoryPath(data))
		if err != nil {
			return fmt.Errorf("DRA kubelet plugin: %w", err)
		}
		context.AfterFunc(ctx, helper.Stop)
		return waitRegistered(ctx, helper)
	})
}

// waitRegistered waits until the kubelet has registered the driver.
func waitRegistered(ctx context.Context, helper *kubeletplugin.Helper) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if st := helper.RegistrationStatus(); st != nil && st.PluginRegistered {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the kubelet did not register the driver: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// noop is a DRA driver that has no devices: it prepares and unprepares
// nothing and reports no health.
type noop struct{}

func (noop) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		out[c.UID] = kubeletplugin.PrepareResult{Err: errors.New("floor-dra prepares no claim")}
	}
	return out, nil
}

func (noop) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		out[c.UID] = nil
	}
	return out, nil
}

func (noop) HandleError(context.Context, error, string) {}

func (noop) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}
