package allocate

import (
	"fmt"
	"strings"
	"time"

	"github.com/carve-dev/carve/test/bench/report"
)

// goal is the most carve's p50 may be, as a multiple of the stub's, for
// Allocate.
const goal = 1.2

// columns are the columns of both tables.
func columns() []string {
	return []string{"case", "calls (each)", "carve p50", "carve p99", "stub p50", "stub p99", "p50 carve/stub", "p99 carve/stub"}
}

// allocateAbout is the About of the Allocate table, for the limits l.
func allocateAbout(l limits) string {
	return fmt.Sprintf(allocateAboutFormat, l.warmup, l.calls, l.budget)
}

const allocateAboutFormat = `Each row sends one Allocate request (one container) alternately to carve's device plugin and to the kubelet's reference stub device plugin
(` + "`NewDevicePluginStub`" + ` of k8s.io/kubernetes ` + "`pkg/kubelet/cm/devicemanager/plugin/v1beta1`" + `), the same number of times each, and times every call at the client:
real gRPC over unix sockets, one client connection per server dialled before the timing, %d warm-up calls each not counted;
a case stops after %d calls each or %v of timed calls, whichever comes first (the calls column).
Both serve the same devices (same IDs, same health) of a simulated DGX H100 (8x H100-80GB), registered with a kubelet stand-in that keeps a ListAndWatch stream open to each:
8 whole GPUs x 4 time-sliced replicas (` + "`nvidia.com/gpu`" + `), or 8 GPUs x 7 MIG 1g.10gb x 16 replicas (896 devices of ` + "`nvidia.com/mig-1g.10gb`" + `).
carve runs as the agent runs it by default (` + "`plugin.Manager`" + ` with NVML, metrics on, CDI off): it checks every ID against what it advertises, folds replicas to their physical UUIDs and answers ` + "`NVIDIA_VISIBLE_DEVICES`" + `.
The stub is given the least a plugin must answer, the requested IDs in ` + "`NVIDIA_VISIBLE_DEVICES`" + `, and its klog output is switched off so that logging does not count against it.
So the baseline is the same gRPC stack answering the same question with no plugin logic, and the ratio is the price of carve's own work.
The stub's code builds a map of its whole device list on every call, which is part of its time at 896 devices.`

const preferredAbout = `Each row sends one GetPreferredAllocation request (one container, every device of the resource available, none that must be included) alternately to carve and to the kubelet's stub (the same ` + "`NewDevicePluginStub`" + `),
on the same servers and the same way as the Allocate table.
carve chooses for real (the agent's default policy: replicas spread over physical devices, then GPUs).
The stub's default answer is no preference (an empty response; the kubelet then picks itself): it chooses nothing, so it is the floor: the RPC with the request's ID list (and the stub's per-call map of its devices),
and the ratio is what carve's choice costs over not choosing. There is no goal for this ratio.`

// tables builds the Allocate and GetPreferredAllocation tables.
func tables(cases []benchCase, results []series, l limits) []report.Table {
	alloc := report.Table{
		Title: "Allocate over gRPC", Command: "make bench BENCH=" + Name,
		About: allocateAbout(l), Columns: columns(),
	}
	pref := report.Table{
		Title: "GetPreferredAllocation over gRPC", Command: "make bench BENCH=" + Name,
		About: preferredAbout, Columns: columns(),
	}
	var met, missed, adjusted []string
	var prefMap time.Duration
	for i, c := range cases {
		r := results[i]
		if c.table == preferredTable {
			pref.Rows = append(pref.Rows, r.row(c.name))
			prefMap = max(prefMap, r.stubMap)
			continue
		}
		alloc.Rows = append(alloc.Rows, r.row(c.name))
		entry := fmt.Sprintf("%s (%s)", c.short, report.Ratio(r.p50(true), r.p50(false)))
		if r.p50(true) <= goal*r.p50(false) {
			met = append(met, entry)
		} else {
			missed = append(missed, entry)
		}
		adjusted = append(adjusted, fmt.Sprintf("%s: %s, %s", c.short, report.Duration(r.stubMap), report.Ratio(r.p50(true), r.p50(false)-float64(r.stubMap))))
	}
	alloc.Goals = []report.Goal{{Name: fmt.Sprintf("carve's Allocate p50 within %.1fx the kubelet stub's", goal), Met: len(missed) == 0,
		Figures: fmt.Sprintf("within it in %d of %d cases: %s", len(met), len(met)+len(missed), strings.Join(append(met, missed...), "; "))}}
	alloc.Notes = append(goalNotes(met, missed), fmt.Sprintf(stubMapNote, strings.Join(adjusted, "; ")))
	pref.Notes = []string{fmt.Sprintf(preferredNote, report.Duration(prefMap))}
	return []report.Table{alloc, pref}
}

// goalNotes says for which cases the goal is met and for which not, and
// where carve's time goes.
func goalNotes(met, missed []string) []string {
	notes := []string{}
	if len(met) > 0 {
		notes = append(notes, fmt.Sprintf("Goal (carve's p50 within %.1fx the stub's): met for %s.", goal, strings.Join(met, "; ")))
	}
	if len(missed) > 0 {
		notes = append(notes, fmt.Sprintf("Goal (carve's p50 within %.1fx the stub's): not met for %s.", goal, strings.Join(missed, "; ")))
	}
	return append(notes, whereTimeGoes)
}

// The notes that do not depend on the figures; whereTimeGoes and
// preferredNote come from CPU and allocation profiles of carve's side
// (BenchmarkCases with -cpuprofile and -memprofile).
const (
	whereTimeGoes = `Where carve's time goes: nearly all of it is gRPC on both sides (HTTP/2 framing, protobuf, the unix-socket round trip, goroutine wake-ups);
carve's own Allocate work (a map lookup per ID, folding replicas to UUIDs, the response, a metrics counter) is a few microseconds and does not grow with the number of devices advertised.`
	stubMapNote = `The stub builds a map of its whole device list on every call before answering (its code, kept as is), which grows with the devices advertised.
Timed alone here (median), and carve's p50 ratio against the stub's p50 less it, roughly (medians do not subtract exactly): %s.`
	preferredNote = `What carve's choice costs at 896 devices, over the floor: it looks up each available ID among the devices it advertises, copies each device's record (a 150-byte struct) once into a candidate list, sorts it, and walks the physical devices in it to spread (or pack) the replicas (about 130 KB of allocations per call).
The floor includes the stub's own per-call map of its 896 devices (%s at the median) and, on both sides, decoding the request's 896 IDs.`
)
