package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/desired"
	"github.com/carve-dev/carve/partition"
)

// nodePlanQuery is what carvectl plan --node previews.
type nodePlanQuery struct {
	// node is the Node; profile the profile to plan, "" for the one the
	// node's agent selects at now.
	node, profile string
	// configMap is the profile ConfigMap, namespace/name.
	configMap string
	format    string
	now       time.Time
}

// recordedNode is a node as its carve record describes it.
type recordedNode struct {
	name   string
	labels map[string]string
	rec    carvev1.NodeRecord
	gpus   partition.Node
	inUse  map[string]bool
}

// runPlanNode previews the plan the agent of a node would make: from the
// node's record (its GPUs, the devices pods hold) and the profile
// ConfigMap, with the profile the agent selects (or the one asked for),
// planned as the agent plans. Nothing on the node is touched.
func runPlanNode(q nodePlanQuery, kubeconfig string, stdout, stderr io.Writer, newClient statusClientFunc) error {
	report := stdout
	if q.format == "json" {
		report = stderr
	}
	ns, cmName, err := splitConfigMap(q.configMap)
	if err != nil {
		return err
	}
	cs, _, err := newClient(kubeconfig, statusTimeout)
	if err != nil {
		return err
	}
	ctx := context.Background()
	n, err := readRecordedNode(ctx, cs, q.node)
	if err != nil {
		return err
	}
	f, err := readProfileConfigMap(ctx, cs, ns, cmName)
	if err != nil {
		return err
	}
	if n.rec.Selected != nil && n.rec.Selected.PinLabel != "" {
		f.ProfileLabel = n.rec.Selected.PinLabel // the agent's --profile-label
	}
	source := "ConfigMap " + q.configMap
	if _, err := desired.CheckFile(f, n.gpus); err != nil {
		return reportProblems(source, err, report)
	}
	profile, why, err := previewProfile(f, n, q)
	if err != nil {
		return err
	}
	want, err := desired.For(f, profile, n.gpus)
	if err != nil {
		return reportUnrealisable(report, profile, "node "+q.node, err)
	}
	// As the agent plans: on dynamic GPUs without the MIG devices made for
	// claims, without the devices in use first, and with them when there
	// is something to do.
	view := want.WithoutClaimInstances(n.gpus, claimPlacements(n.rec))
	plan, err := want.Plan(view, nil)
	if err == nil && !plan.NoOp() {
		plan, err = want.Plan(view, n.inUse)
	}
	if err != nil {
		return reportUnrealisable(report, profile, "node "+q.node, err)
	}
	res, err := want.Resources(view, plan)
	if err != nil {
		return err
	}
	out := carvev1.PlanDocument{Profile: profile, GPUs: "node:" + q.node, Plan: partition.NodePlanToV1(plan), Resources: res.Counts(), NeedsReset: plan.NeedsReset()}
	if q.format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	fmt.Fprintf(stdout, "Node %s, as its record of %s says (generation %d); profile %s %s.\n\n", q.node, orDash(n.rec.LastTransition), n.rec.Generation, profile, why)
	if err := writePlanTable(stdout, out, plan, view, want.Dynamic, holders(n.rec.InUse)); err != nil {
		return err
	}
	writeNodeNotes(stdout, n, f, plan, q.now)
	return nil
}

// readRecordedNode reads a Node and rebuilds its GPUs from its record.
func readRecordedNode(ctx context.Context, cs kubernetes.Interface, name string) (recordedNode, error) {
	node, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return recordedNode{}, fmt.Errorf("node %s not found", name)
	}
	if err != nil {
		return recordedNode{}, fmt.Errorf("read node %s: %w", name, err)
	}
	ann, ok := node.Annotations[carvev1.AnnotationRecord]
	if !ok {
		return recordedNode{}, fmt.Errorf("node %s has no carve record (annotation %s): no carve-agent has run there", name, carvev1.AnnotationRecord)
	}
	rec, err := carvev1.DecodeNodeRecord(ann)
	if err != nil {
		return recordedNode{}, fmt.Errorf("node %s: %w", name, err)
	}
	gpus, err := partition.NodeFromRecord(rec)
	if err == nil && len(gpus.GPUs) == 0 {
		err = errors.New("its record lists no GPU")
	}
	var inUse map[string]bool
	if err == nil {
		inUse, err = partition.InUseFromRecord(rec)
	}
	if errors.Is(err, partition.ErrRecordTooOld) {
		return recordedNode{}, fmt.Errorf("node %s: cannot plan from its record: %w; upgrade its carve-agent", name, err)
	}
	if err != nil {
		return recordedNode{}, fmt.Errorf("node %s: cannot plan from its record: %w", name, err)
	}
	return recordedNode{name: name, labels: node.Labels, rec: rec, gpus: gpus, inUse: inUse}, nil
}

// readProfileConfigMap reads and parses the profile file as the agents do.
func readProfileConfigMap(ctx context.Context, cs kubernetes.Interface, ns, name string) (*configs.File, error) {
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("ConfigMap %s/%s not found (--config-map names the one the agents read)", ns, name)
	}
	if err != nil {
		return nil, fmt.Errorf("read ConfigMap %s/%s: %w", ns, name, err)
	}
	data, ok := cm.Data[carvev1.ConfigMapKey]
	if !ok {
		return nil, fmt.Errorf("ConfigMap %s/%s has no key %s", ns, name, carvev1.ConfigMapKey)
	}
	f, err := configs.Parse([]byte(data))
	if err != nil {
		return nil, fmt.Errorf("ConfigMap %s/%s key %s: %w", ns, name, carvev1.ConfigMapKey, err)
	}
	return f, nil
}

// previewProfile returns the profile to plan and why: the one asked for,
// else the one the agent selects for the node's labels at q.now.
func previewProfile(f *configs.File, n recordedNode, q nodePlanQuery) (string, string, error) {
	if q.profile != "" {
		if _, ok := f.Profiles[q.profile]; !ok {
			return "", "", fmt.Errorf("--profile %s: ConfigMap %s has no such profile (it has %s)", q.profile, q.configMap, strings.Join(slices.Sorted(maps.Keys(f.Profiles)), ", "))
		}
		return q.profile, "(asked for)", nil
	}
	sel, err := f.Select(n.labels, q.now)
	if err != nil {
		return "", "", fmt.Errorf("node %s: select its profile: %w", n.name, err)
	}
	if sel.Source == configs.SourceNone {
		return "", "", fmt.Errorf("no profile of ConfigMap %s selects node %s: its agent leaves the GPUs as they are (give --profile to preview one)", q.configMap, n.name)
	}
	why := "(selected by " + sel.Source
	if sel.Window != "" {
		why += " " + sel.Window
	}
	return sel.Profile, why + ")", nil
}

// reportUnrealisable says that the profile cannot be realised on where.
func reportUnrealisable(w io.Writer, profile, where string, err error) error {
	fmt.Fprintf(w, "profile %s cannot be realised on %s:\n", profile, where)
	for line := range strings.SplitSeq(err.Error(), "\n") {
		fmt.Fprintf(w, "  %s\n", line)
	}
	return exitError{1}
}

// claimPlacements returns the placements of the MIG devices the record
// says were made for claims, by GPU UUID.
func claimPlacements(rec carvev1.NodeRecord) map[string][]partition.Placement {
	out := map[string][]partition.Placement{}
	for _, g := range rec.GPUs {
		for _, in := range g.Instances {
			if in.Claim != nil {
				out[g.UUID] = append(out[g.UUID], partition.PlacementFromV1(in.Placement))
			}
		}
	}
	return out
}

// holders maps each device in use to the pods that hold it.
func holders(u *carvev1.InUseRecord) map[string][]string {
	out := map[string][]string{}
	if u != nil {
		for _, d := range u.Devices {
			out[d.UUID] = d.Pods
		}
	}
	return out
}

// writeNodeNotes says what else the node's agent weighs: the devices in
// use, an unfinished apply, a maintenance window the disruptive changes
// wait for, and a hold.
func writeNodeNotes(w io.Writer, n recordedNode, f *configs.File, plan partition.NodePlan, now time.Time) {
	if u := n.rec.InUse; len(u.Devices) > 0 {
		fmt.Fprintln(w, "\nDevices in use:")
		for _, d := range u.Devices {
			fmt.Fprintf(w, "  %s  %s\n", d.UUID, orDash(strings.Join(d.Pods, ", ")))
		}
	}
	if a := n.rec.Applying; a != nil {
		fmt.Fprintf(w, "\nAn apply of profile %s started %s is unfinished (%d of %d operations done); the agent plans again from the GPUs as they are, as above.\n",
			a.Profile, a.Started, a.OpsDone, a.Ops)
	}
	disruptive := slices.ContainsFunc(plan.GPUs, partition.GPUPlan.Disruptive)
	if inMaint, next := f.InMaintenance(now); disruptive && !inMaint {
		when := "none is scheduled"
		if !next.IsZero() {
			when = "the next starts at " + next.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "\nThe disruptive changes wait for a maintenance window: %s.\n", when)
	}
	if held, _ := carvev1.Held(n.labels); held && !plan.NoOp() {
		fmt.Fprintf(w, "\nThe node is held (%s=%s): its agent changes nothing until the label is removed.\n", carvev1.LabelHold, carvev1.HoldTrue)
	}
}
