// Command floor-narrow is the memory benchmark's floor (narrow client):
// the floor program's work (one informer on its own Node, one gRPC health
// server on a unix socket) with a client of core/v1 alone instead of
// client-go's clientset: a REST client over a scheme of core/v1's types,
// and an informer over a list and watch written against it. It is what an
// agent that links no API group it does not use can go down to.
//
//	floor-narrow --kubeconfig FILE --node-name NAME --socket PATH --memstats FILE
//
// It prints "ready", writes its memory figures on SIGUSR1 and stops as
// the floor does.
package main

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/carve-dev/carve/test/bench/memory/floorkit"
)

func main() {
	floorkit.Main("floor-narrow", nil, func(ctx context.Context, f floorkit.Flags) error {
		return watchNode(ctx, f.Kubeconfig, f.Node)
	})
}

// watchNode starts an informer on the Node through a core/v1 REST client
// and waits until it has synced; it runs until ctx ends.
func watchNode(ctx context.Context, kubeconfig, node string) error {
	core, err := coreClient(kubeconfig)
	if err != nil {
		return err
	}
	selector := fields.OneTermEqualSelector("metadata.name", node).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			list := &corev1.NodeList{}
			err := core.Get().Resource("nodes").VersionedParams(&o, metav1.ParameterCodec).Do(ctx).Into(list)
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector, o.Watch = selector, true
			return core.Get().Resource("nodes").VersionedParams(&o, metav1.ParameterCodec).Watch(ctx)
		},
	}
	nodes := cache.NewSharedIndexInformer(lw, &corev1.Node{}, 0, cache.Indexers{})
	go nodes.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), nodes.HasSynced) {
		return fmt.Errorf("node %s: cache did not sync: %w", node, ctx.Err())
	}
	return nil
}

// coreClient is a REST client of core/v1 over a scheme of its types only.
func coreClient(kubeconfig string) (*rest.RESTClient, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("scheme: %w", err)
	}
	metav1.AddToGroupVersion(scheme, corev1.SchemeGroupVersion)
	cfg.GroupVersion = &corev1.SchemeGroupVersion
	cfg.APIPath = "/api"
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	client, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("API client: %w", err)
	}
	return client, nil
}
