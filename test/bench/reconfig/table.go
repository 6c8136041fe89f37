package reconfig

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/test/bench/report"
)

// transitionColumns are the columns of the table by transition.
func transitionColumns() []string {
	return []string{
		"transition", "what", "carve ops", "wipe ops", "ratio",
		"carve destroyed but wanted", "wipe destroyed but wanted",
		"carve time on hw", "wipe time on hw", "ratio",
	}
}

// transitionAbout says what the table by transition measures.
const transitionAbout = `Each transition of carve's reference suite (internal/transitions: four GPU models, each on a simulated machine of two GPUs) starts from its first profile, put in place by carve on a fresh simulated machine as the agent does it. carve's planner then plans the second profile and the plan runs on that machine. On a second, identical machine runs the baseline, wipe-and-recreate as NVIDIA's mig-parted applies a MIG config (` + "`nvidia-mig-parted apply`" + `, as its source reads at commit bd7160f): when some GPU's MIG mode must change, every GPU in MIG mode is emptied, every GPU's mode is set and every GPU reset; then each GPU whose instances, counted by profile, differ from the config loses all of them and gets the config's, largest first. A GPU already as wanted is skipped, as mig-parted skips it. Both are written as the same NVML operations, and both must leave the machine with the target's instances (checked, and carve's planner must find nothing left to do); the counts are the mutating calls the simulator recorded.

*Destroyed but wanted* counts the GPU instances destroyed that the GPU holds again at the end, same profile at the same placement: a device torn down only to be rebuilt as it was, and the work on it lost for nothing. *Time on hw* adds up each call's duration at ` + "`--sim-latency realistic`" + ` (create-gi 1 s, destroy-gi, create-ci and destroy-ci 0.5 s, a MIG mode change 1 s, a reset 5 s), one call after another, as carve's applier and mig-parted both run them.

The baseline gets its best case: mig-parted lets the driver place each GPU instance and, when an order of creation fails, destroys what it made and tries another; here each instance goes straight to where carve's placement search puts the target, so nothing is retried. The calls mig-parted makes that fail (before creating a GPU instance of the same profile as the previous one, it tries to add a compute instance to that one, which is full) are not counted either.`

// transitionTable is one row per transition and a total row.
func transitionTable(results []result) report.Table {
	t := report.Table{
		Title:   "Reconfiguration work",
		Command: Command,
		About:   transitionAbout,
		Columns: transitionColumns(),
	}
	var total result
	for _, r := range results {
		t.Rows = append(t.Rows, transitionRow(r.tr.Name(), r.tr.What, r.carve, r.wipe))
		total.carve = total.carve.plus(r.carve)
		total.wipe = total.wipe.plus(r.wipe)
	}
	t.Rows = append(t.Rows, transitionRow(fmt.Sprintf("total (%d transitions)", len(results)), "", total.carve, total.wipe))
	t.Notes = transitionNotes(results, total)
	t.Goals = []report.Goal{{Name: "no GPU instance destroyed that both geometries hold", Met: total.carve.destroyedWanted == 0,
		Figures: fmt.Sprintf("carve rebuilt %d of the %d GPU instances it destroyed; the wipe %d of %d", total.carve.destroyedWanted,
			total.carve.destroyed, total.wipe.destroyedWanted, total.wipe.destroyed)}}
	return t
}

// transitionRow is one row of the table by transition.
func transitionRow(name, what string, c, w tally) []string {
	return []string{
		name, what,
		strconv.Itoa(c.total), strconv.Itoa(w.total), report.Ratio(float64(c.total), float64(w.total)),
		strconv.Itoa(c.destroyedWanted), strconv.Itoa(w.destroyedWanted),
		hwTime(c.time), hwTime(w.time), report.Ratio(c.time.Seconds(), w.time.Seconds()),
	}
}

// transitionNotes say which goals are met, from the results.
func transitionNotes(results []result, total result) []string {
	wasteful := 0
	for _, r := range results {
		if r.wipe.destroyedWanted > 0 {
			wasteful++
		}
	}
	return []string{
		fmt.Sprintf("Goal, no instance destroyed that both geometries hold: met. carve destroyed %d GPU instances in all and rebuilt none of them; the wipe destroyed %d, of which it rebuilt %d as they were, in %d of the %d transitions.",
			total.carve.destroyed, total.wipe.destroyed, total.wipe.destroyedWanted, wasteful, len(results)),
		callsNote(results, total),
		"Not in these figures: NVIDIA's MIG manager, which runs mig-parted in the GPU Operator, first pauses the node's GPU clients (device plugin, GPU feature discovery, DCGM and its exporter) whenever the selected config is not in place, and restarts them once it is (its reconfigure step in mig-parted's source), so every device of the node stops being served during any change; carve withdraws only the devices its plan removes.",
	}
}

// callsNote compares the number of calls, and says why some are equal.
func callsNote(results []result, total result) string {
	var fewer, same, more, keptSame []string
	for _, r := range results {
		switch {
		case r.carve.total < r.wipe.total:
			fewer = append(fewer, r.tr.Name())
		case r.carve.total == r.wipe.total:
			same = append(same, r.tr.Name())
			if r.carve.kept > 0 {
				keptSame = append(keptSame, r.tr.Name())
			}
		default:
			more = append(more, r.tr.Name())
		}
	}
	why := "carve keeps no instance there either: none of the first geometry sits where the second needs it (MIG turned on or off, other profiles, or another placement, as when a 3g must move to make room), and a change of time-slicing alone touches no GPU under either."
	if len(keptSame) > 0 {
		why = "carve keeps instances in " + strings.Join(keptSame, ", ") + " and still makes as many calls."
	}
	return fmt.Sprintf("Fewer calls: carve made fewer calls than the wipe in %d transitions, more in %d%s, and as many in %d (the rows at 1.00x or n/a): %s In all, %d calls against %d (%s), %s against %s on hardware (%s).",
		len(fewer), len(more), namedIfAny(more), len(same), why,
		total.carve.total, total.wipe.total, report.Ratio(float64(total.carve.total), float64(total.wipe.total)),
		hwTime(total.carve.time), hwTime(total.wipe.time), report.Ratio(total.carve.time.Seconds(), total.wipe.time.Seconds()))
}

// kindTable is the work summed over the suite by kind of call.
func kindTable(results []result, lat sim.Latency) report.Table {
	var c, w tally
	for _, r := range results {
		c, w = c.plus(r.carve), w.plus(r.wipe)
	}
	t := report.Table{
		Title:   "Reconfiguration work by kind of call",
		Command: Command,
		About:   fmt.Sprintf("The calls of the table above, summed over its %d transitions by kind, with their time on hardware at `--sim-latency realistic`; then the GPU instances destroyed, and those of them rebuilt as they were.", len(results)),
		Columns: []string{"call", "carve", "wipe", "ratio", "carve time on hw", "wipe time on hw", "ratio"},
	}
	for _, k := range opKinds() {
		ct, wt := time.Duration(c.ops[k])*lat.For(k), time.Duration(w.ops[k])*lat.For(k)
		t.Rows = append(t.Rows, []string{
			string(k), strconv.Itoa(c.ops[k]), strconv.Itoa(w.ops[k]), report.Ratio(float64(c.ops[k]), float64(w.ops[k])),
			hwTime(ct), hwTime(wt), report.Ratio(ct.Seconds(), wt.Seconds()),
		})
	}
	t.Rows = append(t.Rows,
		countRow("GPU instances destroyed", c.destroyed, w.destroyed),
		countRow("of them rebuilt as they were", c.destroyedWanted, w.destroyedWanted))
	t.Notes = []string{modeNote(c, w)}
	return t
}

// modeNote compares the MIG mode changes and resets of both.
func modeNote(c, w tally) string {
	modes := func(t tally) int { return t.ops[partition.OpEnableMIG] + t.ops[partition.OpDisableMIG] }
	if modes(c) == modes(w) && c.ops[partition.OpResetGPU] == w.ops[partition.OpResetGPU] {
		return "MIG mode changes and resets are the same under both here: every GPU of a machine takes the same profile, so both change the mode of the same GPUs. The difference is in the instances: the wipe destroys every one on a GPU that changes, carve only those the new geometry has no room for."
	}
	return fmt.Sprintf("carve made %d MIG mode changes and %d resets, the wipe %d and %d: once one GPU's mode must change, mig-parted sets the mode of every GPU and resets them all. carve changes and resets only the GPUs whose mode differs.",
		modes(c), c.ops[partition.OpResetGPU], modes(w), w.ops[partition.OpResetGPU])
}

// countRow is a row of counts without time.
func countRow(name string, c, w int) []string {
	return []string{name, strconv.Itoa(c), strconv.Itoa(w), report.Ratio(float64(c), float64(w)), "-", "-", "-"}
}

// opKinds are the kinds of call, in the order a plan runs them.
func opKinds() []partition.OpKind {
	return []partition.OpKind{
		partition.OpDestroyCI, partition.OpDestroyGI, partition.OpEnableMIG, partition.OpDisableMIG,
		partition.OpResetGPU, partition.OpCreateGI, partition.OpCreateCI,
	}
}

// plus adds two tallies (the wanted names are not kept).
func (t tally) plus(o tally) tally {
	ops := map[partition.OpKind]int{}
	for k, v := range t.ops {
		ops[k] += v
	}
	for k, v := range o.ops {
		ops[k] += v
	}
	return tally{
		ops: ops, total: t.total + o.total,
		destroyed: t.destroyed + o.destroyed, destroyedWanted: t.destroyedWanted + o.destroyedWanted,
		time: t.time + o.time,
	}
}

// hwTime writes a time on hardware: "0 s" for none.
func hwTime(d time.Duration) string {
	if d == 0 {
		return "0 s"
	}
	return report.Duration(d)
}

// namedIfAny is " (a, b)" for names, "" for none.
func namedIfAny(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return " (" + strings.Join(names, ", ") + ")"
}
