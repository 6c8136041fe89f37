package apitest

import (
	"context"
	"fmt"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestStrictEnforcesResourceVersion: an update naming an old
// resourceVersion and a delete whose preconditions fail are Conflicts; the
// current ones go through; an update without one is recorded.
func TestStrictEnforcesResourceVersion(t *testing.T) {
	ctx := context.Background()
	cs, s := NewStrict()
	leases := cs.CoordinationV1().Leases("ns")
	first, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l", UID: "u1"}}, metav1.CreateOptions{})
	if err != nil || first.ResourceVersion == "" {
		t.Fatalf("create: %v, resourceVersion %q", err, first.ResourceVersion)
	}
	second, err := leases.Update(ctx, first.DeepCopy(), metav1.UpdateOptions{})
	if err != nil || second.ResourceVersion == first.ResourceVersion {
		t.Fatalf("update at the current version: %v, resourceVersion %q after %q", err, second.ResourceVersion, first.ResourceVersion)
	}
	if _, err := leases.Update(ctx, first.DeepCopy(), metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("update at an old version: %v, want a Conflict", err)
	}
	old := first.ResourceVersion
	if err := leases.Delete(ctx, "l", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &old}}); !apierrors.IsConflict(err) {
		t.Errorf("delete at an old version: %v, want a Conflict", err)
	}
	uid := first.UID
	if err := leases.Delete(ctx, "l", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &second.ResourceVersion}}); err != nil {
		t.Errorf("delete at the current version: %v", err)
	}
	blind := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "m"}}
	if _, err := leases.Create(ctx, blind, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := leases.Update(ctx, blind, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := s.Unconditional(); len(got) != 1 || got[0] != "leases ns/m" {
		t.Errorf("unconditional writes %v, want [leases ns/m]", got)
	}
}

// TestStrictPatch: a merge patch is applied and gives the object a new
// resourceVersion, returned and stored; a patch that names an old
// resourceVersion is a Conflict.
func TestStrictPatch(t *testing.T) {
	ctx := context.Background()
	cs, _ := NewStrict(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"a": "1"}}})
	nodes := cs.CoreV1().Nodes()
	before, err := nodes.Get(ctx, "n", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	after, err := nodes.Patch(ctx, "n", types.MergePatchType, []byte(`{"metadata":{"labels":{"b":"2"}}}`), metav1.PatchOptions{})
	if err != nil || after.ResourceVersion == before.ResourceVersion || after.Labels["a"] != "1" || after.Labels["b"] != "2" {
		t.Fatalf("patch: %v, resourceVersion %q after %q, labels %v", err, after.GetResourceVersion(), before.ResourceVersion, after.GetLabels())
	}
	stored, err := nodes.Get(ctx, "n", metav1.GetOptions{})
	if err != nil || stored.ResourceVersion != after.ResourceVersion || stored.Labels["b"] != "2" {
		t.Fatalf("stored after the patch: %v, resourceVersion %q, labels %v; want %q", err, stored.GetResourceVersion(), stored.GetLabels(), after.ResourceVersion)
	}
	stale := fmt.Sprintf(`{"metadata":{"resourceVersion":%q,"labels":{"c":"3"}}}`, before.ResourceVersion)
	if _, err := nodes.Patch(ctx, "n", types.MergePatchType, []byte(stale), metav1.PatchOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("patch naming an old resourceVersion: %v, want a Conflict", err)
	}
}

// TestStrictFieldSelector: a list by spec.nodeName keeps that node's pods
// only, and a field the server does not index is refused.
func TestStrictFieldSelector(t *testing.T) {
	pod := func(name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Spec: corev1.PodSpec{NodeName: node}}
	}
	cs, _ := NewStrict(pod("a", "n1"), pod("b", "n2"))
	list, err := cs.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=n1"})
	if err != nil || len(list.Items) != 1 || list.Items[0].Name != "a" {
		t.Errorf("pods on n1: %v, %v; want [a]", list, err)
	}
	if _, err := cs.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{FieldSelector: "spec.hostname=x"}); !apierrors.IsBadRequest(err) {
		t.Errorf("unsupported field: %v, want BadRequest", err)
	}
}

// TestStrictResourceSliceSelector: ResourceSlices are listed by node and
// driver.
func TestStrictResourceSliceSelector(t *testing.T) {
	slice := func(name, node, driver string) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: &node, Pool: resourceapi.ResourcePool{Name: node}}}
	}
	cs, _ := NewStrict(slice("a", "n1", "d1"), slice("b", "n1", "d2"), slice("c", "n2", "d1"))
	list, err := cs.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=n1,spec.driver=d1"})
	if err != nil || len(list.Items) != 1 || list.Items[0].Name != "a" {
		t.Errorf("slices of d1 on n1: %v, %v; want [a]", list, err)
	}
}
