package chart

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	sigsyaml "sigs.k8s.io/yaml"
)

const (
	// dashboardFile and alertsFile are the chart files the dashboard
	// ConfigMap and the PrometheusRule carry; their content is not part of
	// the golden files, which show these markers instead.
	dashboardFile = "files/dashboard.json"
	alertsFile    = "files/alerts.yaml"
	// dashboardKey is the dashboard ConfigMap's data key.
	dashboardKey = "carve.json"
)

// goldenCases are the values files of testdata rendered into
// testdata/golden/<name>.yaml, and what each stands for.
func goldenCases() []struct{ name, what string } {
	return []struct{ name, what string }{
		{"default", "no values: the chart's defaults"},
		{"existing-configmap", "profiles from a ConfigMap the chart does not create, in another namespace"},
		{"gpu-operator", "the settings of configs/deploy/gpu-operator, as docs/helm.md gives them"},
		{"monitoring", "ServiceMonitor, PrometheusRule and the Grafana dashboard ConfigMap"},
		{"podmonitor", "a PodMonitor instead of the Service and ServiceMonitor, and the alerts' runbooks in a copy of the docs"},
		{"local-cluster", "the values test/e2e installs with on the local cluster"},
		{"dra", "advertise: dra with another kubelet root and CDI directory, and extended-resource DeviceClasses"},
		{"xid-policy", "the XID policy set: nothing ignored, two XIDs recoverable after 10 minutes, a taint effect per class"},
		{"narrow-rbac", "evictions only in two namespaces, and no operands paused: no pods list"},
	}
}

// TestGoldenRenders renders the chart for each values file of the golden
// set and compares the objects with testdata/golden (-update rewrites it).
// Every object must also decode strictly into its typed Kubernetes API
// struct (or pass the Prometheus Operator checks), and the dashboard and
// rules must be the chart's files exactly.
func TestGoldenRenders(t *testing.T) {
	ch := loadChart(t)
	for _, tc := range goldenCases() {
		t.Run(tc.name, func(t *testing.T) {
			objs := mustRender(t, ch, readValues(t, tc.name))
			for _, o := range objs {
				if err := checkTyped(o); err != nil {
					t.Error(err)
				}
			}
			if err := replaceEmbedded(objs); err != nil {
				t.Fatal(err)
			}
			got, err := goldenText(tc.what, objs)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "golden", tc.name+".yaml")
			if updating() {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./chart/ -update to write it)", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("render of %s differs from %s (-want +got; go test ./chart/ -update rewrites it):\n%s", tc.name, path, diff)
			}
		})
	}
}

// goldenText writes objects as YAML documents with sorted keys, after a
// comment saying what they are.
func goldenText(what string, objs []*unstructured.Unstructured) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Rendered by test/chart (go test ./chart/ -update): %s.\n", what)
	for _, o := range objs {
		y, err := sigsyaml.Marshal(o.Object)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", objectKey(o), err)
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return b.Bytes(), nil
}

// replaceEmbedded checks that the dashboard ConfigMap holds files/
// dashboard.json and that the PrometheusRule's spec is files/alerts.yaml,
// then replaces both with markers, so that the golden files do not change
// with the dashboard and the alerts.
func replaceEmbedded(objs []*unstructured.Unstructured) error {
	for _, o := range objs {
		switch {
		case o.GetKind() == "ConfigMap" && hasData(o, dashboardKey):
			want, err := os.ReadFile(filepath.Join(chartDir, dashboardFile))
			if err != nil {
				return fmt.Errorf("read dashboard: %w", err)
			}
			got, _, _ := unstructured.NestedString(o.Object, "data", dashboardKey)
			if got != string(want) {
				return fmt.Errorf("%s: data[%s] is not %s", objectKey(o), dashboardKey, dashboardFile)
			}
			o.Object["data"] = map[string]any{dashboardKey: "<" + dashboardFile + ">"}
		case o.GetKind() == "PrometheusRule":
			base, err := sameAsAlerts(o.Object["spec"])
			if err != nil {
				return fmt.Errorf("%s: %w", objectKey(o), err)
			}
			o.Object["spec"] = "<" + alertsFile + ", runbooks at " + base + ">"
		}
	}
	return nil
}

// hasData reports whether a ConfigMap has the data key.
func hasData(o *unstructured.Unstructured, key string) bool {
	_, found, _ := unstructured.NestedString(o.Object, "data", key)
	return found
}

// alertsRunbookBase is where files/alerts.yaml's runbook_urls point; the
// chart points them elsewhere (prometheusRule.runbookBaseURL, or the docs of
// its appVersion).
const alertsRunbookBase = "https://github.com/carve-dev/carve/blob/main/docs/"

// sameAsAlerts checks that spec is the content of files/alerts.yaml with
// every runbook_url moved from alertsRunbookBase to one other base, and
// returns that base.
func sameAsAlerts(spec any) (string, error) {
	raw, err := os.ReadFile(filepath.Join(chartDir, alertsFile))
	if err != nil {
		return "", fmt.Errorf("read alerts: %w", err)
	}
	var want any
	if err := sigsyaml.Unmarshal(raw, &want); err != nil {
		return "", fmt.Errorf("%s: %w", alertsFile, err)
	}
	got, err := viaJSON(spec)
	if err != nil {
		return "", err
	}
	var first string
	eachRunbook(got, func(u string) string {
		if first == "" {
			first = u
		}
		return u
	})
	base, _, ok := strings.Cut(first, "monitoring.md#")
	if !ok {
		return "", fmt.Errorf("runbook_url %q is not into monitoring.md", first)
	}
	eachRunbook(want, func(u string) string { return base + strings.TrimPrefix(u, alertsRunbookBase) })
	if diff := cmp.Diff(want, got); diff != "" {
		return "", fmt.Errorf("spec is not %s with its runbooks at %s (-file +spec):\n%s", alertsFile, base, diff)
	}
	return base, nil
}

// eachRunbook replaces the runbook_url of every rule of a rule file decoded
// from JSON with what f returns for it.
func eachRunbook(rules any, f func(string) string) {
	top, _ := rules.(map[string]any)
	groups, _ := top["groups"].([]any)
	for _, g := range groups {
		group, _ := g.(map[string]any)
		rs, _ := group["rules"].([]any)
		for _, r := range rs {
			rule, _ := r.(map[string]any)
			ann, _ := rule["annotations"].(map[string]any)
			if u, ok := ann["runbook_url"].(string); ok {
				ann["runbook_url"] = f(u)
			}
		}
	}
}

// viaJSON returns v after a JSON round trip, as sigs.k8s.io/yaml decodes
// (numbers become float64).
func viaJSON(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	return out, nil
}
