package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/carve-dev/carve/test/bench/allocate"
	"github.com/carve-dev/carve/test/bench/claims"
	"github.com/carve-dev/carve/test/bench/live"
	"github.com/carve-dev/carve/test/bench/memory"
	"github.com/carve-dev/carve/test/bench/packing"
	"github.com/carve-dev/carve/test/bench/planning"
	"github.com/carve-dev/carve/test/bench/reconfig"
	"github.com/carve-dev/carve/test/bench/report"
	"github.com/carve-dev/carve/test/cluster"
)

// measurement is one package of test/bench.
type measurement struct {
	name, title string
	// cluster is true for measurements on the local cluster.
	cluster bool
	run     func(ctx context.Context, e *environment) ([]report.Table, error)
}

// measurements lists them in the order they run and appear.
func measurements() []measurement {
	return []measurement{
		{name: "allocate", title: "Allocate over gRPC", run: func(ctx context.Context, e *environment) ([]report.Table, error) {
			return allocate.Run(ctx, allocate.Options{Short: e.short, Log: e.log})
		}},
		{name: "reconfig", title: "Reconfiguration work", run: func(ctx context.Context, e *environment) ([]report.Table, error) {
			return reconfig.Run(ctx, reconfig.Options{Short: e.short, Log: e.log})
		}},
		{name: "planning", title: "Planning cost as machines grow", run: func(ctx context.Context, e *environment) ([]report.Table, error) {
			return planning.Run(ctx, planning.Options{Short: e.short, Log: e.log})
		}},
		{name: "packing", title: "Packing on-demand MIG devices", run: func(ctx context.Context, e *environment) ([]report.Table, error) {
			return packing.Run(ctx, packing.Options{Short: e.short, Log: e.log})
		}},
		{name: "live", title: "Live update vs restart, and the API cost", cluster: true, run: func(ctx context.Context, e *environment) ([]report.Table, error) {
			return live.Run(ctx, live.Options{Cluster: e.cluster, Agent: e.agent, Short: e.short, Log: e.log})
		}},
		{name: "memory", title: "Agent memory", cluster: true, run: func(ctx context.Context, e *environment) ([]report.Table, error) {
			return memory.Run(ctx, memory.Options{Cluster: e.cluster, Agent: e.agent, Short: e.short, Log: e.log})
		}},
		{name: "claims", title: "Claim to running under DRA: MIG made on demand", cluster: true, run: func(ctx context.Context, e *environment) ([]report.Table, error) {
			return claims.Run(ctx, claims.Options{Cluster: e.cluster, Agent: e.agent, Short: e.short, Log: e.log})
		}},
	}
}

// names are the measurements' names, for --only.
func names() []string {
	var n []string
	for _, m := range measurements() {
		n = append(n, m.name)
	}
	return n
}

// environment is what the measurements share: the local cluster, started
// by the first measurement that needs it and stopped at the end.
type environment struct {
	agent   string
	short   bool
	log     io.Writer
	cluster *cluster.Cluster
}

// measure runs m and returns its section; an error is kept in it.
func (e *environment) measure(ctx context.Context, m measurement) report.Section {
	s := report.Section{Title: m.title}
	start := time.Now()
	fmt.Fprintf(e.log, "carve-bench: %s\n", m.name)
	if m.cluster {
		if err := e.startCluster(ctx); err != nil {
			s.Err = err
			return s
		}
	}
	s.Tables, s.Err = m.run(ctx, e)
	for _, t := range s.Tables {
		if err := t.Check(); err != nil {
			s.Err = errors.Join(s.Err, err)
		}
	}
	s.Took = time.Since(start)
	return s
}

// startCluster starts the local cluster once.
func (e *environment) startCluster(ctx context.Context) error {
	if e.cluster != nil {
		return nil
	}
	if e.agent == "" {
		return errors.New("--agent is required for the measurements on the local cluster")
	}
	if err := cluster.Available(); err != nil {
		return fmt.Errorf("the local cluster cannot run here (run make bench as root): %w", err)
	}
	c, err := cluster.Start(ctx, cluster.Options{Owner: "carve-bench", Log: e.log, HandleSignals: true})
	if err != nil {
		return fmt.Errorf("start the local cluster: %w", err)
	}
	e.cluster = c
	return nil
}

// close stops the cluster, if it was started.
func (e *environment) close() {
	if e.cluster == nil {
		return
	}
	if err := e.cluster.Stop(); err != nil {
		fmt.Fprintln(e.log, "carve-bench: stop the local cluster:", err)
	}
}
