// Package clientset wraps client-go's clientset (kubernetes.Interface) as a
// kubeclient.Interface: for tests, which drive the agent with client-go's
// fake clientset or a clientset of a test cluster, and for programs that
// link the clientset anyway. carve-agent's binary does not import it.
package clientset

import (
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/watchlist"

	"github.com/carve-dev/carve/kubeclient"
)

// Wrap returns cs as a kubeclient.Interface.
func Wrap(cs kubernetes.Interface) kubeclient.Interface { return wrapped{cs} }

type wrapped struct{ cs kubernetes.Interface }

func (w wrapped) Nodes() kubeclient.NodeInterface { return w.cs.CoreV1().Nodes() }
func (w wrapped) ConfigMaps(ns string) kubeclient.ConfigMapInterface {
	return w.cs.CoreV1().ConfigMaps(ns)
}
func (w wrapped) Pods(ns string) kubeclient.PodInterface { return w.cs.CoreV1().Pods(ns) }
func (w wrapped) Evictions(ns string) kubeclient.EvictionInterface {
	return w.cs.PolicyV1().Evictions(ns)
}
func (w wrapped) Events(ns string) kubeclient.EventInterface { return w.cs.CoreV1().Events(ns) }
func (w wrapped) Leases(ns string) kubeclient.LeaseInterface {
	return w.cs.CoordinationV1().Leases(ns)
}
func (w wrapped) ResourceSlices() kubeclient.ResourceSliceInterface {
	return w.cs.ResourceV1().ResourceSlices()
}
func (w wrapped) ResourceClaims(ns string) kubeclient.ResourceClaimInterface {
	return w.cs.ResourceV1().ResourceClaims(ns)
}

// IsWatchListSemanticsUnSupported tells client-go's reflector what the
// wrapped clientset says of itself: client-go's fake cannot stream a watch
// list, so informers over it must list, then watch.
func (w wrapped) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(w.cs)
}
