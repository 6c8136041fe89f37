package monitoring

import (
	"encoding/json"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The files checked, from this package's directory.
const (
	dashboardPath = "../../charts/carve/files/dashboard.json"
	alertsPath    = "../../charts/carve/files/alerts.yaml"
	docPath       = "../../docs/monitoring.md"
)

// exported is the names carve-agent exports, or the test fails.
func exported(t *testing.T) Names {
	t.Helper()
	names, err := Exported(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// readFile reads path, or the test fails.
func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// describe lists problems one a line, for a failure message.
func describe(ps []Problem) string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString("\n  " + p.String())
	}
	return b.String()
}

// The names come from what agent.New registers: carve's own, the device
// plugin's, a histogram's series names, the Go collector's, and up.
func TestExportedNames(t *testing.T) {
	names := exported(t)
	for _, n := range []string{
		"carve_agent_state", "carve_agent_ready", "carve_agent_devices_unhealthy", "carve_device_plugin_xid_events_total",
		"carve_agent_apply_duration_seconds_bucket", "carve_agent_apply_duration_seconds_count", "go_goroutines", "up",
	} {
		if !names.Has(n) {
			t.Errorf("%s is not among the exported names", n)
		}
	}
	for _, n := range []string{"carve_agent_state_bucket", "carve_agent_nope", "node_cpu_seconds_total"} {
		if names.Has(n) {
			t.Errorf("%s is among the exported names", n)
		}
	}
}

// Every query of the dashboard parses and names only metrics carve-agent
// exports (or up); every panel is on the datasource variable with an id
// of its own.
func TestDashboardUsesExportedMetrics(t *testing.T) {
	d, err := ParseDashboard(readFile(t, dashboardPath))
	if err != nil {
		t.Fatal(err)
	}
	if ps := CheckDashboard(d, exported(t)); len(ps) > 0 {
		t.Errorf("%s:%s", dashboardPath, describe(ps))
	}
}

// The dashboard is the one the chart ships: its uid, title, tags, schema,
// variables and the panels docs/monitoring.md describes.
func TestDashboardContents(t *testing.T) {
	d, err := ParseDashboard(readFile(t, dashboardPath))
	if err != nil {
		t.Fatal(err)
	}
	if d.UID != "carve-fleet" || d.Title != "carve fleet" || !slices.Equal(d.Tags, []string{"carve"}) || d.SchemaVersion < 39 {
		t.Errorf("uid %q title %q tags %v schemaVersion %d; want carve-fleet, carve fleet, [carve], at least 39", d.UID, d.Title, d.Tags, d.SchemaVersion)
	}
	var vars []string
	for _, v := range d.Templating.List {
		q, err := v.QueryText()
		if err != nil {
			t.Fatal(err)
		}
		vars = append(vars, v.Type+" "+v.Name+" "+q)
	}
	want := []string{
		"datasource datasource prometheus",
		"query node label_values(carve_agent_state, node)",
		`query profile label_values(carve_agent_profile{node=~"$node"}, profile)`,
	}
	if diff := cmp.Diff(want, vars); diff != "" {
		t.Errorf("variables (-want +got):\n%s", diff)
	}
	titles := map[string]bool{}
	var walk func([]Panel)
	walk = func(ps []Panel) {
		for _, p := range ps {
			titles[p.Title] = true
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, title := range []string{
		"Nodes by state", "Nodes by profile", "Agents", "Agent versions across the fleet", "Repartitions per hour", "Apply duration p50 / p95 / p99 (past hour)",
		"Devices advertised per resource", "Allocations per second", "Allocation failures per second",
		"Rollout slots held", "Nodes waiting for a slot", "Rollout halted", "Drains: time to the drain timeout",
		"Reconciles failed or in error (per hour)", "XID events (per hour)", "Unhealthy devices per resource",
		"Nodes failed or needing a reboot", "Agents not ready or down",
		"Dynamic MIG devices by profile", "Claim prepare duration p50 / p99 (past hour)",
		"Claim prepare and unprepare failures (per hour)", "Largest profile still placeable per dynamic GPU",
	} {
		if !titles[title] {
			t.Errorf("no panel %q", title)
		}
	}
}

// mutation changes a decoded copy of the dashboard.
type mutation func(t *testing.T, d map[string]any)

// panelByID finds a top-level panel of a decoded dashboard.
func panelByID(t *testing.T, d map[string]any, id float64) map[string]any {
	t.Helper()
	for _, p := range d["panels"].([]any) {
		if pm := p.(map[string]any); pm["id"] == id {
			return pm
		}
	}
	t.Fatalf("no panel %v", id)
	return nil
}

// setExpr sets the expression of a panel's first query.
func setExpr(id float64, expr string) mutation {
	return func(t *testing.T, d map[string]any) {
		t.Helper()
		panelByID(t, d, id)["targets"].([]any)[0].(map[string]any)["expr"] = expr
	}
}

// The check reports each kind of mistake in a copy of the dashboard, where
// it is, and nothing in the unchanged copy.
func TestDashboardCheckReportsMistakes(t *testing.T) {
	ds := map[string]any{"type": "prometheus", "uid": "${datasource}"}
	tests := []struct {
		name string
		mod  mutation
		want []Problem
	}{
		{"unchanged", func(*testing.T, map[string]any) {}, nil},
		{"misspelt metric", setExpr(2, `sum by (state) (carve_agent_stat{node=~"$node"})`),
			[]Problem{{`panel "Nodes by state" query A`, "unknown metric carve_agent_stat"}}},
		{"histogram suffix on a gauge", setExpr(2, `sum(carve_agent_state_bucket)`),
			[]Problem{{`panel "Nodes by state" query A`, "unknown metric carve_agent_state_bucket"}}},
		{"metric of another exporter", setExpr(2, `sum(node_cpu_seconds_total) + sum(carve_agent_state)`),
			[]Problem{{`panel "Nodes by state" query A`, "unknown metric node_cpu_seconds_total"}}},
		{"name matcher matching nothing", setExpr(2, `count({__name__=~"carve_nope_.*"})`),
			[]Problem{{`panel "Nodes by state" query A`, `metric name matcher __name__=~"carve_nope_.*" matches no known metric`}}},
		{"selector without a name", setExpr(2, `count({node="x"})`),
			[]Problem{{`panel "Nodes by state" query A`, `selector {node="x"} names no metric`}}},
		{"unknown variable", setExpr(2, `sum(carve_agent_state{node=~"$nodes"})`),
			[]Problem{{`panel "Nodes by state" query A`, "unknown variable $nodes"}}},
		{"does not parse", setExpr(2, `sum(carve_agent_state`),
			[]Problem{{`panel "Nodes by state" query A`, `PromQL "sum(carve_agent_state" does not parse`}}},
		{"in a collapsed row", func(_ *testing.T, d map[string]any) {
			d["panels"] = append(d["panels"].([]any), map[string]any{"id": 100.0, "type": "row", "title": "Hidden", "collapsed": true,
				"panels": []any{map[string]any{"id": 101.0, "type": "timeseries", "title": "Nested", "datasource": ds,
					"targets": []any{map[string]any{"refId": "A", "expr": "rate(carve_agent_nope[$__rate_interval])", "datasource": ds}}}}})
		}, []Problem{{`panel "Nested" query A`, "unknown metric carve_agent_nope"}}},
		{"in a variable", func(t *testing.T, d map[string]any) {
			t.Helper()
			d["templating"].(map[string]any)["list"].([]any)[1].(map[string]any)["query"] = "label_values(carve_agent_states, node)"
		}, []Problem{{"variable node", "unknown metric carve_agent_states"}}},
		{"fixed datasource", func(t *testing.T, d map[string]any) {
			t.Helper()
			panelByID(t, d, 3)["datasource"] = map[string]any{"type": "prometheus", "uid": "P1809F7CD0C75ACF3"}
		}, []Problem{{`panel "Nodes by profile"`, "datasource is not the $datasource variable"}}},
		{"duplicate id", func(t *testing.T, d map[string]any) {
			t.Helper()
			panelByID(t, d, 3)["id"] = 2.0
		}, []Problem{{`panel "Nodes by profile"`, `id 2 is also that of panel "Nodes by state"`}}},
		{"no datasource variable", func(_ *testing.T, d map[string]any) {
			tmpl := d["templating"].(map[string]any)
			tmpl["list"] = tmpl["list"].([]any)[1:]
		}, []Problem{{"templating", `no variable "datasource" of type datasource for prometheus`}}},
	}
	original := readFile(t, dashboardPath)
	known := exported(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m map[string]any
			if err := json.Unmarshal(original, &m); err != nil {
				t.Fatal(err)
			}
			tt.mod(t, m)
			b, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			d, err := ParseDashboard(b)
			if err != nil {
				t.Fatal(err)
			}
			got := CheckDashboard(d, known)
			for i, p := range got {
				// The parser's own message may change between versions.
				if before, _, ok := strings.Cut(p.What, " does not parse: "); ok {
					got[i].What = before + " does not parse"
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}
