package agent

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// lister is a list and a watch of one kind of object, as the API serves them.
type lister struct {
	list  func(context.Context, metav1.ListOptions) (runtime.Object, error)
	watch func(context.Context, metav1.ListOptions) (watch.Interface, error)
}

// newInformer returns an informer over l for objects like example. The
// agent builds its two informers this way rather than with client-go's
// informer factory, which links an informer, a lister and a typed client
// for every API group.
// client is asked whether it can stream a watch list (client-go's fake
// cannot).
func newInformer(client any, l lister, example runtime.Object, resync time.Duration) cache.SharedIndexInformer {
	lw := &cache.ListWatch{ListWithContextFunc: l.list, WatchFuncWithContext: l.watch}
	return cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, client), example, resync, cache.Indexers{})
}

// byName narrows a list or watch to the object called name.
func byName(name string, o metav1.ListOptions) metav1.ListOptions {
	o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
	return o
}

// nodeWatch lists and watches the agent's own Node.
func (c *Controller) nodeWatch() lister {
	nodes := c.Client.Nodes()
	return lister{
		list: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return nodes.List(ctx, byName(c.NodeName, o))
		},
		watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return nodes.Watch(ctx, byName(c.NodeName, o))
		},
	}
}

// configMapWatch lists and watches the profile ConfigMap.
func (c *Controller) configMapWatch() lister {
	cms := c.Client.ConfigMaps(c.ConfigMapNamespace)
	return lister{
		list: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return cms.List(ctx, byName(c.ConfigMapName, o))
		},
		watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cms.Watch(ctx, byName(c.ConfigMapName, o))
		},
	}
}
