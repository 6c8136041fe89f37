package memory

import (
	"fmt"
	"math"
	"strconv"

	"github.com/carve-dev/carve/test/bench/report"
)

// Command measures this package's tables on their own.
const Command = "make bench BENCH=memory"

// Tables turns a Result into the two tables of docs/benchmarks.md: the
// RSS per state against the floor, the goal and the figure before, and
// where the RSS goes. short marks figures of the short mode.
func Tables(res Result, short bool) []report.Table {
	return []report.Table{rssTable(res, short), breakdownTable(res)}
}

// rssTable is carve-agent's RSS per state, with its baselines.
func rssTable(res Result, short bool) report.Table {
	t := report.Table{
		Title:   "carve-agent memory (RSS)",
		Command: Command,
		About: "The resident memory (VmRSS of /proc/PID/status) of the carve-agent binary, built as `make build` builds it, " +
			"running as a process on the local cluster's node with a simulated DGX H100 (`--gpus sim:dgx-h100 --sim-latency none`), " +
			"its device plugin registered with the real kubelet. Read in three states, each after its change is complete and " +
			"the agent has idled: whole GPUs after start-up; whole GPUs again after repartitions between two MIG geometries; " +
			"and 896 devices (8 GPUs x 7 MIG 1g.10gb x 16 replicas, checked on the Node's allocatable). *max* is the most RSS " +
			"sampled every 100 ms from the start of the change. Baselines: the floor, a Go program started in the same run that " +
			"does only what any node agent must (client-go with one informer on its own Node, one gRPC server on a unix socket; " +
			"`test/bench/memory/floor`), which is what no agent written with client-go and gRPC can go below; the issue's goal; " +
			"and the figure measured before the work on memory (issue 13: 64 MiB, whole GPUs after a few repartitions).",
		Columns: []string{"state", "devices", "max", "settled", "floor", "settled / floor", "goal", "settled / goal", "before", "settled / before"},
	}
	for _, r := range res.Agent {
		t.Rows = append(t.Rows, []string{
			r.State, strconv.Itoa(r.Devices), report.MiB(r.Max), report.MiB(r.Settled.RSS),
			report.MiB(res.Floor.Settled.RSS), ratio(r.Settled.RSS, res.Floor.Settled.RSS),
			report.MiB(Goal), ratio(r.Settled.RSS, Goal), report.MiB(Before), ratio(r.Settled.RSS, Before),
		})
	}
	t.Notes = append(t.Notes, goalNote(res))
	if short {
		t.Notes = append(t.Notes, "Short mode (`make test`): short idle periods and two repartitions; not figures to publish.")
	}
	return t
}

// goalNote says whether every state is under the goal.
func goalNote(res Result) string {
	var most uint64
	for _, r := range res.Agent {
		most = max(most, r.Settled.RSS)
	}
	if most < Goal {
		return fmt.Sprintf("Goal met: under %s settled in every state (at most %s); the floor alone is %s.",
			report.MiB(Goal), report.MiB(most), report.MiB(res.Floor.Settled.RSS))
	}
	note := fmt.Sprintf("Goal not met: up to %s settled, against %s; the floor alone is %s",
		report.MiB(most), report.MiB(Goal), report.MiB(res.Floor.Settled.RSS))
	if res.Floor.Settled.RSS*10 >= Goal*9 {
		return note + ", so no agent built on client-go's clientset and gRPC gets under the goal here; " +
			"the next table shows that the binary mapped, not data, makes most of both."
	}
	return note + "."
}

// breakdownTable splits the RSS of each state into its parts, beside the
// floor's.
func breakdownTable(res Result) report.Table {
	t := report.Table{
		Title:   "Where carve-agent's memory goes",
		Command: Command,
		About: "The settled readings of the table above, split. File-backed and anonymous RSS come from /proc/PID/smaps_rollup, " +
			"the binary's own mappings from /proc/PID/smaps; the Go runtime's parts from the Go collector's `go_memstats_*` " +
			"gauges on the agent's /metrics, and for the floor from runtime.ReadMemStats (it writes them on SIGUSR1). " +
			"*the rest* is the anonymous RSS less the runtime's parts: C allocations and thread stacks of cgo, less the " +
			"runtime metadata that is mapped but not resident (the runtime counts what it mapped, not what is resident). " +
			"The baseline is the floor, read in the same run.",
		Columns: []string{"part", "idle", "after repartitions", "896 devices", "floor", "896 devices / floor"},
	}
	rows := breakdownRows()
	for _, row := range rows {
		cells := []string{row.name}
		readings := append(append([]Reading{}, res.Agent...), res.Floor)
		for _, r := range readings {
			cells = append(cells, row.format(row.get(r)))
		}
		last := res.Agent[len(res.Agent)-1]
		cells = append(cells, fmt.Sprint(report.Ratio(float64(row.get(last)), float64(row.get(res.Floor)))))
		t.Rows = append(t.Rows, cells)
	}
	t.Notes = append(t.Notes, binaryNote(res), objectsNote(res))
	return t
}

// binaryNote says how much of the binaries is resident, and why that
// depends on how they were started.
func binaryNote(res Result) string {
	a, f := res.Agent[len(res.Agent)-1].Settled, res.Floor.Settled
	return fmt.Sprintf("Most of the RSS is the program's binary mapped: %s of carve-agent's %s of loadable segments are resident "+
		"(the floor: %s of %s), and most of those segments are client-go (typed clients, informers and API types of every "+
		"API group, linked through the clientset and the informer factory). How much of a mapped binary is resident depends "+
		"on the kernel and on how its pages came into the page cache: both programs are copied and dropped from the cache "+
		"before they start, as from a freshly pulled image. A binary just written by the linker can be resident almost whole "+
		"on kernels that keep large folios in the page cache and map them whole on a fault, as the 64 MiB measured before was.",
		report.MiB(a.Binary), report.MiB(a.BinaryMapped), report.MiB(f.Binary), report.MiB(f.BinaryMapped))
}

// breakdownRow is one part of the RSS.
type breakdownRow struct {
	name   string
	get    func(Reading) int64
	format func(int64) string
}

func breakdownRows() []breakdownRow {
	size := func(v int64) string {
		if v < 0 {
			return "-" + report.MiB(uint64(-v))
		}
		return report.MiB(uint64(v))
	}
	u := func(f func(Reading) uint64) func(Reading) int64 {
		return func(r Reading) int64 { return int64(min(f(r), math.MaxInt64)) }
	}
	count := func(v int64) string { return strconv.FormatInt(v, 10) }
	return []breakdownRow{
		{"RSS", u(func(r Reading) uint64 { return r.Settled.RSS }), size},
		{"file-backed: the program's binary (text, data)", u(func(r Reading) uint64 { return r.Settled.Binary }), size},
		{"the program's loadable segments (file size; the most that can be resident)", u(func(r Reading) uint64 { return r.Settled.BinaryMapped }), size},
		{"file-backed: shared libraries (libc, loader)", u(func(r Reading) uint64 { return r.Settled.Libs }), size},
		{"anonymous", u(func(r Reading) uint64 { return r.Settled.Anon }), size},
		{"anonymous: Go heap in use (HeapInuse)", u(func(r Reading) uint64 { return r.Go.HeapInuse }), size},
		{"anonymous: free heap kept (HeapIdle - HeapReleased)", u(func(r Reading) uint64 { return r.Go.HeapRetained }), size},
		{"anonymous: goroutine stacks", u(func(r Reading) uint64 { return r.Go.Stacks }), size},
		{"anonymous: runtime metadata (spans, GC bitmaps, other; mapped, not all resident)", u(func(r Reading) uint64 { return r.Go.Runtime }), size},
		{"anonymous: the rest (cgo, thread stacks; below zero when metadata is not all resident)", rest, size},
		{"goroutines", func(r Reading) int64 { return int64(r.Go.Goroutines) }, count},
		{"threads", func(r Reading) int64 { return int64(r.Settled.Threads) }, count},
	}
}

// rest is the anonymous RSS the Go runtime's parts do not account for.
func rest(r Reading) int64 {
	goParts := r.Go.HeapInuse + r.Go.HeapRetained + r.Go.Stacks + r.Go.Runtime
	return int64(r.Settled.Anon) - int64(goParts)
}

// objectsNote says how big the objects the informers cache are.
func objectsNote(res Result) string {
	return fmt.Sprintf("What the informers cache is small: at 896 devices the Node is %s of JSON as the API server serves it "+
		"(%s of it managedFields) and the profile ConfigMap %s; decoded, a few times that.",
		kib(res.NodeJSON), kib(res.NodeManagedFieldsJSON), kib(res.ConfigMapJSON))
}

func kib(n int) string { return fmt.Sprintf("%.1f KiB", float64(n)/1024) }

// ratio is report.Ratio of two byte counts.
func ratio(carve, baseline uint64) string { return report.Ratio(float64(carve), float64(baseline)) }
