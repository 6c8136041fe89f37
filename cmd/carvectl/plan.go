package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/desired"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/gpus"
)

func runPlan(args []string, stdout, stderr io.Writer, newClient statusClientFunc) error {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("f", "", "profiles file (profiles.yaml)")
	profile := fs.String("profile", "", "the profile to plan (with --node: default the profile the node's agent selects now)")
	gpuSpec := fs.String("gpus", "", "the GPUs: sim:<machine> or nvml")
	from := fs.String("from", "", "plan from this saved simulator state (JSON) instead of a fresh machine")
	latency := fs.String("sim-latency", "none", "simulated GPUs only: also say how long the operations take at this latency: realistic (as on hardware), a duration per operation (200ms), or op=duration,...")
	format := fs.String("o", "table", "output: table or json")
	nodeName := fs.String("node", "", "plan for this node of the cluster, from its carve record and the profile ConfigMap, instead of -f and --gpus")
	kubeconfig := fs.String("kubeconfig", "", "with --node: kubeconfig file (default $KUBECONFIG, ~/.kube/config, or in-cluster)")
	configMap := fs.String("config-map", "carve-system/carve-profiles", "with --node: namespace/name of the profile ConfigMap the agents read")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *format != "table" && *format != "json" {
		return fmt.Errorf("-o %q: want table or json", *format)
	}
	if *nodeName != "" {
		if *file != "" || *gpuSpec != "" || *from != "" || *latency != "none" {
			return fmt.Errorf("--node plans from the cluster: -f, --gpus, --from and --sim-latency do not apply")
		}
		q := nodePlanQuery{node: *nodeName, profile: *profile, configMap: *configMap, format: *format, now: time.Now()}
		return runPlanNode(q, *kubeconfig, stdout, stderr, newClient)
	}
	switch {
	case *profile == "":
		return fmt.Errorf("--profile is required")
	case *gpuSpec == "":
		return fmt.Errorf("--gpus is required (sim:<machine> or nvml)")
	}
	// With -o json, stdout carries the plan document and nothing else:
	// problems go to stderr.
	report := stdout
	if *format == "json" {
		report = stderr
	}
	f, err := loadFile(*file, report)
	if err != nil {
		return err
	}
	opts := gpus.Options{From: *from, SimLatency: *latency}
	node, closeFn, err := openNode(*gpuSpec, opts)
	if err != nil {
		return err
	}
	lat, err := gpus.Latency(opts.SimLatency) // Open checked it
	if err != nil {
		return err
	}
	defer closeFn()
	// The desired state as the agent computes it: a file broken for every
	// node is never planned; of the rest only the profile asked for must
	// fit these GPUs (the file may hold profiles for other nodes).
	if _, err := desired.CheckFile(f, node); err != nil {
		return reportProblems(*file, err, report)
	}
	want, err := desired.For(f, *profile, node)
	if err != nil {
		return reportProblems(*file, err, report)
	}
	plan, err := want.Plan(node, nil)
	if err != nil {
		return reportUnrealisable(report, *profile, *gpuSpec, err)
	}
	res, err := want.Resources(node, plan)
	if err != nil {
		return err
	}
	out := carvev1.PlanDocument{Profile: *profile, GPUs: *gpuSpec, Plan: partition.NodePlanToV1(plan), Resources: res.Counts(), NeedsReset: plan.NeedsReset()}
	if *format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	if err := writePlanTable(stdout, out, plan, node, want.Dynamic, nil); err != nil {
		return err
	}
	var ops []partition.Op
	for _, p := range plan.GPUs {
		ops = append(ops, p.Ops...)
	}
	if !lat.IsZero() && len(ops) > 0 {
		// How long the operations take, run one after another as the
		// agent runs them.
		fmt.Fprintf(stdout, "\nAt --sim-latency %s the %d operations take %s, one after another.\n", lat, len(ops), lat.Estimate(ops))
	}
	return nil
}

// writePlanTable writes the plan as a table; dynamic are the dynamic GPUs
// with the MIG profiles they offer (desired.State.Dynamic), holders names
// the pods that hold each device in use, where known (nil otherwise).
func writePlanTable(w io.Writer, out carvev1.PlanDocument, plan partition.NodePlan, node partition.Node, dynamic map[int][]string, holders map[string][]string) error {
	fmt.Fprintf(w, "Profile %q on %s (%s)\n", out.Profile, describeNode(node), out.GPUs)
	for _, p := range plan.GPUs {
		fmt.Fprintf(w, "\nGPU %d  %s  %s  MIG %s\n", p.Index, p.Model, p.UUID, modeChange(p))
		if profiles, ok := dynamic[p.Index]; ok {
			fmt.Fprintf(w, "  dynamic: MIG on, no instances of the profile's own; %s devices are made on demand for DRA claims (needs --advertise dra)\n", strings.Join(profiles, ", "))
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		if len(p.Instances) > 0 {
			fmt.Fprintln(tw, "  INSTANCE\tPLACEMENT\tSTATUS\tUUID")
			for _, in := range p.Instances {
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", in.Profile, in.Placement, in.Status, orDash(in.UUID))
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, b := range p.Blocked {
			held := ""
			if pods := holders[b.UUID]; len(pods) > 0 {
				held = " (pods " + strings.Join(pods, ", ") + ")"
			}
			fmt.Fprintf(w, "  blocked by %s %s: %s%s\n", b.UUID, b.Profile, b.Reason, held)
		}
		ops, verb := p.Ops, "operations"
		if p.IsBlocked() {
			ops, verb = p.WouldDo, "operations once unblocked"
		}
		if len(ops) == 0 {
			fmt.Fprintln(w, "  no operations: already as wanted")
			continue
		}
		fmt.Fprintf(w, "  %s:\n", verb)
		for i, op := range ops {
			fmt.Fprintf(w, "    %2d. %s\n", i+1, op)
		}
	}
	fmt.Fprintln(w, "\nResources advertised:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	names := make([]string, 0, len(out.Resources))
	for name := range out.Resources {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(tw, "  %s\t%d\n", name, out.Resources[name])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if out.NeedsReset {
		fmt.Fprintln(w, "\nSome GPUs change MIG mode: they are reset when no process holds them (or the node needs a reboot).")
	}
	return nil
}

// modeChange describes the MIG mode now and after the plan.
func modeChange(p partition.GPUPlan) string {
	want := "disabled"
	if p.Target.MIGEnabled() {
		want = "enabled"
	}
	switch {
	case p.Mode == "unsupported":
		return "unsupported"
	case p.Mode == want && p.PendingMode == want:
		return p.Mode
	case p.NeedsReset:
		return p.Mode + " -> " + want + " (reset needed)"
	default:
		return p.Mode + " -> " + want
	}
}
