// Command carve-scale runs many carve agents against one real local
// kube-apiserver and measures a fleet-wide repartition: N agents in this
// process, each on its own simulated H100 (every MIG operation taking
// --op-latency) and its own Node object (no kubelet), with --advertise
// none and no PodResources. For each N and each rollout bound it flips the
// whole fleet from whole GPUs to a MIG profile and reports how long all
// nodes take to converge, the most nodes ever in a disruptive change at
// once (from a Lease watch outside the agents), the API requests per node
// (counted on each agent's own connection, and the API server's request
// counter as a cross-check), and the process's CPU time and memory. It
// writes docs/scale.md and its plot with --write. `make scale` runs it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/carve-dev/carve/test/cluster"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "carve-scale:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("carve-scale", flag.ContinueOnError)
	nodesFlag := fs.String("nodes", "50,200,500", "fleet sizes, in order")
	boundsFlag := fs.String("bounds", "100%,10%", "rollout.maxUnavailable values to run each size with")
	opLatency := fs.Duration("op-latency", 300*time.Millisecond, "how long each simulated MIG operation takes")
	steady := fs.Duration("steady", time.Minute, "how long to count requests with nothing to change")
	limit := fs.Duration("limit", 10*time.Minute, "give up on a run that has not converged after this long")
	write := fs.String("write", "", "write the results to this markdown file and its plot beside it (.svg)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	sizes, err := parseSizes(*nodesFlag)
	if err != nil {
		return err
	}
	bounds := strings.Split(*boundsFlag, ",")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := cluster.Start(ctx, cluster.Options{Owner: "carve-scale", Log: os.Stderr})
	if err != nil {
		return fmt.Errorf("start the local cluster: %w", err)
	}
	defer func() {
		if err := c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "carve-scale: stop the cluster:", err)
		}
	}()
	var results []result
	stoppedAt := ""
sizes:
	for _, n := range sizes {
		for _, b := range bounds {
			fmt.Fprintf(os.Stderr, "carve-scale: %d agents, maxUnavailable %s\n", n, b)
			r, err := measure(ctx, c, run1{nodes: n, bound: b, opLatency: *opLatency, steady: *steady, limit: *limit})
			if err != nil {
				stoppedAt = fmt.Sprintf("%d agents, maxUnavailable %s: %v", n, b, err)
				fmt.Fprintln(os.Stderr, "carve-scale: stopped at", stoppedAt)
				break sizes
			}
			fmt.Fprintln(os.Stderr, "carve-scale:", r.line())
			results = append(results, r)
		}
	}
	if len(results) == 0 {
		return errors.New("no run finished: " + stoppedAt)
	}
	report := render(results, *opLatency, *steady, stoppedAt)
	fmt.Print(report)
	if *write != "" {
		if err := os.WriteFile(*write, []byte(report), 0o644); err != nil {
			return err
		}
		svg := strings.TrimSuffix(*write, ".md") + ".svg"
		if err := os.WriteFile(svg, []byte(plot(results)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func parseSizes(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--nodes %q: want sizes from 1, comma-separated", s)
		}
		out = append(out, n)
	}
	return out, nil
}
