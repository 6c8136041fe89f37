// Command floor is the memory benchmark's floor (clientset): the least a
// Kubernetes node agent written in Go the conventional way does. It
// watches its own Node with client-go's clientset and shared informer
// factory (one informer, the list and watch narrowed to the Node by name)
// and serves gRPC (the standard health service) on a unix socket, as
// every device plugin must, and nothing else. The benchmark measures its
// resident memory beside carve-agent's.
//
//	floor --kubeconfig FILE --node-name NAME --socket PATH --memstats FILE
//
// It prints "ready" once the informer has synced and the socket listens,
// writes its Go runtime's memory figures to the --memstats file (JSON,
// replaced atomically) on each SIGUSR1, and runs until SIGTERM or SIGINT.
package main

import (
	"context"

	"github.com/carve-dev/carve/test/bench/memory/floorkit"
	"github.com/carve-dev/carve/test/bench/memory/floorkit/clientsetfloor"
)

func main() {
	floorkit.Main("floor", nil, func(ctx context.Context, f floorkit.Flags) error {
		_, err := clientsetfloor.WatchNode(ctx, f.Kubeconfig, f.Node)
		return err
	})
}
