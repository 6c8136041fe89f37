package chart

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/carve-dev/carve/test/harness"
)

// labelNormalisation is a label removed from both sides before the chart
// and configs/deploy are compared, at some label paths, and why.
type labelNormalisation struct {
	key    string
	paths  [][]string
	reason string
}

// labelNormalisations are all the normalisations made; nothing else is.
func labelNormalisations() []labelNormalisation {
	metadata := [][]string{{"metadata", "labels"}}
	everywhere := [][]string{
		{"metadata", "labels"},
		{"spec", "selector", "matchLabels"},
		{"spec", "template", "metadata", "labels"},
		{"spec", "selector"}, // a Service's selector
	}
	return []labelNormalisation{
		{"helm.sh/chart", metadata, "Helm's label: the chart's name and version"},
		{"app.kubernetes.io/managed-by", metadata, "Helm's label: Helm"},
		{"app.kubernetes.io/version", metadata, "Helm's label: the agent's version (image tag); kustomize has no such notion"},
		{"app.kubernetes.io/instance", everywhere, "Helm's label: the release; in the DaemonSet's selector, its pod labels " +
			"and the Service's selector too, so that the pods of two releases stay apart"},
		{"app.kubernetes.io/name", metadata, "the chart puts the standard labels on every object, configs/deploy " +
			"puts app.kubernetes.io/name only on the DaemonSet and the Service; selectors and pod labels are still compared"},
	}
}

// onlyInKustomize are the objects configs/deploy renders and the chart does
// not, with the reason; every other object must be in both and equal.
func onlyInKustomize() map[string]string {
	return map[string]string{
		"Namespace carve-system": "Helm installs into the namespace given by --namespace (--create-namespace creates it); " +
			"docs/helm.md has the pod-security label configs/deploy puts on it",
	}
}

// TestSameAsKustomize renders configs/deploy, configs/deploy/gpu-operator and
// configs/deploy/dra with kustomize, each with configs/deploy/profiles (the
// sample profiles an install creates once), and the chart with values stating the same settings, and
// requires every object to be equal after removing the labels of
// labelNormalisations; the only objects allowed in one of them only are
// onlyInKustomize's. A change to either side that makes them differ fails.
func TestSameAsKustomize(t *testing.T) {
	ch := loadChart(t)
	for _, tc := range []struct{ dir, values string }{
		{"../../configs/deploy", "kustomize-base"},
		{"../../configs/deploy/gpu-operator", "kustomize-gpu-operator"},
		{"../../configs/deploy/dra", "kustomize-dra"},
	} {
		t.Run(tc.values, func(t *testing.T) {
			want, err := renderKustomize(tc.dir)
			if err != nil {
				t.Fatal(err)
			}
			// An install with kustomize creates the sample profiles
			// apart, once; the chart's install renders them.
			profiles, err := renderKustomize("../../configs/deploy/profiles")
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, profiles...)
			got := mustRender(t, ch, readValues(t, tc.values))
			wantByKey, gotByKey := byKey(t, want), byKey(t, got)
			for _, o := range slices.Concat(want, got) {
				normaliseLabels(o)
			}
			for key, o := range gotByKey {
				w, ok := wantByKey[key]
				if !ok {
					t.Errorf("the chart renders %s, configs/deploy does not", key)
					continue
				}
				if diff := cmp.Diff(w.Object, o.Object); diff != "" {
					t.Errorf("%s differs (-kustomize +chart):\n%s", key, diff)
				}
			}
			allowed := onlyInKustomize()
			for key := range wantByKey {
				if _, ok := gotByKey[key]; !ok && allowed[key] == "" {
					t.Errorf("configs/deploy renders %s, the chart does not", key)
				}
			}
			for key := range allowed {
				if _, ok := wantByKey[key]; !ok {
					t.Errorf("onlyInKustomize lists %s, which configs/deploy no longer renders", key)
				}
			}
		})
	}
}

// renderKustomize renders a kustomization directory as `kubectl apply -k`
// would (test/e2e's renderKustomize, without kubectl).
func renderKustomize(dir string) ([]*unstructured.Unstructured, error) {
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	// Through YAML, as the chart's objects, so that numbers decode alike.
	y, err := m.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	objs, err := harness.DecodeObjects(y)
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	return objs, nil
}

// byKey indexes objects by objectKey; a key twice fails the test.
func byKey(t *testing.T, objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	t.Helper()
	m := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		k := objectKey(o)
		if _, dup := m[k]; dup {
			t.Fatalf("%s twice", k)
		}
		m[k] = o
	}
	return m
}

// normaliseLabels removes, in place, the labels of labelNormalisations
// from o's label maps.
func normaliseLabels(o *unstructured.Unstructured) {
	for _, n := range labelNormalisations() {
		for _, path := range n.paths {
			labels, found, err := unstructured.NestedMap(o.Object, path...)
			if err != nil || !found {
				continue
			}
			delete(labels, n.key)
			_ = unstructured.SetNestedMap(o.Object, labels, path...)
		}
	}
}
