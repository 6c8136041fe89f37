package monitoring

import (
	"encoding/json"
	"fmt"
)

// Dashboard is the part of a Grafana dashboard the checks read.
type Dashboard struct {
	UID           string   `json:"uid"`
	Title         string   `json:"title"`
	Tags          []string `json:"tags"`
	SchemaVersion int      `json:"schemaVersion"`
	Templating    struct {
		List []Variable `json:"list"`
	} `json:"templating"`
	Panels []Panel `json:"panels"`
}

// Variable is a template variable.
type Variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Datasource *DatasourceRef  `json:"datasource"`
}

// Panel is a panel, or a row with the panels it holds while collapsed.
type Panel struct {
	ID         *int           `json:"id"`
	Title      string         `json:"title"`
	Type       string         `json:"type"`
	Datasource *DatasourceRef `json:"datasource"`
	Targets    []Target       `json:"targets"`
	Panels     []Panel        `json:"panels"`
}

// Target is one query of a panel.
type Target struct {
	RefID      string         `json:"refId"`
	Expr       string         `json:"expr"`
	Datasource *DatasourceRef `json:"datasource"`
}

// DatasourceRef names a datasource: an object {type, uid}, or in older
// dashboards a string (its name or a variable).
type DatasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// UnmarshalJSON accepts the object and the string form.
func (d *DatasourceRef) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*d = DatasourceRef{UID: s}
		return nil
	}
	type plain DatasourceRef
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return fmt.Errorf("datasource: %w", err)
	}
	*d = DatasourceRef(p)
	return nil
}

// datasourceVariable is the name of the template variable every panel's
// datasource must be.
const datasourceVariable = "datasource"

// usesVariable reports whether d is the Prometheus datasource variable.
func (d *DatasourceRef) usesVariable() bool {
	return d != nil && d.Type == "prometheus" && (d.UID == "${"+datasourceVariable+"}" || d.UID == "$"+datasourceVariable)
}

// ParseDashboard decodes a dashboard.
func ParseDashboard(data []byte) (*Dashboard, error) {
	var d Dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	return &d, nil
}

// CheckDashboard checks a dashboard: a datasource variable of type
// prometheus; every query variable and every panel (rows' panels
// included) on it, with a unique id; every PromQL expression parses with
// Grafana's variables replaced, and names only known metrics.
func CheckDashboard(d *Dashboard, known Names) []Problem {
	vars, ps := checkVariables(d.Templating.List, known)
	ids := map[int]string{}
	var walk func([]Panel)
	walk = func(panels []Panel) {
		for _, p := range panels {
			ps = append(ps, checkPanel(p, ids, vars, known)...)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return ps
}

// checkVariables checks the template variables and returns stand-ins for
// them: a duration for an interval variable, a plain word for the others.
func checkVariables(list []Variable, known Names) (map[string]string, []Problem) {
	vars := map[string]string{}
	var ps []Problem
	hasDatasource := false
	for _, v := range list {
		vars[v.Name] = "standin_" + v.Name
		switch v.Type {
		case "interval":
			vars[v.Name] = "5m"
		case "datasource":
			q, err := v.QueryText()
			hasDatasource = hasDatasource || v.Name == datasourceVariable && err == nil && q == "prometheus"
		default:
		}
	}
	if !hasDatasource {
		ps = append(ps, Problem{"templating", fmt.Sprintf("no variable %q of type datasource for prometheus", datasourceVariable)})
	}
	for _, v := range list {
		if v.Type != "query" {
			continue
		}
		where := "variable " + v.Name
		if !v.Datasource.usesVariable() {
			ps = append(ps, Problem{where, "datasource is not the $" + datasourceVariable + " variable"})
		}
		ps = append(ps, checkVariableQuery(where, v, vars, known)...)
	}
	return vars, ps
}

// QueryText is the query of a variable: a string, or an object with the
// string in query.
func (v Variable) QueryText() (string, error) {
	var q string
	if err := json.Unmarshal(v.Query, &q); err == nil {
		return q, nil
	}
	var obj struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(v.Query, &obj); err != nil {
		return "", fmt.Errorf("query %s: neither a string nor {query: ...}", v.Query)
	}
	return obj.Query, nil
}

// checkVariableQuery checks the query of a query variable.
func checkVariableQuery(where string, v Variable, vars map[string]string, known Names) []Problem {
	q, err := v.QueryText()
	if err != nil {
		return []Problem{{where, err.Error()}}
	}
	expr, ok := variableQuery(q)
	switch {
	case !ok:
		return []Problem{{where, fmt.Sprintf("query %q: not label_values(...) or query_result(...), so not checked", q)}}
	case expr == "":
		return nil
	}
	return CheckExpr(where, expr, vars, known)
}

// checkPanel checks one panel: its id, its datasource and its queries.
func checkPanel(p Panel, ids map[int]string, vars map[string]string, known Names) []Problem {
	where := fmt.Sprintf("panel %q", p.Title)
	var ps []Problem
	switch {
	case p.ID == nil:
		ps = append(ps, Problem{where, "no id"})
	case ids[*p.ID] != "":
		ps = append(ps, Problem{where, fmt.Sprintf("id %d is also that of %s", *p.ID, ids[*p.ID])})
	default:
		ids[*p.ID] = where
	}
	if p.Type == "row" {
		return ps
	}
	if !p.Datasource.usesVariable() {
		ps = append(ps, Problem{where, "datasource is not the $" + datasourceVariable + " variable"})
	}
	for _, t := range p.Targets {
		tw := where + " query " + t.RefID
		if t.Datasource != nil && !t.Datasource.usesVariable() {
			ps = append(ps, Problem{tw, "datasource is not the $" + datasourceVariable + " variable"})
		}
		if t.Expr == "" {
			ps = append(ps, Problem{tw, "no expr"})
			continue
		}
		ps = append(ps, CheckExpr(tw, t.Expr, vars, known)...)
	}
	return ps
}
