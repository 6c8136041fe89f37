// Package chart tests the Helm chart in charts/carve without a cluster: it
// lints the chart, renders it as `helm template` does and compares the
// objects with golden files, with configs/deploy and with the typed
// Kubernetes API, checks values.schema.json against bad values, and checks
// the default profile file. `go test ./chart/ -update` rewrites the golden
// files in testdata/golden.
package chart

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/carve-dev/carve/test/chartrender"
)

const (
	// chartDir is the chart under test.
	chartDir = "../../charts/carve"
	// releaseName and namespace are the release the tests render, the one
	// docs/helm.md installs: its object names are configs/deploy's.
	releaseName = "carve"
	namespace   = "carve-system"
	// kubeVersion is the Kubernetes the tests render for (test/cluster's).
	kubeVersion = "v1.37.2"
)

// monitoringAPIs are the Prometheus Operator API versions and kinds the
// rendering cluster is told it has, as `helm template --api-versions`.
func monitoringAPIs() []string {
	return []string{
		"monitoring.coreos.com/v1",
		"monitoring.coreos.com/v1/ServiceMonitor",
		"monitoring.coreos.com/v1/PodMonitor",
		"monitoring.coreos.com/v1/PrometheusRule",
	}
}

// TestMain registers -update, which makes the golden tests rewrite
// testdata/golden instead of comparing with it.
func TestMain(m *testing.M) {
	flag.Bool("update", false, "rewrite testdata/golden from the chart instead of comparing with it")
	flag.Parse()
	os.Exit(m.Run())
}

// updating reports whether -update was given.
func updating() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

// loadChart loads charts/carve from its directory.
func loadChart(t *testing.T) *chartv2.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load %s: %v", chartDir, err)
	}
	return ch
}

// readValues reads a values file of testdata (name without .values.yaml).
func readValues(t *testing.T, name string) map[string]any {
	t.Helper()
	v, err := common.ReadValuesFile(filepath.Join("testdata", name+".values.yaml"))
	if err != nil {
		t.Fatalf("values %s: %v", name, err)
	}
	return v.AsMap()
}

// render renders the chart with vals as `helm template carve charts/carve
// --namespace carve-system --kube-version 1.37.2 --api-versions ...` does,
// schema validation included, and returns the objects in Helm's order.
func render(ch *chartv2.Chart, vals map[string]any) ([]*unstructured.Unstructured, error) {
	return chartrender.Render(ch, vals, chartrender.Release{Name: releaseName, Namespace: namespace, KubeVersion: kubeVersion, APIVersions: monitoringAPIs()})
}

// mustRender is render that fails the test on an error.
func mustRender(t *testing.T, ch *chartv2.Chart, vals map[string]any) []*unstructured.Unstructured {
	t.Helper()
	objs, err := render(ch, vals)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// objectKey names an object uniquely among those of a render.
func objectKey(o *unstructured.Unstructured) string {
	if ns := o.GetNamespace(); ns != "" {
		return fmt.Sprintf("%s %s/%s", o.GetKind(), ns, o.GetName())
	}
	return fmt.Sprintf("%s %s", o.GetKind(), o.GetName())
}
