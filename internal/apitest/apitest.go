// Package apitest makes client-go's fake clientset enforce what the real
// API server enforces and the fake does not: every stored object carries a
// resourceVersion, every write (a patch too) gives it a new one, an update that names an older one is refused with a
// Conflict, a delete whose preconditions (UID, resourceVersion) no longer
// hold is refused with a Conflict, and a list with a field selector is
// filtered by it (the fields the real server supports for the resource:
// metadata.name, metadata.namespace, spec.nodeName for pods, and
// spec.nodeName, spec.driver and spec.pool.name for ResourceSlices). Tests of
// code whose correctness rests on optimistic concurrency (the rollout's
// Leases) use it, so that dropping a precondition fails them.
//
// It also records the writes that named no resourceVersion
// (Unconditional), which the real server accepts for most resources, so
// that a test can assert that code never writes unconditionally.
package apitest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"sync"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// Strict wraps a fake clientset's object tracker with the checks of the
// real API server; see the package doc.
type Strict struct {
	cs *fake.Clientset

	mu            sync.Mutex
	rv            int64
	unconditional []string
}

// NewStrict returns a fake clientset holding objects (each given a
// resourceVersion) that enforces resourceVersions, delete preconditions
// and field selectors, and the Strict that watches it.
func NewStrict(objects ...runtime.Object) (*fake.Clientset, *Strict) {
	s := &Strict{}
	for _, o := range objects {
		if m, err := meta.Accessor(o); err == nil {
			m.SetResourceVersion(s.next())
		}
	}
	s.cs = fake.NewClientset(objects...)
	s.cs.PrependReactor("create", "*", s.create)
	s.cs.PrependReactor("update", "*", s.update)
	s.cs.PrependReactor("delete", "*", s.delete)
	s.cs.PrependReactor("patch", "*", s.patch)
	s.cs.PrependReactor("list", "*", s.list)
	return s.cs, s
}

// Unconditional lists the updates that named no resourceVersion, as
// "resource namespace/name".
func (s *Strict) Unconditional() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.unconditional...)
}

func (s *Strict) next() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv++
	return strconv.FormatInt(s.rv, 10)
}

// written is a copy of the object a create or update writes and its
// metadata; ok is false for an action of another kind or on a
// subresource, which the plain fake handles.
func written(action k8stesting.Action) (obj runtime.Object, m metav1.Object, ok bool, err error) {
	a, isWrite := action.(interface{ GetObject() runtime.Object })
	if !isWrite || action.GetSubresource() != "" {
		return nil, nil, false, nil
	}
	obj = a.GetObject().DeepCopyObject()
	if m, err = meta.Accessor(obj); err != nil {
		return nil, nil, true, fmt.Errorf("apitest: %s without object metadata: %w", action.GetVerb(), err)
	}
	return obj, m, true, nil
}

func (s *Strict) create(action k8stesting.Action) (bool, runtime.Object, error) {
	obj, m, ok, err := written(action)
	if !ok || err != nil {
		return ok, nil, err
	}
	if m.GetResourceVersion() != "" {
		return true, nil, apierrors.NewBadRequest("resourceVersion should not be set on objects to be created")
	}
	m.SetResourceVersion(s.next())
	if err := s.cs.Tracker().Create(action.GetResource(), obj, action.GetNamespace()); err != nil {
		return true, nil, err
	}
	return true, obj, nil
}

func (s *Strict) update(action k8stesting.Action) (bool, runtime.Object, error) {
	obj, m, ok, err := written(action)
	if !ok || err != nil {
		return ok, nil, err
	}
	gvr, ns := action.GetResource(), action.GetNamespace()
	cm, err := s.stored(gvr, ns, m.GetName())
	if err != nil {
		return true, nil, err
	}
	switch rv := m.GetResourceVersion(); {
	case rv == "":
		s.mu.Lock()
		s.unconditional = append(s.unconditional, fmt.Sprintf("%s %s/%s", gvr.Resource, ns, m.GetName()))
		s.mu.Unlock()
	case rv != cm.GetResourceVersion():
		return true, nil, apierrors.NewConflict(gvr.GroupResource(), m.GetName(),
			fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again (resourceVersion %s, stored %s)", rv, cm.GetResourceVersion()))
	}
	m.SetUID(cm.GetUID())
	m.SetResourceVersion(s.next())
	if err := s.cs.Tracker().Update(gvr, obj, ns); err != nil {
		return true, nil, err
	}
	return true, obj, nil
}

func (s *Strict) delete(action k8stesting.Action) (bool, runtime.Object, error) {
	a, ok := action.(k8stesting.DeleteAction)
	if !ok || a.GetSubresource() != "" {
		return false, nil, nil
	}
	gvr, ns := a.GetResource(), a.GetNamespace()
	cm, err := s.stored(gvr, ns, a.GetName())
	if err != nil {
		return true, nil, err
	}
	if p := a.GetDeleteOptions().Preconditions; p != nil {
		if p.UID != nil && *p.UID != cm.GetUID() {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), a.GetName(),
				fmt.Errorf("precondition failed: UID in precondition: %s, UID in object meta: %s", *p.UID, cm.GetUID()))
		}
		if p.ResourceVersion != nil && *p.ResourceVersion != cm.GetResourceVersion() {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), a.GetName(),
				fmt.Errorf("precondition failed: ResourceVersion in precondition: %s, ResourceVersion in object meta: %s", *p.ResourceVersion, cm.GetResourceVersion()))
		}
	}
	return true, nil, s.cs.Tracker().Delete(gvr, ns, a.GetName())
}

// patch applies a JSON, merge or strategic merge patch to the stored
// object and gives it a new resourceVersion, as every write on the real
// server does (the plain fake keeps the old one); one watch event follows.
// A patch that names a resourceVersion must name the stored one.
func (s *Strict) patch(action k8stesting.Action) (bool, runtime.Object, error) {
	a, ok := action.(k8stesting.PatchAction)
	if !ok || a.GetSubresource() != "" || a.GetPatchType() == types.ApplyPatchType {
		return false, nil, nil
	}
	gvr, ns := a.GetResource(), a.GetNamespace()
	cur, err := s.cs.Tracker().Get(gvr, ns, a.GetName())
	if err != nil {
		return true, nil, err
	}
	obj, err := patched(cur, a.GetPatchType(), a.GetPatch())
	if err != nil {
		return true, nil, apierrors.NewBadRequest(fmt.Sprintf("apitest: patch %s %s: %v", gvr.Resource, a.GetName(), err))
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return true, nil, fmt.Errorf("apitest: patch without object metadata: %w", err)
	}
	stored, _ := meta.Accessor(cur)
	if rv := m.GetResourceVersion(); rv != stored.GetResourceVersion() {
		return true, nil, apierrors.NewConflict(gvr.GroupResource(), a.GetName(),
			fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again (resourceVersion %s, stored %s)", rv, stored.GetResourceVersion()))
	}
	m.SetResourceVersion(s.next())
	if err := s.cs.Tracker().Update(gvr, obj, ns); err != nil {
		return true, nil, err
	}
	return true, obj.DeepCopyObject(), nil
}

// patched is cur with the patch applied, a new object of cur's type.
func patched(cur runtime.Object, pt types.PatchType, patch []byte) (runtime.Object, error) {
	old, err := json.Marshal(cur)
	if err != nil {
		return nil, err
	}
	var modified []byte
	switch pt {
	case types.JSONPatchType:
		p, err := jsonpatch.DecodePatch(patch)
		if err != nil {
			return nil, err
		}
		modified, err = p.Apply(old)
		if err != nil {
			return nil, err
		}
	case types.MergePatchType:
		if modified, err = jsonpatch.MergePatch(old, patch); err != nil {
			return nil, err
		}
	case types.StrategicMergePatchType:
		if modified, err = strategicpatch.StrategicMergePatch(old, patch, cur); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("patch type %s is not supported", pt)
	}
	obj := reflect.New(reflect.TypeOf(cur).Elem()).Interface().(runtime.Object)
	if err := json.Unmarshal(modified, obj); err != nil {
		return nil, err
	}
	return obj, nil
}

// stored is the metadata of the object stored under name.
func (s *Strict) stored(gvr schema.GroupVersionResource, ns, name string) (metav1.Object, error) {
	cur, err := s.cs.Tracker().Get(gvr, ns, name)
	if err != nil {
		return nil, err
	}
	return meta.Accessor(cur)
}

// list filters a list by its field selector, as the real server does for
// the fields it supports; a selector on any other field is refused, as
// the real server refuses it.
func (s *Strict) list(action k8stesting.Action) (bool, runtime.Object, error) {
	a, ok := action.(k8stesting.ListActionImpl)
	if !ok || a.ListRestrictions.Fields == nil || a.ListRestrictions.Fields.Empty() {
		return false, nil, nil
	}
	sel := a.ListRestrictions.Fields
	obj, err := s.cs.Tracker().List(a.GetResource(), a.GetKind(), a.GetNamespace())
	if err != nil {
		return true, nil, err
	}
	items, err := meta.ExtractList(obj)
	if err != nil {
		return true, nil, err
	}
	var kept []runtime.Object
	for _, item := range items {
		set, err := fieldSet(item)
		if err != nil {
			return true, nil, err
		}
		for _, r := range sel.Requirements() {
			if _, ok := set[r.Field]; !ok {
				return true, nil, apierrors.NewBadRequest(fmt.Sprintf("field label not supported: %s", r.Field))
			}
		}
		if sel.Matches(set) && matchesLabels(item, a.ListRestrictions.Labels) {
			kept = append(kept, item)
		}
	}
	if err := meta.SetList(obj, kept); err != nil {
		return true, nil, err
	}
	return true, obj, nil
}

// fieldSet is the fields the real server lets a selector name.
func fieldSet(obj runtime.Object) (fields.Set, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	set := fields.Set{"metadata.name": m.GetName(), "metadata.namespace": m.GetNamespace()}
	switch o := obj.(type) {
	case *corev1.Pod:
		set["spec.nodeName"] = o.Spec.NodeName
	case *resourceapi.ResourceSlice:
		set[resourceapi.ResourceSliceSelectorDriver] = o.Spec.Driver
		set[resourceapi.ResourceSliceSelectorPoolName] = o.Spec.Pool.Name
		set[resourceapi.ResourceSliceSelectorNodeName] = ""
		if o.Spec.NodeName != nil {
			set[resourceapi.ResourceSliceSelectorNodeName] = *o.Spec.NodeName
		}
	}
	return set, nil
}

// matchesLabels reports whether obj's labels match sel (nil matches all).
func matchesLabels(obj runtime.Object, sel labels.Selector) bool {
	m, err := meta.Accessor(obj)
	return err == nil && (sel == nil || sel.Matches(labels.Set(m.GetLabels())))
}
