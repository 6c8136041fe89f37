package harness

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// DecodeObjects splits a multi-document YAML (or JSON) stream, as kubectl
// kustomize, helm template or a release manifest write it, into objects,
// leaving out empty documents.
func DecodeObjects(data []byte) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		o := &unstructured.Unstructured{}
		err := dec.Decode(&o.Object)
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("decode object %d: %w", len(objs)+1, err)
		}
		if len(o.Object) > 0 {
			objs = append(objs, o)
		}
	}
}

// DecodeFiles decodes the objects of every file the glob pattern matches,
// in the order of the file names; a pattern that matches nothing is an
// error, and so is a file that cannot be read or decoded, named.
func DecodeFiles(pattern string) ([]*unstructured.Unstructured, error) {
	files, err := filepath.Glob(pattern)
	if err != nil {
		return nil, fmt.Errorf("files %s: %w", pattern, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no file matches %s", pattern)
	}
	var out []*unstructured.Unstructured
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		objs, err := DecodeObjects(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		out = append(out, objs...)
	}
	return out, nil
}

// FindObject returns the object of this kind and name among objs, or nil.
func FindObject(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// Objects reaches objects of any kind through the dynamic client, finding
// each kind's resource and scope by discovery (cached).
type Objects struct {
	dyn    dynamic.Interface
	mapper meta.RESTMapper
}

// NewObjects returns Objects for the API server of cfg; cs is a clientset
// of the same server, whose discovery it uses.
func NewObjects(cfg *rest.Config, cs kubernetes.Interface) (*Objects, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	return &Objects{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cs.Discovery()))}, nil
}

// For returns the client of o's resource, in o's namespace when the
// resource is namespaced.
func (c *Objects) For(o *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := o.GroupVersionKind()
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", gvk, o.GetName(), err)
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return c.dyn.Resource(m.Resource).Namespace(o.GetNamespace()), nil
	}
	return c.dyn.Resource(m.Resource), nil
}

// Namespaced reports whether o's resource is namespaced.
func (c *Objects) Namespaced(o *unstructured.Unstructured) (bool, error) {
	gvk := o.GroupVersionKind()
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return false, fmt.Errorf("%s %s: %w", gvk, o.GetName(), err)
	}
	return m.Scope.Name() == meta.RESTScopeNameNamespace, nil
}
