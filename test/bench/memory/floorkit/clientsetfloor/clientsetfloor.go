// Package clientsetfloor watches a Node the conventional way, with
// client-go's clientset and shared informer factory: what the floor
// (clientset) and the floor (DRA library) programs do.
package clientsetfloor

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// WatchNode starts an informer on the Node (its list and watch narrowed
// to it by name) through the clientset, waits until it has synced, and
// returns the clientset; the informer runs until ctx ends.
func WatchNode(ctx context.Context, kubeconfig, node string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("API client: %w", err)
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", node).String()
	}))
	nodes := factory.Core().V1().Nodes().Informer()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), nodes.HasSynced) {
		return nil, fmt.Errorf("node %s: cache did not sync: %w", node, ctx.Err())
	}
	return client, nil
}
