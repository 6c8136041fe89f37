package monitoring

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/carve-dev/carve/agent"
	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/dra"
	"github.com/carve-dev/carve/plugin"
)

// Labels are, by series name, the label names carve-agent's series of
// that name carry, besides the target labels: what a selector of a query
// may match on.
type Labels map[string][]string

// TargetLabels are the labels Prometheus adds to every series it scrapes
// from carve-agent, with where they come from: a selector may match on
// them whatever the metric.
func TargetLabels() map[string]string {
	return map[string]string{
		"node":      "the node the agent pod runs on: the chart's ServiceMonitor and PodMonitor relabel __meta_kubernetes_pod_node_name to it",
		"container": "the pod's container, set by Prometheus Operator",
		"pod":       "the agent's pod, set by Prometheus Operator",
		"namespace": "the pod's namespace, set by Prometheus Operator",
		"service":   "the metrics Service, set by Prometheus Operator for a ServiceMonitor",
		"endpoint":  "the scraped port's name, set by Prometheus Operator",
		"job":       "the scrape job, set by Prometheus",
		"instance":  "the scraped address, set by Prometheus",
	}
}

// LabelValues are, by series name and label, the values carve-agent can
// export, where the code defines them as a closed set; a label not listed
// takes open values (profile and resource names, say).
func LabelValues() map[string]map[string][]string {
	out := map[string]map[string][]string{
		"carve_agent_state":                    {"state": carvev1.States()},
		"carve_agent_reconciles_total":         {"result": agent.ReconcileResults()},
		"carve_agent_profile":                  {"source": configs.Sources()},
		"carve_device_plugin_xid_events_total": {"critical": plugin.XIDCriticalValues()},
		"carve_dra_prepare_failures_total":     {"reason": dra.PrepareFailures()},
		"carve_dra_unprepare_failures_total":   {"reason": dra.UnprepareFailures()},
	}
	kinds := []string{agent.ClaimKindDynamic, agent.ClaimKindStatic}
	for _, h := range []string{"carve_dra_prepare_duration_seconds", "carve_dra_unprepare_duration_seconds"} {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			out[h+suffix] = map[string][]string{"kind": kinds}
		}
	}
	return out
}

// ExportedLabels builds the agent as Exported does and returns the label
// names of every series name it exports, read from the descriptions of
// everything registered (agent.MetricLabels): a histogram's _bucket adds
// le, a summary's own name quantile. The allowed names (up) carry the
// target labels only.
func ExportedLabels(log *slog.Logger) (Labels, error) {
	out := Labels{}
	for _, mode := range advertiseModes() {
		reg, done, err := agentRegistry(log, mode)
		if err != nil {
			return nil, err
		}
		err = addLabels(out, reg)
		done()
		if err != nil {
			return nil, err
		}
	}
	for n := range Allowed() {
		out[n] = []string{}
	}
	return out, nil
}

// addLabels adds to out the label names of every series name reg
// exports.
func addLabels(out Labels, reg *prometheus.Registry) error {
	byName, err := agent.MetricLabels(reg)
	if err != nil {
		return err
	}
	mfs, err := reg.Gather()
	if err != nil {
		return fmt.Errorf("gather: %w", err)
	}
	maps.Copy(out, byName)
	for _, mf := range mfs {
		base := byName[mf.GetName()]
		for suffix, extra := range seriesSuffixes(mf.GetType()) {
			out[mf.GetName()+suffix] = withLabel(base, extra)
		}
		if mf.GetType() == dto.MetricType_SUMMARY {
			out[mf.GetName()] = withLabel(base, "quantile")
		}
	}
	return nil
}

// withLabel returns names with name added, sorted ("" adds none).
func withLabel(names []string, name string) []string {
	out := slices.Clone(names)
	if name != "" {
		out = append(out, name)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// CheckRuleLabels checks the label matchers of every rule's expression,
// alerting and recording, with CheckLabels.
func CheckRuleLabels(groups *rulefmt.RuleGroups, known Labels, values map[string]map[string][]string) []Problem {
	var ps []Problem
	for _, g := range groups.Groups {
		for i, r := range g.Rules {
			where := fmt.Sprintf("group %s rule %d", g.Name, i)
			switch {
			case r.Alert != "":
				where = "alert " + r.Alert
			case r.Record != "":
				where = "record " + r.Record
			}
			ps = append(ps, CheckLabels(where, r.Expr, nil, known, values)...)
		}
	}
	return ps
}

// CheckLabels parses expr as CheckExpr does and checks the label matchers
// of every selector of a metric in known: each label it matches is one
// the metric carries or a target label, and each value it matches on a
// label of values is one the agent exports (=, !=), or matches one (=~).
// Selectors of unknown metrics are left to CheckExpr.
func CheckLabels(where, expr string, vars map[string]string, known Labels, values map[string]map[string][]string) []Problem {
	parsed, ps := parseExpr(where, expr, vars)
	if parsed == nil {
		return ps
	}
	parser.Inspect(parsed, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok {
			ps = append(ps, checkMatchers(where, vs, known, values)...)
		}
		return nil
	})
	return ps
}

// checkMatchers checks the label matchers of one selector.
func checkMatchers(where string, vs *parser.VectorSelector, known Labels, values map[string]map[string][]string) []Problem {
	name := vs.Name
	for _, m := range vs.LabelMatchers {
		if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
			name = m.Value
		}
	}
	carried, ok := known[name]
	if !ok {
		return nil
	}
	var ps []Problem
	for _, m := range vs.LabelMatchers {
		if m.Name == model.MetricNameLabel {
			continue
		}
		if _, target := TargetLabels()[m.Name]; !target && !slices.Contains(carried, m.Name) {
			ps = append(ps, Problem{where, fmt.Sprintf("selector %s: %s has no label %s (its labels: %v, and the target labels %v)",
				vs, name, m.Name, carried, slices.Sorted(maps.Keys(TargetLabels())))})
			continue
		}
		vals, closed := values[name][m.Name]
		if !closed {
			continue
		}
		var bad bool
		switch m.Type {
		case labels.MatchEqual, labels.MatchNotEqual:
			bad = !slices.Contains(vals, m.Value)
		case labels.MatchRegexp:
			bad = !slices.ContainsFunc(vals, m.Matches)
		default:
		}
		if bad {
			ps = append(ps, Problem{where, fmt.Sprintf("selector %s: matcher %s matches none of the values carve-agent exports for %s's %s: %v",
				vs, m, name, m.Name, vals)})
		}
	}
	return ps
}
