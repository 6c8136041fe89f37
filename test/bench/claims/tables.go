package claims

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/carve-dev/carve/test/bench/report"
)

// Tables turns a Result into the table of docs/benchmarks.md. The first
// series is the baseline (the static device). short marks figures of the
// short mode.
func Tables(res Result, short bool) []report.Table {
	t := report.Table{
		Title:   "Claim to running: a MIG device made on demand against one made beforehand",
		Command: Command,
		About: "The carve-agent binary, built as `make build` builds it, runs as a process on the local cluster's node " +
			"(Kubernetes 1.37, containerd 2 with CDI) as the DRA driver gpu.carve.dev (`--advertise dra`), with two simulated " +
			"H100-80GB (`--gpus sim:" + Machine + " --sim-latency " + res.Latency + "`" + latencyAbout(res.Latency) + ") " +
			"under a hybrid profile: GPU 0 static, seven 1g.10gb made when the profile " +
			"was applied; GPU 1 dynamic, offering 1g.10gb and 3g.40gb that carve makes when a claim allocated one is prepared. " +
			"Each sample creates a ResourceClaim for one device (a CEL selector on the GPU's index and the profile) and a pod " +
			"that takes it, and times from the claim's create call to the pod's phase Running as a watch on the pod delivers " +
			"it to the benchmark (API timestamps have whole seconds only); the claim's allocation is timed by a watch on the " +
			"claim, and the MIG device made by carve-agent's log line (its time, to the nanosecond, on the same clock). " +
			"Then the pod and claim are deleted, and the next sample waits until the claim is gone, its CDI spec removed and " +
			"GPU 1 holds no instance. The kinds take turns, one sample each, so that drift on the machine is shared. " +
			"Baseline: the static 1g.10gb on GPU 0, whose MIG device exists before the claim: its prepare only writes a CDI " +
			"spec. Machine: the one in the header.",
		Columns: []string{"device", "samples", "p50", "p90", "max", "p50 − baseline p50",
			"created → allocated (p50)", "allocated → MIG device made (p50)", "allocated → Running (p50)"},
	}
	if len(res.Series) == 0 {
		return []report.Table{t}
	}
	base := p50(running(res.Series[0]))
	for i, s := range res.Series {
		r := running(s)
		diff := "baseline"
		if i > 0 {
			diff = signed(p50(r) - base)
		}
		made := "—"
		if s.Kind.Dynamic {
			made = report.Duration(p50(stage(s, func(x Sample) time.Duration { return x.Made - x.Allocated })))
		}
		t.Rows = append(t.Rows, []string{
			s.Kind.Name, strconv.Itoa(len(s.Samples)), report.Duration(p50(r)), report.Duration(report.Percentile(r, 0.9)),
			report.Duration(report.Percentile(r, 1)), diff,
			report.Duration(p50(stage(s, func(x Sample) time.Duration { return x.Allocated }))), made,
			report.Duration(p50(stage(s, func(x Sample) time.Duration { return x.Running - x.Allocated }))),
		})
	}
	t.Notes = append(t.Notes, differenceNote(res), removeNote(res))
	if short {
		t.Notes = append(t.Notes, "Short mode (`make test`): two samples per device, only create-gi and create-ci take time; not figures to publish.")
	}
	return []report.Table{t}
}

// differenceNote says how much later a pod with a dynamic device runs than
// one with the static device, and how much of that the NVML calls take.
func differenceNote(res Result) string {
	base := res.Series[0]
	var parts []string
	for _, s := range res.Series[1:] {
		diff := p50(running(s)) - p50(running(base))
		parts = append(parts, fmt.Sprintf("a pod with the %s runs %s later than one with the baseline (p50 against p50): "+
			"%s of NVML calls and %s else", s.Kind.Name, signed(diff), report.Duration(res.Make), signed(diff-res.Make)))
	}
	spread := report.Percentile(running(base), 0.9) - p50(running(base))
	return fmt.Sprintf("Where the difference goes: a dynamic device's MIG device is made inside the kubelet's "+
		"NodePrepareResources call, before the container starts: a GPU instance at the allocated placement and its compute "+
		"instance, one NVML call each (create-gi then create-ci, %s together at `--sim-latency %s`), through the same "+
		"checkpointed applier as a profile change, with a fresh read of the GPU and the claim's record written before the "+
		"first call and after the last. So %s. The rest is the driver's own work (reads, the record, the CDI spec) and "+
		"the spread of a pod's start on a shared machine (the baseline's p90 is %s above its p50). The scheduler's part "+
		"(created → allocated) is the same for both kinds: the devices are published in the ResourceSlice either way; "+
		"allocated → MIG device made also holds the kubelet's own way to the driver's prepare call, which the baseline's "+
		"pod takes too.",
		report.Duration(res.Make), res.Latency, strings.Join(parts, "; "), report.Duration(spread))
}

// removeNote says what deleting a claim with a dynamic device costs.
func removeNote(res Result) string {
	return fmt.Sprintf("Deleting the pod and the claim destroys a dynamic device's MIG device in NodeUnprepareResources "+
		"(destroy-ci then destroy-gi, %s together at this latency) after the pod has stopped: off any pod's path to "+
		"Running, but the same placement can be made again only after it.", report.Duration(res.Remove))
}

// latencyAbout says what the simulated latency stands for.
func latencyAbout(latency string) string {
	if latency == "realistic" {
		return ": every NVML call that changes a GPU takes about as long as on hardware"
	}
	return ""
}

// running returns the series' claim-to-running times.
func running(s Series) []time.Duration {
	return stage(s, func(x Sample) time.Duration { return x.Running })
}

// stage returns f of each sample.
func stage(s Series, f func(Sample) time.Duration) []time.Duration {
	out := make([]time.Duration, len(s.Samples))
	for i, x := range s.Samples {
		out[i] = f(x)
	}
	return out
}

func p50(d []time.Duration) time.Duration { return report.Percentile(d, 0.5) }

// signed writes d with its sign ("+1.52 s", "−40.0 ms").
func signed(d time.Duration) string {
	if d < 0 {
		return "−" + report.Duration(-d)
	}
	return "+" + report.Duration(d)
}
