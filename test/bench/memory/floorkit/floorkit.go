// Package floorkit is what the memory benchmark's floor programs share:
// their flags, the gRPC health server on a unix socket every one of them
// serves, and the Go runtime's memory figures they write on SIGUSR1. It
// imports no Kubernetes client, so each floor links only the client it
// is about.
package floorkit

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
)

// Flags are the flags every floor takes.
type Flags struct {
	Kubeconfig, Node, Socket, MemStats string
}

// Register adds the common flags to fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.Kubeconfig, "kubeconfig", "", "kubeconfig file (required)")
	fs.StringVar(&f.Node, "node-name", "", "the Node to watch (required)")
	fs.StringVar(&f.Socket, "socket", "", "unix socket of the gRPC server (required)")
	fs.StringVar(&f.MemStats, "memstats", "", "file the Go runtime's memory figures are written to on SIGUSR1 (required)")
}

// Check returns an error naming the missing flags.
func (f *Flags) Check() error {
	if f.Kubeconfig == "" || f.Node == "" || f.Socket == "" || f.MemStats == "" {
		return errors.New("--kubeconfig, --node-name, --socket and --memstats are required")
	}
	return nil
}

// Main runs a floor: it parses the flags, writes the memory figures on
// SIGUSR1, runs start (which watches the Node and whatever the floor
// adds), serves the health service on the socket, prints "ready", and
// runs until SIGTERM or SIGINT. name prefixes its errors; extra registers
// the floor's own flags.
func Main(name string, extra func(*flag.FlagSet), start func(ctx context.Context, f Flags) error) {
	var f Flags
	f.Register(flag.CommandLine)
	if extra != nil {
		extra(flag.CommandLine)
	}
	flag.Parse()
	if err := f.Check(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	go writeMemStatsOnSignal(ctx, name, f.MemStats)
	err := start(ctx, f)
	if err == nil {
		err = serve(ctx, f.Socket)
	}
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

// serve serves the standard gRPC health service on a unix socket until
// ctx ends, having printed "ready".
func serve(ctx context.Context, socket string) error {
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
func writeMemStatsOnSignal(ctx context.Context, name, path string) {
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(usr1)
	for {
		select {
		case <-ctx.Done():
			return
		case <-usr1:
			if err := writeMemStats(path); err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
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
		return fmt.Errorf("memstats: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("memstats: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("memstats: %w", err)
	}
	return nil
}
