package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	carvev1 "github.com/carve-dev/carve/api/v1"
)

// pruneTimeout bounds carvectl prune as a whole.
const pruneTimeout = 2 * time.Minute

// pruneAttempts is how often a node's patch is tried when the node changed
// between reading and patching it.
const pruneAttempts = 5

// agentSelector finds carve's DaemonSets: configs/deploy and the chart
// both label their objects so.
const agentSelector = "app.kubernetes.io/part-of=carve"

// pruneQuery is what carvectl prune removes, and from which nodes.
type pruneQuery struct {
	selector, node string
	dryRun, force  bool
}

// pruned is what prune removed (or, in a dry run, would remove) from one
// node.
type pruned struct {
	node       string
	labels     []string
	annotation bool
	// paused are GPU Operator operand labels left paused for a MIG change:
	// prune does not know their values from before, so it leaves them.
	paused []string
}

func runPrune(args []string, stdout, stderr io.Writer, newClient statusClientFunc) error {
	fs := flag.NewFlagSet("prune", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default $KUBECONFIG, ~/.kube/config, or in-cluster)")
	var q pruneQuery
	fs.StringVar(&q.selector, "selector", "", "label selector for the nodes, e.g. pool=inference (default: every node)")
	fs.StringVar(&q.node, "node", "", "one node by name, instead of --selector")
	fs.BoolVar(&q.dryRun, "dry-run", false, "print what would be removed, remove nothing")
	fs.BoolVar(&q.force, "force", false, "prune even while a carve-agent DaemonSet exists (the agents write everything again)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if q.selector != "" && q.node != "" {
		return errors.New("--selector and --node: give one of them")
	}
	if q.selector != "" {
		if _, err := labels.Parse(q.selector); err != nil {
			return fmt.Errorf("--selector %q: %w", q.selector, err)
		}
	}
	cs, host, err := newClient(*kubeconfig, pruneTimeout)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), pruneTimeout)
	defer cancel()
	if err := checkNoAgent(ctx, cs, q.force, stderr); err != nil {
		return err
	}
	done, err := prune(ctx, cs, q)
	if err != nil {
		if host == "" {
			host = "the API server"
		}
		return fmt.Errorf("%s: %w", host, err)
	}
	return writePruned(stdout, done, q.dryRun)
}

// checkNoAgent refuses to prune while a carve DaemonSet exists, unless
// force: its agents would write the labels and annotation again at once. A
// client that may not list DaemonSets gets a warning and goes on.
func checkNoAgent(ctx context.Context, cs kubernetes.Interface, force bool, stderr io.Writer) error {
	list, err := cs.AppsV1().DaemonSets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: agentSelector})
	if apierrors.IsForbidden(err) {
		fmt.Fprintf(stderr, "carvectl prune: warning: may not list DaemonSets to check that carve is uninstalled (%v); a running agent writes everything again\n", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("list DaemonSets %s: %w", agentSelector, err)
	}
	if len(list.Items) == 0 || force {
		return nil
	}
	var names []string
	for _, ds := range list.Items {
		names = append(names, ds.Namespace+"/"+ds.Name)
	}
	return fmt.Errorf("carve's DaemonSet %s still exists: its agents would write the labels and annotation again; uninstall carve first (or --force)", strings.Join(names, ", "))
}

// prune removes carve's labels and annotation from the nodes of q, or only
// reports them with q.dryRun, and returns what it removed per node, by
// node name.
func prune(ctx context.Context, cs kubernetes.Interface, q pruneQuery) ([]pruned, error) {
	nodes, err := pruneNodes(ctx, cs, q)
	if err != nil {
		return nil, err
	}
	var out []pruned
	for _, n := range nodes {
		p, err := pruneNode(ctx, cs, n, q.dryRun)
		if err != nil {
			return out, fmt.Errorf("node %s: %w", n.Name, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// pruneNodes returns the nodes of q, by name.
func pruneNodes(ctx context.Context, cs kubernetes.Interface, q pruneQuery) ([]corev1.Node, error) {
	if q.node != "" {
		n, err := cs.CoreV1().Nodes().Get(ctx, q.node, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("get node %s: %w", q.node, err)
		}
		return []corev1.Node{*n}, nil
	}
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: q.selector})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	return list.Items, nil
}

// pruneNode removes carve's labels and annotation from one node with a
// merge patch that holds the node's resourceVersion, read again and retried
// when the node changed in between.
func pruneNode(ctx context.Context, cs kubernetes.Interface, n corev1.Node, dryRun bool) (pruned, error) {
	for attempt := 1; ; attempt++ {
		p, patch, err := prunePatch(&n)
		if err != nil || patch == nil || dryRun {
			return p, err
		}
		_, err = cs.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		if err == nil {
			return p, nil
		}
		if !apierrors.IsConflict(err) || attempt == pruneAttempts {
			return p, fmt.Errorf("patch: %w", err)
		}
		cur, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return p, fmt.Errorf("read again after a conflict: %w", err)
		}
		n = *cur
	}
}

// prunePatch returns what is carve's on the node and the merge patch that
// removes it, nil when nothing is. carve's labels are those carve owns
// (carvev1.Owns): its own carve.dev/ state labels and the keys its record
// lists as written by it. The operator's own labels (carve.dev/profile, the
// pin label, GPU feature discovery's) are never in the patch.
func prunePatch(n *corev1.Node) (pruned, []byte, error) {
	p := pruned{node: n.Name}
	var rec *carvev1.NodeRecord
	if s, ok := n.Annotations[carvev1.AnnotationRecord]; ok {
		p.annotation = true
		if r, err := carvev1.DecodeNodeRecord(s); err == nil {
			rec = &r
		}
	}
	for k, v := range n.Labels {
		if carvev1.Owns(rec, k) {
			p.labels = append(p.labels, k)
		}
		if strings.HasPrefix(k, carvev1.LabelOperandPrefix) && v == carvev1.OperandPaused {
			p.paused = append(p.paused, k)
		}
	}
	slices.Sort(p.labels)
	slices.Sort(p.paused)
	if len(p.labels) == 0 && !p.annotation {
		return p, nil, nil
	}
	meta := map[string]any{"resourceVersion": n.ResourceVersion}
	if len(p.labels) > 0 {
		rm := map[string]any{}
		for _, k := range p.labels {
			rm[k] = nil
		}
		meta["labels"] = rm
	}
	if p.annotation {
		meta["annotations"] = map[string]any{carvev1.AnnotationRecord: nil}
	}
	b, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return p, nil, fmt.Errorf("patch: %w", err)
	}
	return p, b, nil
}

// writePruned prints one line per node and, for operand labels left
// paused, the command that deploys the operand again.
func writePruned(w io.Writer, done []pruned, dryRun bool) error {
	verb := "REMOVED"
	if dryRun {
		verb = "WOULD REMOVE"
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "NODE\t%s\n", verb)
	var paused []string
	for _, p := range done {
		var what []string
		if len(p.labels) > 0 {
			noun := "labels"
			if len(p.labels) == 1 {
				noun = "label"
			}
			what = append(what, fmt.Sprintf("%d %s (%s)", len(p.labels), noun, strings.Join(p.labels, ", ")))
		}
		if p.annotation {
			what = append(what, "annotation "+carvev1.AnnotationRecord)
		}
		if len(what) == 0 {
			what = append(what, "nothing of carve's")
		}
		fmt.Fprintf(tw, "%s\t%s\n", p.node, strings.Join(what, "; "))
		for _, k := range p.paused {
			paused = append(paused, fmt.Sprintf("kubectl label node %s %s=true --overwrite", p.node, k))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(paused) > 0 {
		fmt.Fprintf(w, "\nGPU Operator operands left paused (%s) by a change that did not finish; deploy them again with:\n  %s\n",
			carvev1.OperandPaused, strings.Join(paused, "\n  "))
	}
	return nil
}
