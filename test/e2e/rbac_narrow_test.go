package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/chart/v2/loader"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/carve-dev/carve/test/chartrender"
	"github.com/carve-dev/carve/test/harness"
)

// TestChartNarrowedRBACOnAPIServer: the chart with rbac.evictionNamespaces
// naming one namespace and pauseOperands none, its roles and bindings
// created on the API server. Its ServiceAccount may evict pods in that
// namespace and nowhere else, and may not list pods at all, as
// docs/agent.md and docs/helm.md say; the rest of what the agent needs
// stays allowed.
func TestChartNarrowedRBACOnAPIServer(t *testing.T) {
	c := suite.Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := c.Clientset()
	dc := newDeployClient(ctx, t, c)
	const release, ns, team = "carve-narrow", "carve-narrow-e2e", "carve-narrow-team"
	ch, err := loader.Load(helmChart)
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]any{"rbac": map[string]any{"evictionNamespaces": []any{team}}, "pauseOperands": "none"}
	objs, err := chartrender.Render(ch, vals, chartrender.Release{Name: release, Namespace: ns, KubeVersion: "v1.37.2"})
	if err != nil {
		t.Fatal(err)
	}
	var created []*unstructured.Unstructured
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, o := range slices.Backward(created) {
			if err := dc.resource(o).Delete(ctx, o.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("clean up %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
		for _, n := range []string{ns, team} {
			if err := cs.CoreV1().Namespaces().Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("clean up namespace %s: %v", n, err)
			}
		}
	})
	for _, n := range []string{ns, team} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range objs {
		switch o.GetKind() {
		case "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding":
			if err := dc.create(o, false); err != nil {
				t.Fatalf("create %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
			}
			created = append(created, o)
		}
	}
	user, groups := serviceAccountUser(ns, release+"-agent")
	evictInTeam := access{"create", "", "pods", "eviction", team, "some-pod"}
	if err := harness.Poll(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		return allowed(ctx, t, cs, user, groups, evictInTeam), nil
	}); err != nil {
		t.Fatalf("%s may not %+v: %v", user, evictInTeam, err)
	}
	for _, a := range []access{
		{"patch", "", "nodes", "", "", "some-node"},
		{"create", "", "events", "", "default", ""},
		{"get", "", "configmaps", "", ns, release + "-profiles"},
	} {
		if !allowed(ctx, t, cs, user, groups, a) {
			t.Errorf("%s may not %+v; the agent needs it", user, a)
		}
	}
	for _, a := range []access{
		{"create", "", "pods", "eviction", "default", "some-pod"},
		{"create", "", "pods", "eviction", "kube-system", "some-pod"},
		{"create", "", "pods", "eviction", ns, "some-pod"},
		{"list", "", "pods", "", "", ""},
		{"list", "", "pods", "", team, ""},
		{"get", "", "pods", "", team, "some-pod"},
	} {
		if allowed(ctx, t, cs, user, groups, a) {
			t.Errorf("%s may %+v; rbac.evictionNamespaces [%s] and pauseOperands none must not allow it", user, a, team)
		}
	}
}
