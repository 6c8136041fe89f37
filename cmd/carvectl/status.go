package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/internal/textfmt"
)

// nvidiaResourcePrefix starts the extended resources carve advertises.
const nvidiaResourcePrefix = "nvidia.com/"

// statusTimeout bounds the whole node list, so that an unreachable API
// server gives a clear error instead of a hang.
const statusTimeout = 20 * time.Second

// statusClientFunc builds the Kubernetes client carvectl status uses, its
// requests bounded by timeout (none when 0), and returns the API server's
// URL for messages; tests pass a fake one.
type statusClientFunc func(kubeconfig string, timeout time.Duration) (kubernetes.Interface, string, error)

// newStatusClient builds the client for carvectl status from --kubeconfig,
// else KUBECONFIG, else ~/.kube/config, else the in-cluster config (the
// clientcmd loading rules), and returns it with the API server's URL. Each
// request gives up after timeout; status -w passes 0, as a watch is a
// request that lasts minutes. Tests replace it.
func newStatusClient(kubeconfig string, timeout time.Duration) (kubernetes.Interface, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if clientcmd.IsEmptyConfig(err) {
		return nil, "", fmt.Errorf("no kubeconfig: none given with --kubeconfig, none in $KUBECONFIG or ~/.kube/config, and not running in a cluster")
	}
	if err != nil {
		return nil, "", fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.Timeout = timeout
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, cfg.Host, fmt.Errorf("client for %s: %w", cfg.Host, err)
	}
	return cs, cfg.Host, nil
}

// nodeStatus is one GPU node as carvectl status shows it.
type nodeStatus struct {
	Node string `json:"node"`
	// Pinned is the node's carve.dev/profile label, the user's pin, or
	// the label the agent pins by (--profile-label) when its record names
	// one.
	Pinned string `json:"pinned,omitempty"`
	// Selected is the profile in force for the node, the one the agent is
	// reaching for; "" when none is or it is not known.
	Selected string `json:"selected,omitempty"`
	// Source is why the profile is in force: window, label, rule, default.
	Source string `json:"source,omitempty"`
	// Window is the active window, "" outside windows.
	Window  string `json:"window,omitempty"`
	Applied string `json:"applied,omitempty"`
	State   string `json:"state,omitempty"`
	// Held: an operator holds the node (carve.dev/hold=true): its agent
	// observes only.
	Held bool `json:"held,omitempty"`
	// Resources are the node's allocatable nvidia.com/* resources, by name
	// without the nvidia.com/ prefix. Resources at zero are left out: the
	// kubelet keeps a resource whose devices are gone at zero for a while.
	Resources map[string]int64 `json:"resources"`
	// LastError is the annotation's last error, or why the annotation
	// could not be read.
	LastError string `json:"lastError,omitempty"`
	// Record is the decoded node record (the carve.dev/partition
	// annotation).
	Record *carvev1.NodeRecord `json:"partition,omitempty"`
	// AnnotationError says why the annotation could not be decoded.
	AnnotationError string `json:"annotationError,omitempty"`
	// Rollout is the node's part in the rollout: "slot" while it holds
	// one, "stuck" or "expired" for a slot it no longer renews (stuck: its
	// record says a change is in progress), "failed" when it failed on the
	// file's revision.
	Rollout string `json:"rollout,omitempty"`
	// Slot is the rollout slot the node holds, live or expired.
	Slot *nodeSlot `json:"slot,omitempty"`
	// AgentVersion is the version of the agent that wrote the node's
	// record; "" when the record names none (an agent older than the
	// field) or there is no readable record.
	AgentVersion string `json:"agentVersion,omitempty"`
}

func runStatus(args []string, stdout, stderr io.Writer, newClient statusClientFunc) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default $KUBECONFIG, ~/.kube/config, or in-cluster)")
	output := fs.String("o", "table", "output format: table or json (with -w: JSON Lines, one object per changed node)")
	selector := fs.String("selector", "", "label selector for the nodes, e.g. pool=inference")
	configMap := fs.String("config-map", "carve-system/carve-profiles", "namespace/name of the profile ConfigMap whose rollout to show")
	watch := fs.Bool("w", false, "watch: keep the table up to date as the nodes change, until interrupted")
	fs.BoolVar(watch, "watch", false, "same as -w")
	if err := fs.Parse(args); err != nil {
		return exitError{2}
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *output != "table" && *output != "json" {
		return fmt.Errorf("-o %q: want table or json", *output)
	}
	if *selector != "" {
		if _, err := labels.Parse(*selector); err != nil {
			return fmt.Errorf("--selector %q: %w", *selector, err)
		}
	}
	ns, name, err := splitConfigMap(*configMap)
	if err != nil {
		return err
	}
	q := statusQuery{selector: *selector, output: *output, namespace: ns, configMap: name, now: time.Now()}
	if *watch {
		return runStatusWatch(stdout, stderr, *kubeconfig, q, newClient)
	}
	cs, host, err := newClient(*kubeconfig, statusTimeout)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
	defer cancel()
	return status(ctx, cs, host, q, stdout)
}

// statusQuery is what carvectl status shows: the nodes matching selector,
// the rollout of the ConfigMap namespace/configMap at now, as output
// (table or json).
type statusQuery struct {
	selector, output     string
	namespace, configMap string
	now                  time.Time
}

// status lists the GPU nodes matching the query through cs and prints them
// as a table or as JSON, each with its part in the rollout, and under the
// table the rollout itself. host names the API server in errors.
func status(ctx context.Context, cs kubernetes.Interface, host string, q statusQuery, w io.Writer) error {
	rows, err := nodeStatuses(ctx, cs, q.selector)
	if err != nil {
		if host == "" {
			host = "the API server"
		}
		return fmt.Errorf("list nodes from %s: %w", host, err)
	}
	ro := rolloutOf(ctx, cs, q.namespace, q.configMap, q.now)
	for i := range rows {
		rows[i] = ro.mark(rows[i])
	}
	if q.output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	if err := writeNodeTable(w, rows); err != nil {
		return err
	}
	if err := writeDynamic(w, rows); err != nil {
		return err
	}
	ro.write(w, q.now)
	return nil
}

// statusHeader names the columns of the node table, tab-separated.
const statusHeader = "NODE\tSELECTED\tSELECTED BY\tPINNED\tAPPLIED\tSTATE\tROLLOUT\tVERSION\tRESOURCES\tLAST ERROR"

// rowCells are r's cells in the node table, "-" for an empty one.
func rowCells(r nodeStatus) []string {
	return []string{r.Node, orDash(r.Selected), orDash(selectedBy(r)), orDash(r.Pinned), orDash(r.Applied), orDash(stateCell(r)),
		orDash(r.Rollout), orDash(r.AgentVersion), orDash(compactResources(r.Resources)), orDash(textfmt.OneLine(lastWord(r)))}
}

// stateCell is the STATE column: the state, marked "(held)" on a held node
// whose state is not held (the agent had not seen the hold yet, or a
// rejected file shows as failed).
func stateCell(r nodeStatus) string {
	if r.Held && r.State != carvev1.StateHeld {
		return orDash(r.State) + " (held)"
	}
	return r.State
}

// writeNodeTable writes the header and rows as aligned columns.
func writeNodeTable(w io.Writer, rows []nodeStatus) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, statusHeader)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(rowCells(r), "\t"))
	}
	return tw.Flush()
}

// lastWord is the LAST ERROR column: the last error, or what a node that
// is fine waits for.
func lastWord(r nodeStatus) string {
	if r.LastError == "" && r.Record != nil && r.Record.Waiting != "" {
		return "waiting for " + r.Record.Waiting
	}
	return r.LastError
}

// nodeStatuses lists the nodes matching selector and returns the GPU nodes
// among them, by name.
func nodeStatuses(ctx context.Context, cs kubernetes.Interface, selector string) ([]nodeStatus, error) {
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	rows := []nodeStatus{}
	for i := range list.Items {
		if r, ok := statusOf(&list.Items[i]); ok {
			rows = append(rows, r)
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Node < rows[j].Node })
	return rows, nil
}

// statusOf describes n; ok is false when n is not a GPU node (it carries
// no carve.dev/state label and no allocatable nvidia.com/* resource).
func statusOf(n *corev1.Node) (nodeStatus, bool) {
	res := map[string]int64{}
	for name, q := range n.Status.Allocatable {
		if short, ok := strings.CutPrefix(string(name), nvidiaResourcePrefix); ok && q.Value() != 0 {
			res[short] = q.Value()
		}
	}
	_, hasState := n.Labels[carvev1.LabelState]
	if !hasState && len(res) == 0 {
		return nodeStatus{}, false
	}
	r := nodeStatus{
		Node:      n.Name,
		Pinned:    n.Labels[carvev1.LabelProfile],
		Source:    n.Labels[carvev1.LabelSource],
		Window:    n.Labels[carvev1.LabelWindow],
		Applied:   n.Labels[carvev1.LabelApplied],
		State:     n.Labels[carvev1.LabelState],
		Resources: res,
	}
	r.Held, _ = carvev1.Held(n.Labels)
	if a, ok := n.Annotations[carvev1.AnnotationRecord]; ok {
		p, err := carvev1.DecodeNodeRecord(a)
		if err != nil {
			r.AnnotationError = err.Error()
			r.LastError = err.Error()
		} else {
			r.Record = &p
			r.LastError, r.AgentVersion = p.LastError, p.AgentVersion
		}
	}
	if r.Record != nil && r.Record.Selected != nil {
		sel := r.Record.Selected
		r.Selected, r.Source, r.Window = sel.Profile, sel.Source, sel.Window
		if sel.PinLabel != "" {
			r.Pinned = n.Labels[sel.PinLabel]
		}
	} else {
		r.Selected = selectedFromLabels(r)
	}
	return r, true
}

// selectedFromLabels guesses the selected profile from the labels, for an
// annotation that does not record it (an agent older than the field, or an
// unreadable annotation): the pin when the label selected it, else the
// applied profile when the node is as wanted; "" when the labels cannot
// tell.
func selectedFromLabels(r nodeStatus) string {
	switch {
	case r.Source == configs.SourceLabel:
		return r.Pinned
	case r.Source != "" && r.State == carvev1.StateSuccess:
		return r.Applied
	}
	return ""
}

// selectedBy says why the node's profile is in force: "window NAME",
// "label", "rule" or "default".
func selectedBy(r nodeStatus) string {
	switch {
	case r.Window != "" && (r.Source == "" || r.Source == "window"):
		return "window " + r.Window
	case r.Window != "":
		return r.Source + " (window " + r.Window + ")"
	}
	return r.Source
}

// compactResources writes resources as "mig-1g.10gb=14 gpu=4", by name.
func compactResources(res map[string]int64) string {
	names := make([]string, 0, len(res))
	for n := range res {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s=%d", n, res[n])
	}
	return strings.Join(parts, " ")
}
