// Command carve-chaos writes the report of `make chaos` (docs/reliability.md)
// from the records its runs left in a directory (internal/chaos): per
// scenario a table of the faults tried, the cases that survived and those
// that lost something, the totals, and the date, machine and command. It
// prints the totals, and fails when there are no records or a case lost
// something.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/carve-dev/carve/internal/chaos"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "carve-chaos:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("carve-chaos", flag.ContinueOnError)
	records := fs.String("records", "", "directory of the records (CARVE_CHAOS_OUT of the runs)")
	write := fs.String("write", "docs/reliability.md", "the report to write")
	command := fs.String("command", "make chaos", "the command that ran the chaos tests, for the report")
	started := fs.Int64("started", 0, "when that command started, in Unix seconds (0: unknown)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *records == "" {
		return errors.New("--records is required")
	}
	recs, err := chaos.Read(*records)
	if err != nil {
		return err
	}
	scenarios, total := chaos.Summarise(recs)
	if total.Cases == 0 {
		return fmt.Errorf("no cases recorded in %s", *records)
	}
	now := time.Now()
	info := chaos.Info{
		Date: now, Command: *command, Cores: runtime.NumCPU(), LoadAverage: loadAverage("/proc/loadavg"),
		Platform: runtime.GOOS + "/" + runtime.GOARCH + ", " + runtime.Version(),
	}
	if *started > 0 {
		info.Took = now.Sub(time.Unix(*started, 0))
	}
	var b strings.Builder
	if err := chaos.WriteReport(&b, recs, info); err != nil {
		return err
	}
	if err := os.WriteFile(*write, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write the report: %w", err)
	}
	for _, s := range scenarios {
		fmt.Fprintf(stdout, "%-60s %5d cases %5d survived %3d lost\n", s.Name, s.Total.Cases, s.Total.Survived, s.Total.Lost)
	}
	fmt.Fprintf(stdout, "%-60s %5d cases %5d survived %3d lost (%s written)\n", "all", total.Cases, total.Survived, total.Lost, *write)
	if total.Lost > 0 {
		return fmt.Errorf("%d cases lost something; see %s", total.Lost, *write)
	}
	return nil
}

// loadAverage returns the 1, 5 and 15 minute load averages from a
// /proc/loadavg file, "" when it cannot be read.
func loadAverage(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return ""
	}
	for _, v := range f[:3] {
		if _, err := strconv.ParseFloat(v, 64); err != nil {
			return ""
		}
	}
	return strings.Join(f[:3], " ")
}
