// Command floor is the memory benchmark's floor: the least a Kubernetes
// node agent written in Go does. It watches its own Node with client-go
// (one informer, the list and watch narrowed to the Node by name) and
// serves gRPC (the standard health service) on a unix socket, as every
// device plugin must, and nothing else. The benchmark measures its
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
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"runtime/metrics"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file (required)")
	node := flag.String("node-name", "", "the Node to watch (required)")
	socket := flag.String("socket", "", "unix socket of the gRPC server (required)")
	memstats := flag.String("memstats", "", "file the Go runtime's memory figures are written to on SIGUSR1 (required)")
	flag.Parse()
	if *kubeconfig == "" || *node == "" || *socket == "" || *memstats == "" {
		fmt.Fprintln(os.Stderr, "floor: --kubeconfig, --node-name, --socket and --memstats are required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	go writeMemStatsOnSignal(ctx, *memstats)
	err := run(ctx, *kubeconfig, *node, *socket)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
}

// run watches the Node and serves gRPC until ctx ends.
func run(ctx context.Context, kubeconfig, node, socket string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("API client: %w", err)
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", node).String()
	}))
	nodes := factory.Core().V1().Nodes().Informer()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), nodes.HasSynced) {
		return fmt.Errorf("node %s: cache did not sync: %w", node, ctx.Err())
	}
	_ = os.Remove(socket)
	lis, err := (&net.ListenConfig{}).Listen(ctx, "unix", socket)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", socket, err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	fmt.Println("ready")
	select {
	case <-ctx.Done():
		srv.GracefulStop()
		return nil
	case err := <-errc:
		if errors.Is(err, grpc.ErrServerStopped) {
			return nil
		}
		return fmt.Errorf("gRPC server: %w", err)
	}
}

// writeMemStatsOnSignal writes the runtime's memory figures to path on
// each SIGUSR1 until ctx ends, with the field names of the benchmark's
// GoMem.
func writeMemStatsOnSignal(ctx context.Context, path string) {
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(usr1)
	for {
		select {
		case <-ctx.Done():
			return
		case <-usr1:
			if err := writeMemStats(path); err != nil {
				fmt.Fprintln(os.Stderr, "floor:", err)
			}
		}
	}
}

// writeMemStats writes the runtime's memory figures to path.
func writeMemStats(path string) error {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	samples := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
	metrics.Read(samples)
	b, err := json.Marshal(map[string]any{
		"HeapInuse": ms.HeapInuse, "HeapRetained": ms.HeapIdle - ms.HeapReleased, "HeapReleased": ms.HeapReleased,
		"HeapAlloc": ms.HeapAlloc, "Stacks": ms.StackInuse,
		"Runtime": ms.MSpanSys + ms.MCacheSys + ms.GCSys + ms.BuckHashSys + ms.OtherSys, "Sys": ms.Sys,
		"Goroutines": runtime.NumGoroutine(),
		"GOGC":       samples[0].Value.Uint64(), "MemLimit": samples[1].Value.Uint64(),
	})
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
