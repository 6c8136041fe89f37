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

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/carve-dev/carve/internal/buildinfo"
)

// versionNamesShown is how many node names a row of carvectl version's
// table lists; -o json lists them all.
const versionNamesShown = 5

// versionReport is what carvectl version prints: carvectl's own build,
// and the agents' versions in the cluster unless --client.
type versionReport struct {
	Client buildinfo.Info `json:"client"`
	// Server is the API server the agents' versions were read from.
	Server string `json:"server,omitempty"`
	// Agents are the GPU nodes grouped by the version of the agent that
	// wrote their record, the largest group first; nil with --client or
	// when the cluster could not be read.
	Agents []agentVersion `json:"agents,omitzero"`
}

// agentVersion is the GPU nodes whose record names one agent version.
type agentVersion struct {
	// Version is the agent's version, "" for nodes whose record names
	// none (an agent older than the field, or no readable record).
	Version string `json:"version"`
	// Nodes are the nodes' names, sorted.
	Nodes []string `json:"nodes"`
}

// versionQuery is what carvectl version shows, as output (table or json).
type versionQuery struct {
	kubeconfig, selector, output string
	client                       bool
}

func runVersion(args []string, stdout, stderr io.Writer, newClient statusClientFunc) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var q versionQuery
	fs.BoolVar(&q.client, "client", false, "carvectl's own version only; do not ask the cluster")
	fs.StringVar(&q.kubeconfig, "kubeconfig", "", "kubeconfig file (default $KUBECONFIG, ~/.kube/config, or in-cluster)")
	fs.StringVar(&q.selector, "selector", "", "label selector for the nodes whose agents to show, e.g. pool=inference")
	fs.StringVar(&q.output, "o", "table", "output format: table or json")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if q.output != "table" && q.output != "json" {
		return fmt.Errorf("-o %q: want table or json", q.output)
	}
	if q.selector != "" {
		if _, err := labels.Parse(q.selector); err != nil {
			return fmt.Errorf("--selector %q: %w", q.selector, err)
		}
	}
	rep := versionReport{Client: buildinfo.Get()}
	if q.client {
		return writeVersion(stdout, rep, q.output)
	}
	cs, host, err := newClient(q.kubeconfig, statusTimeout)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
		defer cancel()
		rep.Server = host
		rep.Agents, err = agentVersions(ctx, cs, host, q.selector)
	}
	if werr := writeVersion(stdout, rep, q.output); werr != nil {
		return werr
	}
	if err != nil {
		return fmt.Errorf("agents' versions: %w (--client shows carvectl's alone)", err)
	}
	return nil
}

// agentVersions reads the GPU nodes matching selector through cs, as
// carvectl status does, and groups them by the agent version their
// records name. host names the API server in errors.
func agentVersions(ctx context.Context, cs kubernetes.Interface, host, selector string) ([]agentVersion, error) {
	rows, err := nodeStatuses(ctx, cs, selector)
	if err != nil {
		if host == "" {
			host = "the API server"
		}
		return nil, fmt.Errorf("list nodes from %s: %w", host, err)
	}
	byVersion := map[string][]string{}
	for _, r := range rows {
		byVersion[r.AgentVersion] = append(byVersion[r.AgentVersion], r.Node)
	}
	out := []agentVersion{}
	for v, nodes := range byVersion {
		out = append(out, agentVersion{Version: v, Nodes: nodes}) // rows come sorted by name
	}
	sort.Slice(out, func(i, j int) bool {
		if len(out[i].Nodes) != len(out[j].Nodes) {
			return len(out[i].Nodes) > len(out[j].Nodes)
		}
		return out[i].Version > out[j].Version
	})
	return out, nil
}

// writeVersion prints rep as output says: JSON, or the client's line and
// a table of the agents' versions (none with --client).
func writeVersion(w io.Writer, rep versionReport, output string) error {
	if output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprintf(w, "Client: %s\n", rep.Client.Line("carvectl"))
	if rep.Agents == nil {
		return nil
	}
	nodes := 0
	for _, a := range rep.Agents {
		nodes += len(a.Nodes)
	}
	fmt.Fprintf(w, "Agents on %s: %s, %s\n", rep.Server, plural(nodes, "GPU node"), plural(len(rep.Agents), "version"))
	if nodes == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tNODES\tNAMES")
	for _, a := range rep.Agents {
		fmt.Fprintf(tw, "%s\t%d\t%s\n", versionWord(a.Version), len(a.Nodes), someNames(a.Nodes))
	}
	return tw.Flush()
}

// versionWord is the VERSION cell: the version, or "unknown" for nodes
// whose record names none.
func versionWord(v string) string {
	if v == "" {
		return "unknown"
	}
	return v
}

// someNames lists the first versionNamesShown names, and how many more.
func someNames(names []string) string {
	if len(names) <= versionNamesShown {
		return strings.Join(names, " ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:versionNamesShown], " "), len(names)-versionNamesShown)
}

// plural is "1 node", "2 nodes".
func plural(n int, noun string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
