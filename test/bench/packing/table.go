package packing

import (
	"fmt"
	"strings"

	"github.com/carve-dev/carve/test/bench/report"
)

// columns are the table's header cells.
func columns() []string {
	return []string{
		"node, mix", "claims", "offered load", "carve", "NVIDIA's order", "best placement", "best with refusals",
		"carve / NVIDIA", "carve / best placement", "sequences carve ahead / behind / even",
	}
}

// table is one row per case.
func table(results []result, impl string) report.Table {
	t := report.Table{
		Title:   "Packing on-demand MIG devices",
		Command: Command,
		About:   fmt.Sprintf(about, features(), impl),
		Columns: columns(),
	}
	for _, r := range results {
		t.Rows = append(t.Rows, row(r))
	}
	t.Notes = notes(results)
	return t
}

// row is one case's row.
func row(r result) []string {
	best, bound, ratio := "-", "-", "-"
	if r.c.Best && !r.bestDone {
		best, bound = "over budget", "over budget"
	}
	if r.bestDone {
		best, bound = share(r.best, r.claims), share(r.bound, r.claims)
		ratio = report.Ratio(float64(r.carve), float64(r.best))
	}
	ahead, behind, even := r.versus()
	return []string{
		r.c.Name(), fmt.Sprintf("%d sequences x %d", len(r.c.Seeds), r.c.Claims), fmt.Sprintf("%.2f", r.load),
		share(r.carve, r.claims), share(r.nvidia, r.claims), best, bound,
		report.Ratio(float64(r.carve), float64(r.nvidia)), ratio,
		fmt.Sprintf("%d / %d / %d", ahead, behind, even),
	}
}

// versus counts the sequences where carve served more claims than
// NVIDIA's order, fewer, and as many.
func (r result) versus() (ahead, behind, even int) {
	for _, s := range r.seeds {
		switch {
		case s.carve > s.nvidia:
			ahead++
		case s.carve < s.nvidia:
			behind++
		default:
			even++
		}
	}
	return ahead, behind, even
}

// share writes "81.7% (49/60)".
func share(n, of int) string {
	if of == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%% (%d/%d)", 100*float64(n)/float64(of), n, of)
}

// notes say where carve's order gains, where it loses, and why some rows
// are equal, from the results.
func notes(results []result) []string {
	var ahead, behind, even []string
	for _, r := range results {
		switch {
		case r.carve > r.nvidia:
			ahead = append(ahead, fmt.Sprintf("%s (%+d claims)", r.c.Name(), r.carve-r.nvidia))
		case r.carve < r.nvidia:
			behind = append(behind, fmt.Sprintf("%s (%d claims)", r.c.Name(), r.carve-r.nvidia))
		default:
			even = append(even, r.c.Name())
		}
	}
	out := []string{fmt.Sprintf("carve's order served more claims than NVIDIA's in %s; fewer in %s; as many in %s.",
		list(ahead), list(behind), list(even))}
	out = append(out, whyNote)
	if r, ok := find(results, "A30-24GB x1, mixed"); ok && r.carve == r.nvidia {
		out = append(out, "The A30-24GB's placements are symmetric (a 2g at 0 or 2, a 1g at 0 to 3, one 4g over all) and carve's order of the mix's profiles there is the mirror image of NVIDIA's, so both serve the same claims.")
	}
	h, okH := find(results, "H100-80GB x1, mixed")
	a, okA := find(results, "A100-40GB x1, mixed")
	if okH && okA && h.carve == a.carve && h.nvidia == a.nvidia && h.best == a.best {
		out = append(out, "The A100-40GB has the H100-80GB's placements (eight memory slices, the same starts), and its mix is the same in its sizes, so the same sequences give the same counts.")
	}
	return out
}

// find returns the result of the case named.
func find(results []result, name string) (result, bool) {
	for _, r := range results {
		if r.c.Name() == name {
			return r, true
		}
	}
	return result{}, false
}

// list joins names, "none" for none.
func list(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "; ")
}

// about says what the table measures, how, and what the baselines are;
// its verbs take the features on and the allocator implementation picked.
const about = `Seeded random sequences of claims arrive at and leave a node whose GPUs are all on-demand (dynamic, every MIG profile offered). Each claim asks for one MIG device of one profile, as carve's example claims do (DeviceClass ` + "`mig.carve.dev`" + `, a CEL selector on the ` + "`profile`" + ` attribute); its profile is drawn from the mix by weight (*mixed*: 1g 4, 2g 2, 3g 2, 4g 1, 7g 1 on the H100-80GB and A100-40GB; 1g 4, 2g 2, 4g 1 on the A30; *small and large*: 1g.10gb 6, 4g.40gb 2, 7g.80gb 1), and it stays 1 to 4 steps (uniform). At each step the claims whose time is up leave first, then 0 to 2 claims per GPU arrive (uniform). The *offered load* is the compute slices the claims would hold on average if all were served, over the node's. Each arrival is allocated by the scheduler's own allocator library (` + "`structured.NewAllocator`" + ` of k8s.io/dynamic-resource-allocation v0.37) with the feature set the Kubernetes 1.37 scheduler derives from its default feature gates (its own code computes it here: %s), against the node's ResourceSlices, the devices of the claims present passed as allocated. With that feature set the library picked its **%s** allocator, which sorts a pool's slices by name and takes the first device that fits in slice order. A claim that finds no device counts as not found and leaves; it is not retried. The figure is the share of claims that found a device.

*carve* is the slices carve's driver publishes. *NVIDIA's order* is the same devices and the same counters laid out as NVIDIA's DRA driver (NVIDIA/k8s-dra-driver-gpu, its gpu-kubelet-plugin as of commit 2240711, May 2026) lays out its DynamicMIG devices for Kubernetes 1.35 and later: a first slice of every GPU's counter set, then one slice per GPU in PCI bus order, named by the resourceslice controller of k8s.io/dynamic-resource-allocation (v0.36, which it vendors) with the slice's index first, so that they sort in that order; in each, the GPU's devices named ` + "`gpu-<minor>-mig-<profile without dots>-<GI profile ID>-<first memory slice>`" + ` and sorted by name, so a profile's placements come lowest first. Only the names and the order differ (NVIDIA's driver also lists each whole GPU as a device in its slice, which a MIG claim does not select, so it is left out); the GPUs are alike, so which GPU comes first does not change the counts.

*Best placement* (one GPU only) is the most claims of the same sequence any choice of placements serves when it knows the whole sequence: each claim gets, when it arrives, a placement that fits beside the claims then present and keeps it until it leaves (MIG instances do not move), and a claim is turned away only when nothing fits, as the scheduler does. *Best with refusals* may also turn a claim away that fits, to serve more later: no scheduler that serves what fits can reach it, so it bounds every policy. Both are exhaustive searches over every placement choice (remembering each state of event and placements held), checked to serve at least as many as both orders; *over budget* where a search went past its budget of states (two million for these cases). On several GPUs they are not computed (-).`

// whyNote explains the gains and the equal rows.
const whyNote = `Where the orders differ: NVIDIA's name order gives a 1g its placement 0 first and a 3g its placement 0 first, which blocks the only 4g and 7g placements at once; carve's gives a 1g slice 6 first and a 3g 4:4 first, so a 4g or 7g still fits while the small ones fit above it. The *small and large* mix, where that is most of the traffic, shows it most. On several GPUs both orders fill one GPU before the next, and the gap narrows. Neither order is best on every sequence (the last column): an order chooses without knowing what comes next, and on one GPU the best-placement column shows what knowing it would gain.`
