package live

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/carve-dev/carve/test/bench/report"
)

// command measures this package's tables on their own.
const command = "make bench BENCH=live"

// Known periods of the agent's requests at steady state, for the per-hour
// figure that does not depend on the window catching them.
const (
	// watchRenewal is the mean period at which client-go renews an
	// informer's watch: a timeout drawn between 5 and 10 minutes
	// (k8s.io/client-go/tools/cache, reflector).
	watchRenewal = 7*time.Minute + 30*time.Second
	// agentInformers is the agent's informers: its Node and its ConfigMap.
	agentInformers = 2
)

// tables builds Run's tables.
func (r *results) tables() []report.Table {
	return []report.Table{r.latencyTable(), r.costTable(), r.steadyTable()}
}

// bySide splits a series' samples.
func (s series) bySide(sd side) []sample {
	var out []sample
	for _, smp := range s.samples {
		if smp.side == sd {
			out = append(out, smp)
		}
	}
	return out
}

// durations picks one duration of each sample.
func durations(ss []sample, pick func(sample) time.Duration) []time.Duration {
	out := make([]time.Duration, len(ss))
	for i, s := range ss {
		out[i] = pick(s)
	}
	return out
}

// endPoints are the two end points of the latency table.
var endPoints = []struct {
	name string
	pick func(sample) time.Duration
}{
	{"kubelet's devices", func(s sample) time.Duration { return s.devices }},
	{"Node allocatable", func(s sample) time.Duration { return s.alloc }},
}

// latencyTable is the time from the write to each end point.
func (r *results) latencyTable() report.Table {
	t := report.Table{
		Title:   "Live update vs restart",
		Command: command,
		About:   latencyAbout,
		Columns: []string{"change", "trigger", "end point", "changes (live + restart)", "live p50", "live p90",
			"restart p50", "restart p90", "ratio p50", "ratio p90"},
	}
	for _, s := range r.series {
		lv, rs := s.bySide(live), s.bySide(restart)
		for _, ep := range endPoints {
			l, b := durations(lv, ep.pick), durations(rs, ep.pick)
			row := []string{s.kind, s.trigger.String(), ep.name, fmt.Sprintf("%d + %d", len(l), len(b))}
			for _, p := range []float64{0.5, 0.9} {
				row = append(row, report.Duration(report.Percentile(l, p)))
			}
			for _, p := range []float64{0.5, 0.9} {
				row = append(row, report.Duration(report.Percentile(b, p)))
			}
			for _, p := range []float64{0.5, 0.9} {
				row = append(row, report.Ratio(float64(report.Percentile(l, p)), float64(report.Percentile(b, p))))
			}
			t.Rows = append(t.Rows, row)
		}
	}
	t.Notes = r.latencyNotes()
	t.Goals = []report.Goal{r.latencyGoal()}
	return t
}

const latencyAbout = `Time from the API write that makes a change to the new devices at two end points, on the real local
cluster's kubelet, with the carve-agent binary on a simulated DGX H100 (8x H100-80GB) at ` + "`--sim-latency none`" + `,
so that what is timed is the path from the API to the kubelet (watch, reconcile, plan, advertising), not the
simulated hardware. Two changes: whole GPUs time-sliced 4 <-> 8 times (one resource, 32 <-> 64 devices), and
MIG 1g.10gb x2 + 2g.20gb + 3g.40gb <-> 1g.10gb x7 on every GPU (resources appear and go, MIG devices are destroyed and
created, those that can stay are kept); two triggers: the node label ` + "`carve.dev/profile`" + ` set to the other profile, and an edit of the
ConfigMap that changes the content of the profile the node is on. End points: the **kubelet's devices**, its
PodResources API ` + "`GetAllocatableResources`" + ` asked every 20 ms (the kubelet allows that API 100 calls a
second from all clients; the run fails if the agent's own calls were ever refused) until the changed resources number exactly the
new counts (the kubelet answers from its device manager's devices that the plugins' last ListAndWatch lists
marked healthy; a plugin that disconnects has its devices marked unhealthy, so during a restart they drop out);
each change is then checked to be over (the agent's record says so) with the kubelet's set unchanged since it
was timed; and the **Node allocatable** as the kubelet reports it (status.allocatable through a watch; the
kubelet here updates its node status every 2 s, so this end point adds to the first one the wait for the next
update, on both sides; each write is made at a random instant of that period, a delay drawn uniformly before
it, for otherwise the benchmark's loop locks onto the period and this end point times the loop's phase).
**Baseline**, in the same run and interleaved with the live changes (live, restart, restart, live, ..., each
side as often in each direction; the two cannot run at once on one kubelet, their resource names being the same): the same write, made the way NVIDIA's device plugin takes a configuration
change, by restarting the process so that it reads the new profile at start-up and registers its
device-plugin servers with the kubelet again. The agent gets SIGTERM just before the write (so that it cannot
act on the write itself, as NVIDIA's plugin, which does not watch its configuration, would not), the
write is made, and once the process has exited it is started again with the same flags; the clock starts before
the signal, so the baseline's time includes the stop. Percentiles by nearest rank; ratio is live/restart
(below 1: live is faster).`

// latencyGoal says whether live is faster than restart at p50 in every
// figure.
func (r *results) latencyGoal() report.Goal {
	var faster, all int
	for _, s := range r.series {
		for _, ep := range endPoints {
			all++
			if report.Percentile(durations(s.bySide(live), ep.pick), 0.5) < report.Percentile(durations(s.bySide(restart), ep.pick), 0.5) {
				faster++
			}
		}
	}
	return report.Goal{Name: "a live update reaches the kubelet sooner than a restart (p50)", Met: all > 0 && faster == all,
		Figures: fmt.Sprintf("live faster in %d of %d figures", faster, all)}
}

// latencyNotes say whether live is faster than restart.
func (r *results) latencyNotes() []string {
	var faster, slower []string
	for _, s := range r.series {
		for _, ep := range endPoints {
			l := report.Percentile(durations(s.bySide(live), ep.pick), 0.5)
			b := report.Percentile(durations(s.bySide(restart), ep.pick), 0.5)
			what := fmt.Sprintf("%s by %s, %s (%s)", s.kind, s.trigger, ep.name, report.Ratio(float64(l), float64(b)))
			if l < b {
				faster = append(faster, what)
			} else {
				slower = append(slower, what)
			}
		}
	}
	notes := []string{fmt.Sprintf("Goal: a live update reaches the kubelet sooner than a restart. At p50, live is faster in %d of %d "+
		"figures.", len(faster), len(faster)+len(slower))}

	if len(slower) > 0 {
		notes = append(notes, "Not faster: "+strings.Join(slower, "; ")+". The Node allocatable follows the kubelet's "+
			"2 s node status period on both sides, so its ratio says little below that resolution.")
	}
	notes = append(notes, fmt.Sprintf("Restart side: the old process took %s to exit at p50 (included in its times).",
		report.Duration(report.Percentile(r.stopTimes(), 0.5))))
	return notes
}

// stopTimes are the restarts' stop times.
func (r *results) stopTimes() []time.Duration {
	var out []time.Duration
	for _, s := range r.series {
		out = append(out, durations(s.bySide(restart), func(s sample) time.Duration { return s.stop })...)
	}
	return out
}

// meanCost is the mean cost of the samples.
func meanCost(ss []sample) requests {
	var sum requests
	for _, s := range ss {
		sum = sum.plus(s.cost)
	}
	if len(ss) == 0 {
		return sum
	}
	return requests{reads: sum.reads / float64(len(ss)), writes: sum.writes / float64(len(ss))}
}

// count writes a mean count of requests.
func count(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// costTable is the agent's requests per repartition.
func (r *results) costTable() report.Table {
	t := report.Table{
		Title:   "API requests per repartition: live update vs restart",
		Command: command,
		About:   costAbout,
		Columns: []string{"change", "trigger", "live reads", "live writes", "restart reads", "restart writes", "ratio reads", "ratio writes"},
	}
	var lv, rs []sample
	for _, s := range r.series {
		l, b := meanCost(s.bySide(live)), meanCost(s.bySide(restart))
		lv, rs = append(lv, s.bySide(live)...), append(rs, s.bySide(restart)...)
		t.Rows = append(t.Rows, []string{s.kind, s.trigger.String(), count(l.reads), count(l.writes), count(b.reads), count(b.writes),
			report.Ratio(l.reads, b.reads), report.Ratio(l.writes, b.writes)})
	}
	l, b := meanCost(lv), meanCost(rs)
	t.Goals = []report.Goal{{Name: "a live repartition costs the API server fewer requests than a restart",
		Met: l.reads+l.writes < b.reads+b.writes,
		Figures: fmt.Sprintf("live %s reads and %s writes per repartition, a restart %s and %s", count(l.reads), count(l.writes),
			count(b.reads), count(b.writes))}}
	t.Notes = []string{fmt.Sprintf("Goal: a live repartition costs the API server fewer requests than a restart. Over all "+
		"changes, live makes %s reads and %s writes per repartition, a restart %s and %s (ratios %s and %s).",
		count(l.reads), count(l.writes), count(b.reads), count(b.writes), report.Ratio(l.reads, b.reads), report.Ratio(l.writes, b.writes))}
	return t
}

const costAbout = `The agent's requests to the API server per repartition, mean over the changes of the table above (same
run, same changes), read from the API server's own metrics on the local cluster: the agent runs under a
ServiceAccount of its own with configs/deploy's RBAC and a token from the TokenRequest API, and two FlowSchemas
that match only that ServiceAccount (one for create, update, patch, delete and deletecollection, one for get,
list and watch; matching precedence 90, before every built-in FlowSchema that could match it) make
` + "`apiserver_flowcontrol_dispatched_requests_total`" + ` count its writes and reads apart (a watch is counted
once, when it starts). Counted from just before the write to 0.3 s after the agent's record says the change is
done. Each run checks that the FlowSchemas count exactly a known read and two known writes of the
ServiceAccount and none of the admin's requests. **Baseline**: the restart (a new process lists and watches
its Node and ConfigMap again).
MIG changes are disruptive and take a rollout slot (a Lease created and deleted).`

// steadyTable is the agent's requests per hour with no change.
func (r *results) steadyTable() report.Table {
	perHour := float64(time.Hour) / float64(r.steadyWindow)
	measured := requests{reads: r.steady.reads * perHour, writes: r.steady.writes * perHour}
	known := requests{reads: agentInformers * float64(time.Hour) / float64(watchRenewal), writes: 0}
	row := func(how string, v requests) []string {
		return []string{how, count(v.reads), count(v.writes), count(known.reads), "0", report.Ratio(v.reads, known.reads), report.Ratio(v.writes, 0)}
	}
	t := report.Table{
		Title:   "API requests per node per hour at steady state",
		Command: command,
		About:   steadyAbout,
		Columns: []string{"how", "reads/hour", "writes/hour", "baseline reads/hour", "baseline writes/hour", "ratio reads", "ratio writes"},
		Rows: [][]string{
			row(fmt.Sprintf("measured over %s, %s to %s after the agent started (%s reads, %s writes seen), extrapolated",
				r.steadyWindow.Round(time.Second), r.steadyAge.Round(time.Second), (r.steadyAge+r.steadyWindow).Round(time.Second),
				count(r.steady.reads), count(r.steady.writes)), measured),
			row("from the agent's known periods", known),
		},
	}
	t.Notes = r.steadyNotes()
	t.Goals = []report.Goal{{Name: "no writes at rest (API requests per node per hour at steady state)", Met: r.steady.writes == 0,
		Figures: fmt.Sprintf("%s writes/hour (%s writes and %s reads in %s at rest); %s reads/hour, %s the floor of two informers' watch renewals",
			count(measured.writes), count(r.steady.writes), count(r.steady.reads), r.steadyWindow.Round(time.Second),
			count(measured.reads), report.Ratio(measured.reads, known.reads))}}
	return t
}

const steadyAbout = `The agent's requests with no change, counted as in the table above. The agent's periodic requests, and
their periods: client-go's informers on its Node and its ConfigMap renewing their watch when it times out, after
5 to 10 minutes drawn at random, a read each. It makes no periodic write: the Node patch (labels and record),
Events, the rollout slot (a Lease created, renewed every 5 s while held, deleted) and failure Leases are written
only when something changes, and the nodes a percentage maxUnavailable is of are counted from the Nodes' records
when a change needs the count (earlier versions renewed a member Lease every 10 minutes). Nothing else runs on a
timer: no informer resync, and a pass is requeued only for a window boundary or a retry, which this profile file
does not have. Both rows are per node per hour; the second is exact from these periods. The first extrapolates
what a window with no change saw; the window (11 minutes in a full run) is longer than the longest period of any
request the agent makes, so a periodic write would show in it.
**Baseline**: for writes, the goal: none; for reads, the floor of watching two objects with client-go's
informers (the renewals of two watches).`

// steadyNotes say whether the goal of no writes is met, and whether the
// window saw more than the known periods explain.
func (r *results) steadyNotes() []string {
	notes := []string{fmt.Sprintf("Goal: no writes at steady state. Met: the window saw %s writes; the agent has no periodic write.",
		count(r.steady.writes))}
	if r.steady.writes > 0 {
		notes[0] = fmt.Sprintf("Goal: no writes at steady state. Not met: the window saw %s writes.", count(r.steady.writes))
	}
	end := r.steadyAge + r.steadyWindow
	// The most the periodic requests can send by end, counting from the
	// agent's start: the informers' list and watch are made at start-up,
	// before the window.
	most := requests{reads: float64(agentInformers * int(end/(5*time.Minute)))}
	if r.steady.reads > most.reads || r.steady.writes > most.writes {
		return append(notes, fmt.Sprintf("The window saw %s reads and %s writes, more than the periodic requests can "+
			"make in it (%s and %s): the agent sends requests at steady state that it should not.",
			count(r.steady.reads), count(r.steady.writes), count(most.reads), count(most.writes)))
	}
	return append(notes, fmt.Sprintf("The window saw %s reads and %s writes, no more than the periodic requests can make "+
		"in it (%s and %s).", count(r.steady.reads), count(r.steady.writes), count(most.reads), count(most.writes)))
}
