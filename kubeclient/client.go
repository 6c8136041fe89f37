package kubeclient

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/gentype"
	"k8s.io/client-go/rest"
)

// NewScheme returns a scheme with the API types carve-agent reads and
// writes, and the option types of every request (ListOptions and the
// rest). The event recorder needs it to name the objects Events are about.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, policyv1.AddToScheme, coordinationv1.AddToScheme, resourcev1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("kubeclient: scheme: %w", err)
		}
	}
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return s, nil
}

// Client is the Interface over the API server that a rest.Config names.
type Client struct {
	core, policy, coordination, resource rest.Interface
	params                               runtime.ParameterCodec
}

var _ Interface = (*Client)(nil)

// New returns a client for the API server of cfg, speaking JSON to the
// groups carve uses.
func New(cfg *rest.Config) (*Client, error) {
	s, err := NewScheme()
	if err != nil {
		return nil, err
	}
	codecs := serializer.NewCodecFactory(s).WithoutConversion()
	c := &Client{params: runtime.NewParameterCodec(s)}
	for _, g := range []struct {
		into    *rest.Interface
		gv      schema.GroupVersion
		apiPath string
	}{
		{&c.core, corev1.SchemeGroupVersion, "/api"},
		{&c.policy, policyv1.SchemeGroupVersion, "/apis"},
		{&c.coordination, coordinationv1.SchemeGroupVersion, "/apis"},
		{&c.resource, resourcev1.SchemeGroupVersion, "/apis"},
	} {
		gc := rest.CopyConfig(cfg)
		gc.GroupVersion = &g.gv
		gc.APIPath = g.apiPath
		gc.NegotiatedSerializer = codecs
		if gc.UserAgent == "" {
			gc.UserAgent = rest.DefaultKubernetesUserAgent()
		}
		rc, err := rest.RESTClientFor(gc)
		if err != nil {
			return nil, fmt.Errorf("kubeclient: %s client: %w", g.gv, err)
		}
		*g.into = rc
	}
	return c, nil
}

// Nodes implements Interface.
func (c *Client) Nodes() NodeInterface {
	return gentype.NewClientWithList[*corev1.Node, *corev1.NodeList]("nodes", c.core, c.params, "",
		func() *corev1.Node { return &corev1.Node{} }, func() *corev1.NodeList { return &corev1.NodeList{} })
}

// ConfigMaps implements Interface.
func (c *Client) ConfigMaps(namespace string) ConfigMapInterface {
	return gentype.NewClientWithList[*corev1.ConfigMap, *corev1.ConfigMapList]("configmaps", c.core, c.params, namespace,
		func() *corev1.ConfigMap { return &corev1.ConfigMap{} }, func() *corev1.ConfigMapList { return &corev1.ConfigMapList{} })
}

// Pods implements Interface.
func (c *Client) Pods(namespace string) PodInterface {
	return gentype.NewClientWithList[*corev1.Pod, *corev1.PodList]("pods", c.core, c.params, namespace,
		func() *corev1.Pod { return &corev1.Pod{} }, func() *corev1.PodList { return &corev1.PodList{} })
}

// Events implements Interface.
func (c *Client) Events(namespace string) EventInterface {
	return gentype.NewClientWithList[*corev1.Event, *corev1.EventList]("events", c.core, c.params, namespace,
		func() *corev1.Event { return &corev1.Event{} }, func() *corev1.EventList { return &corev1.EventList{} })
}

// Leases implements Interface.
func (c *Client) Leases(namespace string) LeaseInterface {
	return gentype.NewClientWithList[*coordinationv1.Lease, *coordinationv1.LeaseList]("leases", c.coordination, c.params, namespace,
		func() *coordinationv1.Lease { return &coordinationv1.Lease{} }, func() *coordinationv1.LeaseList { return &coordinationv1.LeaseList{} })
}

// ResourceSlices implements Interface.
func (c *Client) ResourceSlices() ResourceSliceInterface {
	return gentype.NewClientWithList[*resourcev1.ResourceSlice, *resourcev1.ResourceSliceList]("resourceslices", c.resource, c.params, "",
		func() *resourcev1.ResourceSlice { return &resourcev1.ResourceSlice{} },
		func() *resourcev1.ResourceSliceList { return &resourcev1.ResourceSliceList{} })
}

// ResourceClaims implements Interface.
func (c *Client) ResourceClaims(namespace string) ResourceClaimInterface {
	return gentype.NewClientWithList[*resourcev1.ResourceClaim, *resourcev1.ResourceClaimList]("resourceclaims", c.resource, c.params, namespace,
		func() *resourcev1.ResourceClaim { return &resourcev1.ResourceClaim{} },
		func() *resourcev1.ResourceClaimList { return &resourcev1.ResourceClaimList{} })
}

// Evictions implements Interface.
func (c *Client) Evictions(namespace string) EvictionInterface {
	return evictions{policy: c.policy, namespace: namespace}
}

// evictions posts policy/v1 Evictions to the pods' eviction subresource,
// as client-go's policy client does.
type evictions struct {
	policy    rest.Interface
	namespace string
}

// Evict implements EvictionInterface.
func (e evictions) Evict(ctx context.Context, eviction *policyv1.Eviction) error {
	return e.policy.Post().AbsPath("/api/v1").Namespace(e.namespace).Resource("pods").
		Name(eviction.Name).SubResource("eviction").Body(eviction).Do(ctx).Error()
}
