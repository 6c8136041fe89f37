package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	"github.com/carve-dev/carve/test/harness"
)

// docObject is a Kubernetes object of a YAML snippet of the documentation.
type docObject struct {
	where string
	obj   *unstructured.Unstructured
}

// docObjects returns the Kubernetes objects of the YAML snippets of
// README.md, docs/*.md and docs/internals/*.md (kustomizations aside: kubectl reads them, not
// the API server).
func docObjects(t *testing.T) []docObject {
	t.Helper()
	pages, err := harness.DocPages("../..")
	if err != nil {
		t.Fatal(err)
	}
	var out []docObject
	for _, p := range pages {
		for _, s := range harness.Snippets(p.Text) {
			if s.Lang != "yaml" || !strings.Contains(s.Text, "apiVersion:") || !strings.Contains(s.Text, "\nkind:") && !strings.HasPrefix(s.Text, "kind:") {
				continue
			}
			where := fmt.Sprintf("%s:%d", p.Path, s.Line)
			objs, err := harness.DecodeObjects([]byte(s.Text))
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			for _, o := range objs {
				if o.GetKind() != "Kustomization" {
					out = append(out, docObject{where: where, obj: o})
				}
			}
		}
	}
	return out
}

// TestDocObjectsOnAPIServer: every Kubernetes object the documentation
// shows (ConfigMaps, DeviceClasses, ResourceClaims, pods, ...) is accepted
// by the real API server as written: a server-side dry run with strict
// field validation, so a misspelt or unknown field fails too. A namespace
// an object names that does not exist is created for the run.
func TestDocObjectsOnAPIServer(t *testing.T) {
	c := suite.Cluster(t)
	ctx := testCtx(t, 2*time.Minute)
	dc := newDeployClient(ctx, t, c)
	objs := docObjects(t)
	if len(objs) == 0 {
		t.Fatal("no Kubernetes object found in the docs: the extraction is broken")
	}
	t.Logf("%d objects from the docs", len(objs))
	var made []string
	t.Cleanup(func() { deleteNamespaces(t, c.Clientset(), made) })
	for _, d := range objs {
		namespaced, err := dc.objects.Namespaced(d.obj)
		if err != nil {
			t.Errorf("%s: %v", d.where, err)
			continue
		}
		if namespaced {
			if d.obj.GetNamespace() == "" {
				d.obj.SetNamespace(metav1.NamespaceDefault)
			}
			if ns := d.obj.GetNamespace(); ensureNamespace(ctx, t, c.Clientset(), ns) && !slices.Contains(made, ns) {
				made = append(made, ns)
			}
		}
		if err := dc.create(d.obj, true); err != nil {
			t.Errorf("%s: the API server refuses %s %s: %v", d.where, d.obj.GetKind(), d.obj.GetName(), err)
		}
	}
}

// ensureNamespace creates namespace ns unless it exists, and reports
// whether it did.
func ensureNamespace(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string) bool {
	t.Helper()
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return false
	}
	if err != nil {
		t.Fatalf("create namespace %s: %v", ns, err)
	}
	return true
}

// deleteNamespaces deletes the namespaces and waits until they are gone.
func deleteNamespaces(t *testing.T, cs kubernetes.Interface, names []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, ns := range names {
		if err := cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("clean up namespace %s: %v", ns, err)
		}
	}
	for _, ns := range names {
		if err := harness.WaitNamespaceGone(ctx, cs, ns, time.Minute); err != nil {
			t.Errorf("namespace %s still there after clean up: %v", ns, err)
		}
	}
}
