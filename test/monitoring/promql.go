package monitoring

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// builtinStandIns are valid stand-ins for Grafana's built-in variables:
// a duration where Grafana puts one, a number where it puts a number.
func builtinStandIns() map[string]string {
	return map[string]string{
		"__rate_interval": "5m", "__interval": "1m", "__range": "1h",
		"__interval_ms": "60000", "__range_s": "3600", "__range_ms": "3600000",
	}
}

// variableRE matches a Grafana variable: ${name}, ${name:format},
// [[name]], [[name:format]] or $name; the name is in one of the groups.
func variableRE() *regexp.Regexp {
	return regexp.MustCompile(`\$\{(\w+)(?::[^}]*)?\}|\[\[(\w+)(?::[^\]]*)?\]\]|\$(\w+)`)
}

// substitute replaces Grafana's variables in expr with stand-ins: the
// built-in ones' and those of vars (the dashboard's variables); it returns
// the variables that are neither.
func substitute(expr string, vars map[string]string) (string, []string) {
	re := variableRE()
	var unknown []string
	builtins := builtinStandIns()
	out := re.ReplaceAllStringFunc(expr, func(m string) string {
		g := re.FindStringSubmatch(m)
		name := g[1] + g[2] + g[3]
		if v, ok := builtins[name]; ok {
			return v
		}
		if v, ok := vars[name]; ok {
			return v
		}
		unknown = append(unknown, "$"+name)
		return m
	})
	return out, unknown
}

// CheckExpr parses a PromQL expression of a dashboard or rule file,
// Grafana's variables replaced by stand-ins (vars: the dashboard's), and
// checks that every metric its selectors name is one of known. Each
// problem is reported at where.
func CheckExpr(where, expr string, vars map[string]string, known Names) []Problem {
	parsed, ps := parseExpr(where, expr, vars)
	if parsed == nil {
		return ps
	}
	parser.Inspect(parsed, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok {
			ps = append(ps, checkSelector(where, vs, known)...)
		}
		return nil
	})
	return ps
}

// parseExpr parses a PromQL expression, Grafana's variables replaced by
// stand-ins (vars: the dashboard's); nil and the problems, reported at
// where, when a variable is unknown or the expression does not parse.
func parseExpr(where, expr string, vars map[string]string) (parser.Expr, []Problem) {
	var ps []Problem
	text, unknown := substitute(expr, vars)
	for _, v := range unknown {
		ps = append(ps, Problem{where, "unknown variable " + v})
	}
	if len(unknown) > 0 {
		return nil, ps
	}
	parsed, err := parser.NewParser(parser.Options{}).ParseExpr(text)
	if err != nil {
		return nil, append(ps, Problem{where, fmt.Sprintf("PromQL %q does not parse: %v", text, err)})
	}
	return parsed, nil
}

// checkSelector checks the metric name matchers of one selector.
func checkSelector(where string, vs *parser.VectorSelector, known Names) []Problem {
	var ps []Problem
	named := false
	for _, m := range vs.LabelMatchers {
		if m.Name != model.MetricNameLabel {
			continue
		}
		named = true
		switch m.Type {
		case labels.MatchEqual:
			if !known.Has(m.Value) {
				ps = append(ps, Problem{where, "unknown metric " + m.Value})
			}
		case labels.MatchRegexp:
			if !slices.ContainsFunc(known.Sorted(), m.Matches) {
				ps = append(ps, Problem{where, fmt.Sprintf("metric name matcher %s matches no known metric", m)})
			}
		default:
			ps = append(ps, Problem{where, fmt.Sprintf("negative metric name matcher %s: name the metrics", m)})
		}
	}
	if !named {
		ps = append(ps, Problem{where, fmt.Sprintf("selector %s names no metric", vs)})
	}
	return ps
}

// Sorted returns the names in order.
func (n Names) Sorted() []string {
	out := make([]string, 0, len(n))
	for name := range n {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// variableQuery returns the PromQL expression in a Grafana Prometheus
// variable query (label_values(expr, label), query_result(expr)); "" for
// one without (label_values(label)); ok false for a form not checked.
func variableQuery(q string) (expr string, ok bool) {
	q = strings.TrimSpace(q)
	if m := regexp.MustCompile(`^label_values\(\s*(.+?)\s*,\s*[a-zA-Z_]\w*\s*\)$`).FindStringSubmatch(q); m != nil {
		return m[1], true
	}
	if regexp.MustCompile(`^label_values\(\s*[a-zA-Z_]\w*\s*\)$`).MatchString(q) {
		return "", true
	}
	if m := regexp.MustCompile(`^query_result\((.+)\)$`).FindStringSubmatch(q); m != nil {
		return m[1], true
	}
	return "", false
}
