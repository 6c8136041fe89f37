package chart

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
)

// monitoringSpec says what a Prometheus Operator object's spec must have
// and may have; the chart uses only these fields of the CRDs.
type monitoringSpec struct {
	required []string
	allowed  []string
	// endpoints names the list whose every item must name a port.
	endpoints string
}

// monitoringKinds are the monitoring.coreos.com/v1 kinds the chart renders.
func monitoringKinds() map[string]monitoringSpec {
	return map[string]monitoringSpec{
		"ServiceMonitor": {required: []string{"selector", "endpoints"}, allowed: []string{"namespaceSelector"}, endpoints: "endpoints"},
		"PodMonitor":     {required: []string{"selector", "podMetricsEndpoints"}, allowed: []string{"namespaceSelector"}, endpoints: "podMetricsEndpoints"},
		"PrometheusRule": {required: []string{"groups"}},
	}
}

// checkTyped decodes an object strictly into its typed API struct (an
// unknown or misplaced field is an error), or, for a Prometheus Operator
// object, checks its apiVersion and the fields of its spec.
func checkTyped(o *unstructured.Unstructured) error {
	gvk := o.GroupVersionKind()
	if gvk.Group == "monitoring.coreos.com" {
		return checkMonitoring(o)
	}
	typed, err := scheme.Scheme.New(gvk)
	if err != nil {
		return fmt.Errorf("%s: no typed API: %w", objectKey(o), err)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, typed, true); err != nil {
		return fmt.Errorf("%s: %w", objectKey(o), err)
	}
	return nil
}

// checkMonitoring checks a monitoring.coreos.com object: version v1, a
// known kind, a name, and a spec with the required fields and no others
// than the allowed ones.
func checkMonitoring(o *unstructured.Unstructured) error {
	gvk := o.GroupVersionKind()
	want, ok := monitoringKinds()[gvk.Kind]
	if gvk.Version != "v1" || !ok {
		return fmt.Errorf("%s: unexpected %s", objectKey(o), gvk)
	}
	if o.GetName() == "" || o.GetNamespace() == "" {
		return fmt.Errorf("%s: no name or namespace", objectKey(o))
	}
	spec, found, err := unstructured.NestedMap(o.Object, "spec")
	if err != nil {
		return fmt.Errorf("%s: spec: %w", objectKey(o), err)
	}
	if !found {
		return fmt.Errorf("%s: no spec", objectKey(o))
	}
	for _, f := range want.required {
		if _, ok := spec[f]; !ok {
			return fmt.Errorf("%s: spec.%s missing", objectKey(o), f)
		}
	}
	for f := range spec {
		if !slices.Contains(want.required, f) && !slices.Contains(want.allowed, f) {
			return fmt.Errorf("%s: unexpected field spec.%s", objectKey(o), f)
		}
	}
	if want.endpoints != "" {
		if err := checkEndpoints(spec, want.endpoints); err != nil {
			return fmt.Errorf("%s: %w", objectKey(o), err)
		}
	}
	for top := range o.Object {
		if !slices.Contains([]string{"apiVersion", "kind", "metadata", "spec"}, top) {
			return fmt.Errorf("%s: unexpected field %s", objectKey(o), top)
		}
	}
	return nil
}

// checkEndpoints checks that spec.<field> is a non-empty list of endpoints
// that each name a port.
func checkEndpoints(spec map[string]any, field string) error {
	eps, ok := spec[field].([]any)
	if !ok || len(eps) == 0 {
		return fmt.Errorf("spec.%s: want a non-empty list, got %v", field, spec[field])
	}
	for i, ep := range eps {
		m, ok := ep.(map[string]any)
		if !ok {
			return fmt.Errorf("spec.%s[%d]: not an object", field, i)
		}
		if port, _ := m["port"].(string); port == "" {
			return fmt.Errorf("spec.%s[%d]: no port name", field, i)
		}
	}
	return nil
}
