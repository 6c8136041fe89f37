package memory

import (
	"fmt"
	"math"
	"strconv"

	"github.com/carve-dev/carve/test/bench/report"
)

// Command measures this package's tables on their own.
const Command = "make bench BENCH=memory"

// Tables turns a Result into the tables of docs/benchmarks.md: the RSS
// per state in device-plugin mode against the floors, the goal and the
// figure before; the same in DRA mode against the floor (DRA library);
// and where the RSS goes. short marks figures of the short mode.
func Tables(res Result, short bool) []report.Table {
	tables := []report.Table{rssTable(res), draTable(res), breakdownTable(res)}
	if short {
		tables[0].Notes = append(tables[0].Notes, "Short mode (`make test`): short idle periods and two repartitions; not figures to publish.")
	}
	return tables
}

// floorRatio is the goals' bound against a floor: carve-agent's settled
// RSS at most this multiple of it.
const floorRatio = 1.05

const floorsAbout = "Baselines, each a Go program started in the same run that does only what any node agent must " +
	"(watch its own Node with one informer narrowed by a field selector, serve gRPC's health service on a unix socket): " +
	"*floor (clientset)* (`test/bench/memory/floor`) does it the conventional way, with client-go's clientset and " +
	"shared informer factory, so it links the typed clients, informers and API types of every API group: what an " +
	"agent written with the clientset can't go below; *floor (narrow client)* (`test/bench/memory/floor-narrow`) does " +
	"the same with a client of core/v1 alone (a REST client over a scheme of core/v1's types, an informer over a list " +
	"and watch written on it), as carve-agent's client does for the four groups it uses: what an agent that links " +
	"only what it calls can go down to."

// rssTable is carve-agent's RSS per state in device-plugin mode, with
// its baselines.
func rssTable(res Result) report.Table {
	t := report.Table{
		Title:   "carve-agent memory (RSS)",
		Command: Command,
		About: "The resident memory (VmRSS of /proc/PID/status) of the carve-agent binary, built as `make build` builds it, " +
			"running as a process on the local cluster's node with a simulated DGX H100 (`--gpus sim:dgx-h100 --sim-latency none`), " +
			"in device-plugin mode with everything it does in production (metrics, health, rollout), its device plugin " +
			"registered with the real kubelet. Read in three states, each after its change is complete and " +
			"the agent has idled: whole GPUs after start-up; whole GPUs again after repartitions between two MIG geometries; " +
			"and 896 devices (8 GPUs x 7 MIG 1g.10gb x 16 replicas, checked on the Node's allocatable). *max* is the most RSS " +
			"sampled every 100 ms from the start of the change. " + floorsAbout + " Also the issue's goal, and the figure " +
			"measured before the work on memory (issue 13: 64 MiB, whole GPUs after a few repartitions).",
		Columns: []string{"state", "devices", "max", "settled", "floor (clientset)", "settled / floor (clientset)",
			"floor (narrow client)", "settled / floor (narrow client)", "goal", "settled / goal", "before", "settled / before"},
	}
	for _, r := range res.Agent {
		t.Rows = append(t.Rows, []string{
			r.State, strconv.Itoa(r.Devices), report.MiB(r.Max), report.MiB(r.Settled.RSS),
			report.MiB(res.Floor.Settled.RSS), ratio(r.Settled.RSS, res.Floor.Settled.RSS),
			report.MiB(res.NarrowFloor.Settled.RSS), ratio(r.Settled.RSS, res.NarrowFloor.Settled.RSS),
			report.MiB(Goal), ratio(r.Settled.RSS, Goal), report.MiB(Before), ratio(r.Settled.RSS, Before),
		})
	}
	g := rssGoal("device-plugin mode", "floor (clientset)", res.Agent, res.Floor)
	t.Goals = []report.Goal{g}
	t.Notes = append(t.Notes, goalNote(g), narrowNote(res))
	return t
}

// draTable is carve-agent's RSS in DRA mode, against the floor (DRA
// library).
func draTable(res Result) report.Table {
	t := report.Table{
		Title:   "carve-agent memory as a DRA driver (RSS)",
		Command: Command,
		About: "The same binary, in the same run, started with `--advertise dra`: it publishes its devices in a ResourceSlice " +
			"and registers as the DRA driver gpu.carve.dev with the real kubelet. Read idle on whole GPUs, and with the dense " +
			"profile of the table above: under DRA its 8 x 7 MIG 1g.10gb are 56 devices of the ResourceSlice, each shared " +
			"by 16 allocations through a consumable capacity rather than published 16 times (checked on the node's " +
			"ResourceSlices). Baseline: *floor (DRA library)* (`test/bench/memory/floor-dra`), the floor (clientset) plus " +
			"the kubelet side of a DRA driver served by the DRA library (k8s.io/dynamic-resource-allocation's kubeletplugin, " +
			"which takes the clientset), with a driver that prepares nothing, registered with the same kubelet under a name " +
			"of its own: what a DRA driver written with that library can't go below. carve-agent serves the kubelet's DRA " +
			"registration and DRAPlugin gRPC services itself, so it carries neither that library nor the clientset.",
		Columns: []string{"state", "devices in the ResourceSlice", "max", "settled", "floor (DRA library)", "settled / floor (DRA library)",
			"floor (narrow client)", "settled / floor (narrow client)", "goal", "settled / goal"},
	}
	for _, r := range res.DRA {
		t.Rows = append(t.Rows, []string{
			r.State, strconv.Itoa(r.Devices), report.MiB(r.Max), report.MiB(r.Settled.RSS),
			report.MiB(res.DRAFloor.Settled.RSS), ratio(r.Settled.RSS, res.DRAFloor.Settled.RSS),
			report.MiB(res.NarrowFloor.Settled.RSS), ratio(r.Settled.RSS, res.NarrowFloor.Settled.RSS),
			report.MiB(Goal), ratio(r.Settled.RSS, Goal),
		})
	}
	g := rssGoal("DRA mode", "floor (DRA library)", res.DRA, res.DRAFloor)
	t.Goals = []report.Goal{g}
	t.Notes = append(t.Notes, goalNote(g))
	return t
}

// rssGoal checks the readings of one mode against the goal and its
// floor: every settled RSS at most Goal and at most floorRatio times the
// floor.
func rssGoal(mode, floorName string, readings []Reading, floor Reading) report.Goal {
	var most uint64
	for _, r := range readings {
		most = max(most, r.Settled.RSS)
	}
	f := floor.Settled.RSS
	return report.Goal{
		Name: fmt.Sprintf("carve-agent's RSS in %s, settled in every state, at most %s and at most %.2fx the %s",
			mode, report.MiB(Goal), floorRatio, floorName),
		Met: most <= Goal && float64(most) <= floorRatio*float64(f),
		Figures: fmt.Sprintf("at most %s (%s the goal), %s the %s of %s", report.MiB(most), ratio(most, Goal),
			ratio(most, f), floorName, report.MiB(f)),
	}
}

// goalNote states a goal met or not, with its figures.
func goalNote(g report.Goal) string {
	verdict := "Goal not met"
	if g.Met {
		verdict = "Goal met"
	}
	return fmt.Sprintf("%s: %s. Measured: %s.", verdict, g.Name, g.Figures)
}

// narrowNote says how far carve-agent is from the floor (narrow client),
// and what it has beyond it.
func narrowNote(res Result) string {
	dense, n := res.Agent[len(res.Agent)-1], res.NarrowFloor
	return fmt.Sprintf("Against the floor (narrow client), %s, carve-agent is %s at 896 devices. What it has beyond "+
		"that floor is its own work: the NVML binding (cgo), the device-plugin API and its gRPC servers (and the DRA "+
		"kubelet API, linked in either mode), the Prometheus metrics, the profile parser (YAML), schedule windows "+
		"(cron), the planner, health and rollout, the API types of policy, coordination and resource beside core; and "+
		"%d goroutines against the floor's %d, %d threads against %d.",
		report.MiB(n.Settled.RSS), ratio(dense.Settled.RSS, n.Settled.RSS),
		dense.Go.Goroutines, n.Go.Goroutines, dense.Settled.Threads, n.Settled.Threads)
}

// breakdownTable splits the RSS of each state into its parts, beside the
// floors'.
func breakdownTable(res Result) report.Table {
	t := report.Table{
		Title:   "Where carve-agent's memory goes",
		Command: Command,
		About: "The settled readings of the tables above, split. File-backed and anonymous RSS come from /proc/PID/smaps_rollup, " +
			"the binary's own mappings from /proc/PID/smaps; the Go runtime's parts from the Go collector's `go_memstats_*` " +
			"gauges on the agent's /metrics, and for the floors from runtime.ReadMemStats (they write them on SIGUSR1). " +
			"*the rest* is the anonymous RSS less the runtime's parts: C allocations and thread stacks of cgo, less the " +
			"runtime metadata that is mapped but not resident (the runtime counts what it mapped, not what is resident). " +
			"The baselines are the floors, read in the same run.",
		Columns: []string{"part", "idle", "after repartitions", "896 devices", "DRA: idle", "DRA: dense",
			"floor (clientset)", "floor (narrow client)", "floor (DRA library)",
			"896 devices / floor (clientset)", "896 devices / floor (narrow client)"},
	}
	readings := append(append(append([]Reading{}, res.Agent...), res.DRA...), res.Floor, res.NarrowFloor, res.DRAFloor)
	last := res.Agent[len(res.Agent)-1]
	for _, row := range breakdownRows() {
		cells := []string{row.name}
		for _, r := range readings {
			cells = append(cells, row.format(row.get(r)))
		}
		for _, f := range []Reading{res.Floor, res.NarrowFloor} {
			cells = append(cells, report.Ratio(float64(row.get(last)), float64(row.get(f))))
		}
		t.Rows = append(t.Rows, cells)
	}
	t.Notes = append(t.Notes, binaryNote(res), objectsNote(res))
	return t
}

// binaryNote says how much of the binaries is resident, what they link,
// and why how much is resident depends on how they were started.
func binaryNote(res Result) string {
	a := res.Agent[len(res.Agent)-1].Settled
	part := func(m Mem) string { return fmt.Sprintf("%s of %s", report.MiB(m.Binary), report.MiB(m.BinaryMapped)) }
	return fmt.Sprintf("Most of the RSS is the program's binary mapped: %s of carve-agent's loadable segments are resident "+
		"(floor (clientset): %s; floor (narrow client): %s; floor (DRA library): %s). The floor (clientset)'s segments are "+
		"mostly client-go: its clientset and informer factory link the typed clients, informers, listers and API types of "+
		"every API group though it watches one object. carve-agent and the floor (narrow client) link the API types of only "+
		"the groups they call (carve-agent: core, policy, coordination and resource; that floor: core). How much of a "+
		"mapped binary is resident depends "+
		"on the kernel and on how its pages came into the page cache: every program is copied and dropped from the cache "+
		"before it starts, as from a freshly pulled image. A binary just written by the linker can be resident almost whole "+
		"on kernels that keep large folios in the page cache and map them whole on a fault, as the 64 MiB measured before was.",
		part(a), part(res.Floor.Settled), part(res.NarrowFloor.Settled), part(res.DRAFloor.Settled))
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
