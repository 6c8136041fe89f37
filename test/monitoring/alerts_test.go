package monitoring

import (
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/prometheus/model/rulefmt"
)

// loadAlerts loads the chart's rule file as Prometheus does, or the test
// fails listing every error.
func loadAlerts(t *testing.T) *rulefmt.RuleGroups {
	t.Helper()
	groups, errs := LoadRules(alertsPath, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatalf("%s does not load: %v", alertsPath, errs)
	}
	return groups
}

// alertRules returns the alerting rules by name.
func alertRules(groups *rulefmt.RuleGroups) map[string]rulefmt.Rule {
	out := map[string]rulefmt.Rule{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out[r.Alert] = r
			}
		}
	}
	return out
}

// The rule file loads as promtool check rules loads it, holds carve's
// alerts in group carve, and every alert names only exported metrics
// (or up), with for, severity, summary and description naming the node,
// and a runbook anchor that docs/monitoring.md has.
func TestAlertsLoadAndNameExportedMetrics(t *testing.T) {
	groups := loadAlerts(t)
	var names []string
	for _, g := range groups.Groups {
		if g.Name != "carve" {
			t.Errorf("group %q, want carve", g.Name)
		}
		for _, r := range g.Rules {
			names = append(names, r.Alert)
		}
	}
	want := []string{"CarveNodeFailed", "CarveNodeRebootRequired", "CarveDrainPastTimeout", "CarveRolloutHalted",
		"CarveRolloutStuck", "CarveDevicesUnhealthy", "CarveAgentNotReady", "CarveReconcileErrors"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("alerts (-want +got):\n%s", diff)
	}
	if ps := CheckRules(groups, exported(t), Anchors(readFile(t, docPath))); len(ps) > 0 {
		t.Errorf("%s:%s", alertsPath, describe(ps))
	}
}

// The rule check reports each kind of mistake in a copy of the rules.
func TestAlertsCheckReportsMistakes(t *testing.T) {
	tests := []struct {
		name string
		mod  func(r *rulefmt.Rule)
		want []Problem
	}{
		{"unchanged", func(*rulefmt.Rule) {}, nil},
		{"misspelt metric", func(r *rulefmt.Rule) { r.Expr = `carve_agent_states{state="failed"} == 1` },
			[]Problem{{"alert CarveNodeFailed", "unknown metric carve_agent_states"}}},
		{"no for", func(r *rulefmt.Rule) { r.For = 0 },
			[]Problem{{"alert CarveNodeFailed", "no for: it would fire on one evaluation"}}},
		{"no severity", func(r *rulefmt.Rule) { delete(r.Labels, "severity") },
			[]Problem{{"alert CarveNodeFailed", `severity "", want one of [critical warning info]`}}},
		{"summary without the node", func(r *rulefmt.Rule) { r.Annotations["summary"] = "a node failed" },
			[]Problem{{"alert CarveNodeFailed", "summary does not name the node ({{ $labels.node }})"}}},
		{"no description", func(r *rulefmt.Rule) { delete(r.Annotations, "description") },
			[]Problem{{"alert CarveNodeFailed", "description does not name the node ({{ $labels.node }})"}}},
		{"runbook anchor missing", func(r *rulefmt.Rule) {
			r.Annotations["runbook_url"] = "https://github.com/carve-dev/carve/blob/main/docs/monitoring.md#carvenodebroken"
		}, []Problem{{"alert CarveNodeFailed", "runbook_url anchor #carvenodebroken: no such heading in docs/monitoring.md"}}},
	}
	known, anchors := exported(t), Anchors(readFile(t, docPath))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			groups := loadAlerts(t)
			r := &groups.Groups[0].Rules[0]
			if r.Alert != "CarveNodeFailed" {
				t.Fatalf("first alert %s, want CarveNodeFailed", r.Alert)
			}
			tt.mod(r)
			if diff := cmp.Diff(tt.want, CheckRules(groups, known, anchors)); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

// alertCase is a series set describing a node's problem, or its absence,
// and the alerts that must fire at the end.
type alertCase struct {
	alert, name string
	series      string
	end         time.Duration
	// fire are the labels (some of them) of each alert that fires; none:
	// the alert stays silent.
	fire []map[string]string
}

// alertCases are the unit tests of the alerts, as promtool test rules
// would run them.
func alertCases() []alertCase {
	const m = time.Minute
	node := func(extra ...string) []map[string]string {
		l := map[string]string{"node": "n1"}
		for i := 0; i+1 < len(extra); i += 2 {
			l[extra[i]] = extra[i+1]
		}
		return []map[string]string{l}
	}
	// stuck is the gauge of slot carve-rollout-p-0, held by n1, as waiting
	// node waiter exports it.
	stuck := func(waiter, values string) string {
		return `carve_agent_rollout_slot_stuck_seconds{node="` + waiter + `",slot="carve-rollout-p-0",holder="n1"} ` + values + "\n"
	}
	return []alertCase{
		{"CarveNodeFailed", "failed 20m", `carve_agent_state{node="n1",state="failed"} 1x30`, 20 * m, node("severity", "warning")},
		{"CarveNodeFailed", "failed 10m so far", `carve_agent_state{node="n1",state="failed"} 1x30`, 10 * m, nil},
		{"CarveNodeFailed", "failed 10m, then recovered", `carve_agent_state{node="n1",state="failed"} 1x10 0x20`, 25 * m, nil},
		{"CarveNodeFailed", "healthy", "carve_agent_state{node=\"n1\",state=\"failed\"} 0x30\ncarve_agent_state{node=\"n1\",state=\"success\"} 1x30", 25 * m, nil},
		{"CarveNodeRebootRequired", "reboot required", `carve_agent_state{node="n1",state="reboot-required"} 1x20`, 10 * m, node()},
		{"CarveNodeRebootRequired", "healthy", `carve_agent_state{node="n1",state="reboot-required"} 0x20`, 10 * m, nil},
		{"CarveDrainPastTimeout", "deadline 10m, now 20m", `carve_agent_drain_deadline_timestamp_seconds{node="n1"} 600x30`, 20 * m, node()},
		{"CarveDrainPastTimeout", "deadline passed 3m ago", `carve_agent_drain_deadline_timestamp_seconds{node="n1"} 600x30`, 14 * m, nil},
		{"CarveDrainPastTimeout", "deadline ahead", `carve_agent_drain_deadline_timestamp_seconds{node="n1"} 3600x30`, 20 * m, nil},
		{"CarveDrainPastTimeout", "not draining", `carve_agent_drain_deadline_timestamp_seconds{node="n1"} 0x30`, 20 * m, nil},
		{"CarveRolloutHalted", "halted", `carve_agent_rollout_halted{node="n1"} 1x20`, 10 * m, node()},
		{"CarveRolloutHalted", "running", `carve_agent_rollout_halted{node="n1"} 0x20`, 10 * m, nil},
		// The gauge counts from the slot's expiry, as waiting agents see it;
		// n2 and n3 wait, n1 holds the slot. One alert, on the holder.
		{"CarveRolloutStuck", "stuck 10m", stuck("n2", "0+60x20") + stuck("n3", "_ 55+60x19"), 10 * m,
			node("slot", "carve-rollout-p-0", "holder", "n1", "severity", "warning")},
		{"CarveRolloutStuck", "stuck 9m so far", stuck("n2", "0+60x20") + stuck("n3", "_ 55+60x19"), 9 * m, nil},
		// n2 starts waiting at 5m, when the slot has been stuck 15m: the
		// alert fires for 1m later.
		{"CarveRolloutStuck", "seen late, 1m later", stuck("n2", "_x5 900+60x15"), 6 * m, node("slot", "carve-rollout-p-0", "holder", "n1")},
		{"CarveRolloutStuck", "seen late, at once", stuck("n2", "_x5 900+60x15"), 5 * m, nil},
		{"CarveRolloutStuck", "taken over after 8m", stuck("n2", "0+60x8 _x12"), 15 * m, nil},
		{"CarveRolloutStuck", "not stuck", `carve_agent_rollout_waiting{node="n2"} 1x20`, 15 * m, nil},
		{"CarveDevicesUnhealthy", "two unhealthy", `carve_agent_devices_unhealthy{node="n1",resource="nvidia.com/gpu"} 2x20`, 10 * m, node("resource", "nvidia.com/gpu")},
		{"CarveDevicesUnhealthy", "healthy", `carve_agent_devices_unhealthy{node="n1",resource="nvidia.com/gpu"} 0x20`, 10 * m, nil},
		{"CarveAgentNotReady", "not ready", `carve_agent_ready{node="n1",pod="carve-agent-x"} 0x20`, 15 * m, node("reason", "not ready", "severity", "critical")},
		{"CarveAgentNotReady", "target down", `up{container="carve-agent",node="n1",pod="carve-agent-x"} 0x20`, 15 * m, node("reason", "down")},
		{"CarveAgentNotReady", "ready and up", "carve_agent_ready{node=\"n1\"} 1x20\nup{container=\"carve-agent\",node=\"n1\"} 1x20", 15 * m, nil},
		{"CarveAgentNotReady", "another target down", `up{container="node-exporter",node="n1"} 0x20`, 15 * m, nil},
		{"CarveReconcileErrors", "errors for 25m", `carve_agent_reconciles_total{node="n1",result="error"} 0+4x30`, 25 * m, node()},
		{"CarveReconcileErrors", "errors stopped 15m ago", `carve_agent_reconciles_total{node="n1",result="error"} 0+4x10 40x20`, 25 * m, nil},
		{"CarveReconcileErrors", "failed reconciles only", "carve_agent_reconciles_total{node=\"n1\",result=\"error\"} 3x30\ncarve_agent_reconciles_total{node=\"n1\",result=\"failed\"} 0+4x30", 25 * m, nil},
	}
}

// Each alert fires on a series set describing its problem, naming the
// node, and stays silent on a healthy one (and before its for has passed).
func TestAlertsFireOnProblemsOnly(t *testing.T) {
	rules := alertRules(loadAlerts(t))
	covered := map[string][2]bool{} // fires, silent
	for _, tc := range alertCases() {
		t.Run(tc.alert+"/"+tc.name, func(t *testing.T) {
			r, ok := rules[tc.alert]
			if !ok {
				t.Fatalf("no alert %s", tc.alert)
			}
			got := evalAlert(t, r, tc.series, tc.end)
			if len(got) != len(tc.fire) {
				t.Fatalf("%d alerts fire %v, want %d", len(got), got, len(tc.fire))
			}
			for i, want := range tc.fire {
				for k, v := range want {
					if got[i].Labels[k] != v {
						t.Errorf("label %s = %q, want %q (labels %v)", k, got[i].Labels[k], v, got[i].Labels)
					}
				}
				for _, a := range []string{"summary", "description"} {
					if text := got[i].Annotations[a]; !strings.Contains(text, "node "+want["node"]) {
						t.Errorf("%s %q does not name node %s", a, text, want["node"])
					}
				}
			}
		})
		c := covered[tc.alert]
		c[0], c[1] = c[0] || len(tc.fire) > 0, c[1] || len(tc.fire) == 0
		covered[tc.alert] = c
	}
	for name := range rules {
		if c := covered[name]; !c[0] || !c[1] {
			t.Errorf("alert %s: a case where it fires %v, one where it stays silent %v; want both", name, c[0], c[1])
		}
	}
}

// exportedLabels returns the label names of carve-agent's series, or the
// test fails.
func exportedLabels(t *testing.T) Labels {
	t.Helper()
	l, err := ExportedLabels(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Every selector of every rule, alerting or recording, matches only
// labels carve-agent's series of its metric carry (or target labels), and
// on a label with a closed set of values only values the agent exports:
// state="failed" is a state, result="error" a reconcile result.
func TestAlertsMatchExportedLabels(t *testing.T) {
	known := exportedLabels(t)
	// The value sets are of labels the agent's metrics carry.
	for metric, byLabel := range LabelValues() {
		for label := range byLabel {
			if !slices.Contains(known[metric], label) {
				t.Errorf("LabelValues lists values of %s's label %s; the agent exports %s with labels %v", metric, label, metric, known[metric])
			}
		}
	}
	if ps := CheckRuleLabels(loadAlerts(t), known, LabelValues()); len(ps) > 0 {
		t.Errorf("%s:%s", alertsPath, describe(ps))
	}
}

// The label check reports a label the metric lacks and a value it never
// takes, and lets through target labels, open values and regular
// expressions that match a value.
func TestAlertsLabelCheckReportsMistakes(t *testing.T) {
	const where = "alert CarveNodeFailed"
	tests := []struct {
		name, expr string
		want       []Problem
	}{
		{"as shipped", `carve_agent_state{state="failed"} == 1`, nil},
		{"target labels, open values", `carve_agent_devices_unhealthy{node="n1",pod="p",resource="nvidia.com/gpu"} > 0`, nil},
		{"regexp matching a value", `increase(carve_agent_reconciles_total{result=~"err.*|failed"}[10m]) > 0`, nil},
		{"histogram bucket", `histogram_quantile(0.9, rate(carve_agent_apply_duration_seconds_bucket{le="+Inf"}[5m]))`, nil},
		{"up", `up{container="carve-agent"} == 0`, nil},
		{"no such label", `carve_agent_state{phase="failed"} == 1`, []Problem{{where,
			`selector carve_agent_state{phase="failed"}: carve_agent_state has no label phase (its labels: [state], and the target labels [container endpoint instance job namespace node pod service])`}}},
		{"no such state", `carve_agent_state{state="error"} == 1`, []Problem{{where,
			`selector carve_agent_state{state="error"}: matcher state="error" matches none of the values carve-agent exports for carve_agent_state's state: [success adopted pending draining applying failed reboot-required held driver-upgrade]`}}},
		{"no such result", `carve_agent_reconciles_total{result!="errors"}`, []Problem{{where,
			`selector carve_agent_reconciles_total{result!="errors"}: matcher result!="errors" matches none of the values carve-agent exports for carve_agent_reconciles_total's result: [success adopted pending draining applying failed reboot-required held driver-upgrade error]`}}},
		{"regexp matching nothing", `carve_device_plugin_xid_events_total{critical=~"yes|no"}`, []Problem{{where,
			`selector carve_device_plugin_xid_events_total{critical=~"yes|no"}: matcher critical=~"yes|no" matches none of the values carve-agent exports for carve_device_plugin_xid_events_total's critical: [true false]`}}},
	}
	known := exportedLabels(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			groups := loadAlerts(t)
			r := &groups.Groups[0].Rules[0]
			if r.Alert != "CarveNodeFailed" {
				t.Fatalf("first alert %s, want CarveNodeFailed", r.Alert)
			}
			r.Expr = tt.expr
			if diff := cmp.Diff(tt.want, CheckRuleLabels(groups, known, LabelValues())); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}
