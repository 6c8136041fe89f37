// Command carve-bench is `make bench`: it measures each of carve's headline
// figures beside its baseline in one run and writes them, with the date,
// the machine and the command, into docs/benchmarks.md between its markers.
//
// The measurements are the packages of test/bench, run in this order:
// allocate (Allocate over gRPC against the kubelet's stub device plugin),
// reconfig (carve's planner against wipe-and-recreate), planning (plan time
// as machines grow, against a brute-force search), live (a live update
// against a restart of the plugin process, and the API requests of each,
// on the local cluster) and memory (the agent's RSS, on the local cluster).
// The last two start the local cluster (root; the machine lock) and run
// the carve-agent binary given by --agent.
//
// With --only, the named measurements run and are printed, and the file is
// not written: a partial run must not replace the others' figures.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/carve-dev/carve/test/bench/report"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "carve-bench:", err)
		os.Exit(1)
	}
}

// options are carve-bench's flags.
type options struct {
	only    []string
	write   string
	agent   string
	command string
	short   bool
}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("carve-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	only := fs.String("only", "", "comma-separated measurements to run and print, without writing the file: "+strings.Join(names(), ", "))
	fs.StringVar(&o.write, "write", "", "the benchmarks document to rewrite between its markers (not with --only)")
	fs.StringVar(&o.agent, "agent", "", "the carve-agent binary the cluster measurements run (needed by live and memory)")
	fs.StringVar(&o.command, "command", "make bench", "the command that ran this, for the document")
	fs.BoolVar(&o.short, "short", false, "the short mode of every measurement (what make test runs): few samples, for checking, not for figures")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if *only != "" {
		for n := range strings.SplitSeq(*only, ",") {
			n = strings.TrimSpace(n)
			if !slices.Contains(names(), n) {
				return o, fmt.Errorf("--only: unknown measurement %q (want %s)", n, strings.Join(names(), ", "))
			}
			o.only = append(o.only, n)
		}
		if o.write != "" {
			return o, errors.New("--write with --only would drop the other measurements' figures; run them all to write the file")
		}
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	selected := measurements()
	if o.only != nil {
		selected = slices.DeleteFunc(selected, func(m measurement) bool { return !slices.Contains(o.only, m.name) })
	}
	if o.short {
		o.command += " (short mode)"
	}
	r := report.Run{Command: o.command, Started: time.Now()}
	loadBefore := report.LoadAverage()
	env := &environment{agent: o.agent, short: o.short, log: stderr}
	defer env.close()
	failed := 0
	for _, m := range selected {
		s := env.measure(ctx, m)
		if s.Err != nil {
			failed++
			fmt.Fprintf(stderr, "carve-bench: %s: %v\n", m.name, s.Err)
		}
		for _, t := range s.Tables {
			fmt.Fprint(stdout, t.Markdown())
		}
		r.Sections = append(r.Sections, s)
	}
	r.Finished, r.Machine = time.Now(), report.ReadMachine(loadBefore)
	fmt.Fprint(stdout, r.Goals())
	if o.write != "" {
		if err := report.Rewrite(o.write, r.Markdown()); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "carve-bench: wrote %s (%s)\n", o.write, r.Finished.Sub(r.Started).Round(time.Second))
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d measurements failed", failed, len(selected))
	}
	return nil
}
