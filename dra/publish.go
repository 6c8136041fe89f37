package dra

import (
	"context"
	"errors"
	"fmt"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"github.com/carve-dev/carve/kubeclient"
)

// ErrSharingDropped says the API server dropped the fields that let several
// allocations share a device (allowMultipleAllocations, capacity request
// policies): the cluster lacks consumable capacity (the
// DRAConsumableCapacity feature).
var ErrSharingDropped = errors.New("the API server dropped allowMultipleAllocations: this cluster cannot share a DRA device between claims (consumable capacity, the DRAConsumableCapacity feature gate, beta and on by default since Kubernetes 1.36)")

// ErrCountersDropped says the API server dropped the fields of
// partitionable devices (sharedCounters, consumesCounters): the cluster
// lacks the DRAPartitionableDevices feature.
var ErrCountersDropped = errors.New("the API server dropped sharedCounters or consumesCounters: this cluster cannot offer MIG devices made on demand (partitionable devices, the DRAPartitionableDevices feature gate, beta and on by default since Kubernetes 1.36)")

// Publisher keeps one node's ResourceSlices of the driver: one pool named
// after the node, in as many slices as the API's limits take (PoolSlices),
// written synchronously so that a device withdrawn is out of the API
// server's view when Publish returns.
type Publisher struct {
	// Client writes ResourceSlices.
	Client kubeclient.Interface
	// Node is the node's name; NodeUID makes the Node the slices' owner,
	// so that the slices go with the Node (read from the API server when
	// empty).
	Node    string
	NodeUID types.UID
}

// Publish makes the node's pool hold exactly devices and counters, laid
// out as PoolSlices lays them out, with a higher pool generation on every
// slice when anything changed, and deletes any other slice of the driver
// on the node. When the server dropped the sharing fields of a shared
// device it republishes without the shared devices and returns
// ErrSharingDropped; when it dropped the counters, it republishes without
// the devices that consume counters and returns ErrCountersDropped.
func (p *Publisher) Publish(ctx context.Context, devices []resourceapi.Device, counters ...resourceapi.CounterSet) error {
	if p.NodeUID == "" {
		node, err := p.Client.Nodes().Get(ctx, p.Node, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("get node %s, the ResourceSlices' owner: %w", p.Node, err)
		}
		p.NodeUID = node.UID
	}
	got, err := p.sync(ctx, devices, counters)
	if err != nil {
		return err
	}
	var sent []resourceapi.Device
	for _, s := range got {
		sent = append(sent, s.Spec.Devices...)
	}
	switch {
	case !sharingKept(devices, sent):
		if _, err := p.sync(ctx, unshared(devices), counters); err != nil {
			return err
		}
		return ErrSharingDropped
	case !countersKept(devices, counters, got):
		if _, err := p.sync(ctx, unpartitioned(devices), nil); err != nil {
			return err
		}
		return ErrCountersDropped
	}
	return nil
}

// sync writes the pool's slices and deletes the node's others; it returns
// the slices as the server holds them.
func (p *Publisher) sync(ctx context.Context, devices []resourceapi.Device, counters []resourceapi.CounterSet) ([]resourceapi.ResourceSlice, error) {
	mine, err := p.list(ctx)
	if err != nil {
		return nil, err
	}
	want := PoolSlices(p.Node, devices, counters)
	have := make(map[string]resourceapi.ResourceSlice, len(mine))
	var gen int64
	for _, s := range mine {
		have[s.Name] = s
		gen = max(gen, s.Spec.Pool.Generation)
	}
	changed := false
	for _, w := range want {
		w.Spec.Pool.Generation = gen
		cur, ok := have[w.Name]
		changed = changed || !ok || !equality.Semantic.DeepEqual(cur.Spec, w.Spec)
	}
	got := make([]resourceapi.ResourceSlice, len(want))
	for i, w := range want {
		if !changed {
			got[i] = have[w.Name]
			continue
		}
		w.Spec.Pool.Generation = gen + 1
		s, err := p.write(ctx, have, w)
		if err != nil {
			return nil, err
		}
		got[i] = *s
	}
	for _, s := range mine {
		if slices.ContainsFunc(want, func(w resourceapi.ResourceSlice) bool { return w.Name == s.Name }) {
			continue
		}
		if err := p.Client.ResourceSlices().Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("delete stale ResourceSlice %s: %w", s.Name, err)
		}
	}
	return got, nil
}

// list returns the driver's slices of the node.
func (p *Publisher) list(ctx context.Context) ([]resourceapi.ResourceSlice, error) {
	sel := fields.Set{resourceapi.ResourceSliceSelectorNodeName: p.Node, resourceapi.ResourceSliceSelectorDriver: DriverName}.AsSelector().String()
	l, err := p.Client.ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list ResourceSlices of node %s: %w", p.Node, err)
	}
	// The selector already says so; a server or a fake that ignored it
	// must not make this node delete another's slices.
	return slices.DeleteFunc(l.Items, func(s resourceapi.ResourceSlice) bool {
		return s.Spec.Driver != DriverName || s.Spec.NodeName == nil || *s.Spec.NodeName != p.Node
	}), nil
}

// write creates the slice want, or updates the one of its name in have.
func (p *Publisher) write(ctx context.Context, have map[string]resourceapi.ResourceSlice, want resourceapi.ResourceSlice) (*resourceapi.ResourceSlice, error) {
	api := p.Client.ResourceSlices()
	cur, ok := have[want.Name]
	if !ok {
		want.OwnerReferences = p.owner()
		got, err := api.Create(ctx, &want, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("create ResourceSlice %s: %w", want.Name, err)
		}
		return got, nil
	}
	s := cur.DeepCopy()
	s.Spec = want.Spec
	got, err := api.Update(ctx, s, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("update ResourceSlice %s: %w", cur.Name, err)
	}
	return got, nil
}

func (p *Publisher) owner() []metav1.OwnerReference {
	if p.NodeUID == "" {
		return nil
	}
	return []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: p.Node, UID: p.NodeUID}}
}

// sharingKept reports whether every shared device sent came back shared.
func sharingKept(sent, got []resourceapi.Device) bool {
	back := make(map[string]bool, len(got))
	for _, d := range got {
		back[d.Name] = d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations
	}
	for _, d := range sent {
		if d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations && !back[d.Name] {
			return false
		}
	}
	return true
}

// unshared returns the devices that no two allocations share.
func unshared(devices []resourceapi.Device) []resourceapi.Device {
	var out []resourceapi.Device
	for _, d := range devices {
		if d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations {
			out = append(out, d)
		}
	}
	return out
}
