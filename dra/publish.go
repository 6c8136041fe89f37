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

// Publisher keeps one node's ResourceSlice of the driver: one pool named
// after the node, in one slice, written synchronously so that a device
// withdrawn is out of the API server's view when Publish returns.
type Publisher struct {
	// Client writes ResourceSlices.
	Client kubeclient.Interface
	// Node is the node's name; NodeUID makes the Node the slice's owner,
	// so that the slice goes with the Node (read from the API server when
	// empty).
	Node    string
	NodeUID types.UID
}

// Publish makes the node's slice hold exactly devices, with a higher pool
// generation when they changed, and deletes any other slice of the driver
// on the node. When the server dropped the sharing fields of a shared
// device it republishes without the shared devices and returns
// ErrSharingDropped.
func (p *Publisher) Publish(ctx context.Context, devices []resourceapi.Device) error {
	if p.NodeUID == "" {
		node, err := p.Client.Nodes().Get(ctx, p.Node, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("get node %s, the ResourceSlice's owner: %w", p.Node, err)
		}
		p.NodeUID = node.UID
	}
	mine, err := p.list(ctx)
	if err != nil {
		return err
	}
	var cur *resourceapi.ResourceSlice
	for i := range mine {
		if cur == nil {
			cur = &mine[i]
			continue
		}
		if err := p.Client.ResourceSlices().Delete(ctx, mine[i].Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete extra ResourceSlice %s: %w", mine[i].Name, err)
		}
	}
	got, err := p.write(ctx, cur, devices)
	if err != nil {
		return err
	}
	if !sharingKept(devices, got.Spec.Devices) {
		if _, err := p.write(ctx, got, unshared(devices)); err != nil {
			return err
		}
		return ErrSharingDropped
	}
	return nil
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

// write creates the slice (cur nil) or updates cur to hold devices.
func (p *Publisher) write(ctx context.Context, cur *resourceapi.ResourceSlice, devices []resourceapi.Device) (*resourceapi.ResourceSlice, error) {
	api := p.Client.ResourceSlices()
	if cur == nil {
		s := &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{GenerateName: p.Node + "-" + DriverName + "-", OwnerReferences: p.owner()},
			Spec:       p.spec(1, devices),
		}
		got, err := api.Create(ctx, s, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("create ResourceSlice of node %s: %w", p.Node, err)
		}
		return got, nil
	}
	want := p.spec(cur.Spec.Pool.Generation, devices)
	if sameDevices(cur.Spec.Devices, devices) && cur.Spec.Pool == want.Pool {
		return cur, nil
	}
	s := cur.DeepCopy()
	s.Spec = p.spec(cur.Spec.Pool.Generation+1, devices)
	got, err := api.Update(ctx, s, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("update ResourceSlice %s: %w", cur.Name, err)
	}
	return got, nil
}

func (p *Publisher) spec(generation int64, devices []resourceapi.Device) resourceapi.ResourceSliceSpec {
	return resourceapi.ResourceSliceSpec{
		Driver:   DriverName,
		Pool:     resourceapi.ResourcePool{Name: p.Node, Generation: generation, ResourceSliceCount: 1},
		NodeName: new(p.Node),
		Devices:  devices,
	}
}

func (p *Publisher) owner() []metav1.OwnerReference {
	if p.NodeUID == "" {
		return nil
	}
	return []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: p.Node, UID: p.NodeUID}}
}

// sameDevices reports whether the published devices are those wanted; the
// server's copy is compared semantically (quantities by value).
func sameDevices(have, want []resourceapi.Device) bool {
	return equality.Semantic.DeepEqual(have, want)
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
