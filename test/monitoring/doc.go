// Package monitoring checks carve's Grafana dashboard and Prometheus alerts
// (charts/carve/files/dashboard.json and alerts.yaml) without a cluster:
// every PromQL expression in them parses, and every metric it names is one
// carve-agent exports (resolved against the collectors agent.New registers
// on agent.NewRegistry, as carve-agent does) or one of a short allow-list
// (up); the dashboard's panels use its datasource variable and have unique
// ids; every rule's selectors match only labels the metric carries (or
// target labels), with values the agent exports where the code defines
// them as a closed set; the rule file loads as Prometheus loads it, every
// alert carries for, severity, summary, description and a runbook anchor
// in docs/monitoring.md, and each alert fires on a series set describing
// its problem and stays silent on a healthy one.
package monitoring
