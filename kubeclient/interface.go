package kubeclient

import (
	"context"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

// Interface is the Kubernetes API as carve-agent uses it.
type Interface interface {
	Nodes() NodeInterface
	ConfigMaps(namespace string) ConfigMapInterface
	Pods(namespace string) PodInterface
	Evictions(namespace string) EvictionInterface
	Events(namespace string) EventInterface
	Leases(namespace string) LeaseInterface
	ResourceSlices() ResourceSliceInterface
	ResourceClaims(namespace string) ResourceClaimInterface
}

// NodeInterface reads, watches and patches Nodes.
type NodeInterface interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Node, error)
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.Node, error)
}

// ConfigMapInterface reads and watches ConfigMaps.
type ConfigMapInterface interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.ConfigMap, error)
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.ConfigMapList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// PodInterface lists Pods.
type PodInterface interface {
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error)
}

// EvictionInterface evicts Pods through the Eviction API, so that
// PodDisruptionBudgets hold.
type EvictionInterface interface {
	Evict(ctx context.Context, eviction *policyv1.Eviction) error
}

// EventInterface writes core/v1 Events (what client-go's event recorder
// needs).
type EventInterface interface {
	Create(ctx context.Context, event *corev1.Event, opts metav1.CreateOptions) (*corev1.Event, error)
	Update(ctx context.Context, event *corev1.Event, opts metav1.UpdateOptions) (*corev1.Event, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.Event, error)
}

// LeaseInterface reads and writes Leases (the rollout's slots).
type LeaseInterface interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error)
	List(ctx context.Context, opts metav1.ListOptions) (*coordinationv1.LeaseList, error)
	Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error)
	Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// ResourceSliceInterface reads and writes the node's ResourceSlices.
type ResourceSliceInterface interface {
	List(ctx context.Context, opts metav1.ListOptions) (*resourcev1.ResourceSliceList, error)
	Create(ctx context.Context, slice *resourcev1.ResourceSlice, opts metav1.CreateOptions) (*resourcev1.ResourceSlice, error)
	Update(ctx context.Context, slice *resourcev1.ResourceSlice, opts metav1.UpdateOptions) (*resourcev1.ResourceSlice, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// ResourceClaimInterface reads ResourceClaims.
type ResourceClaimInterface interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*resourcev1.ResourceClaim, error)
	List(ctx context.Context, opts metav1.ListOptions) (*resourcev1.ResourceClaimList, error)
}
