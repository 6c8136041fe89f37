package monitoring

import (
	"bufio"
	"bytes"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"unicode"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// Severities are the values an alert's severity label may take.
func Severities() []string { return []string{"critical", "warning", "info"} }

// runbookDoc is the document every alert's runbook_url points into.
const runbookDoc = "docs/monitoring.md#"

// LoadRules loads a rule file as Prometheus and promtool check rules do.
func LoadRules(path string, log *slog.Logger) (*rulefmt.RuleGroups, []error) {
	return rulefmt.ParseFile(path, false, model.UTF8Validation, parser.NewParser(parser.Options{}), log)
}

// CheckRules checks loaded rules: every expression names only known
// metrics; every alert has a for duration, a severity, a summary and a
// description that name the node, and a runbook_url into
// docs/monitoring.md whose anchor is one of anchors.
func CheckRules(groups *rulefmt.RuleGroups, known Names, anchors map[string]bool) []Problem {
	var ps []Problem
	for _, g := range groups.Groups {
		for i, r := range g.Rules {
			where := fmt.Sprintf("group %s rule %d", g.Name, i)
			if r.Alert != "" {
				where = "alert " + r.Alert
			}
			ps = append(ps, CheckExpr(where, r.Expr, nil, known)...)
			if r.Alert != "" {
				ps = append(ps, checkAlert(where, r, anchors)...)
			}
		}
	}
	return ps
}

// checkAlert checks an alert's for, labels and annotations.
func checkAlert(where string, r rulefmt.Rule, anchors map[string]bool) []Problem {
	var ps []Problem
	if r.For <= 0 {
		ps = append(ps, Problem{where, "no for: it would fire on one evaluation"})
	}
	if s := r.Labels["severity"]; !slices.Contains(Severities(), s) {
		ps = append(ps, Problem{where, fmt.Sprintf("severity %q, want one of %v", s, Severities())})
	}
	for _, a := range []string{"summary", "description"} {
		if !strings.Contains(r.Annotations[a], "$labels.node") {
			ps = append(ps, Problem{where, a + " does not name the node ({{ $labels.node }})"})
		}
	}
	url := r.Annotations["runbook_url"]
	_, anchor, ok := strings.Cut(url, runbookDoc)
	switch {
	case !ok:
		ps = append(ps, Problem{where, fmt.Sprintf("runbook_url %q does not point into %s", url, runbookDoc)})
	case !anchors[anchor]:
		ps = append(ps, Problem{where, fmt.Sprintf("runbook_url anchor #%s: no such heading in docs/monitoring.md", anchor)})
	}
	return ps
}

// Anchors returns the anchors GitHub gives the headings of a Markdown
// document: lower case, spaces to hyphens, other punctuation dropped
// (fenced code is skipped).
func Anchors(md []byte) map[string]bool {
	out := map[string]bool{}
	fenced := false
	sc := bufio.NewScanner(bytes.NewReader(md))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		out[slug(strings.TrimSpace(strings.TrimLeft(line, "#")))] = true
	}
	return out
}

// slug is GitHub's anchor of a heading.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		default:
		}
	}
	return b.String()
}
