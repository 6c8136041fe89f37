package planning

import (
	"fmt"
	"strings"
	"time"

	"github.com/carve-dev/carve/test/bench/report"
)

// goals are the planning figures' goals, met or not: plans with the
// fewest operations, and one plan of an 8-GPU node in under goal.
func goals(rows []row) []report.Goal {
	return []report.Goal{fewestGoal(rows), timeGoal(rows)}
}

// fewestGoal checks that carve's plans have as many operations as the
// brute force's fewest, in every case the brute force finished; a case it
// did not finish leaves the goal unshown, so not met.
func fewestGoal(rows []row) report.Goal {
	var finished, equal, carveOps, bruteOps int
	var differ []string
	for _, r := range rows {
		if r.out.brute.dnf {
			continue
		}
		finished++
		carveOps += r.carveOps
		bruteOps += r.out.found.ops
		if r.agree() {
			equal++
		} else {
			differ = append(differ, fmt.Sprintf("%s on %s (%s)", r.name, gpus(r.gpus), r.opsRatio()))
		}
	}
	figures := fmt.Sprintf("as many operations as the brute force's fewest in %d of %d cases (the brute force finished %d); "+
		"%d operations in all against %d, ops ratio %s", equal, len(rows), finished, carveOps, bruteOps,
		report.Ratio(float64(carveOps), float64(bruteOps)))
	if len(differ) > 0 {
		figures += "; different in " + strings.Join(differ, ", ")
	}
	return report.Goal{
		Name:    "carve's plans have the fewest operations: ops ratio (carve/brute force) 1.00x in every case",
		Met:     len(rows) > 0 && finished == len(rows) && equal == finished,
		Figures: figures,
	}
}

// timeGoal checks the median plan of an 8-GPU node against goal.
func timeGoal(rows []row) report.Goal {
	var cases, under int
	var slowest time.Duration
	var slowestName string
	for _, r := range rows {
		if r.gpus != 8 || len(r.out.carve.times) == 0 {
			continue
		}
		cases++
		m := median(r.out.carve.times)
		if m < goal {
			under++
		}
		if m >= slowest {
			slowest, slowestName = m, r.name
		}
	}
	return report.Goal{
		Name: fmt.Sprintf("one plan of an 8-GPU node in under %s (median)", report.Duration(goal)),
		Met:  cases > 0 && under == cases,
		Figures: fmt.Sprintf("under it in %d of %d cases; the slowest, %s: %s", under, cases, slowestName,
			report.Duration(slowest)),
	}
}

// goalVerdict writes a goal as a note's sentence.
func goalVerdict(g report.Goal) string {
	verdict := "not met"
	if g.Met {
		verdict = "met"
	}
	return fmt.Sprintf("Goal: %s. %s: %s.", g.Name, strings.ToUpper(verdict[:1])+verdict[1:], g.Figures)
}
