package live

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/test/harness"
)

// pollEvery is how often the kubelet's PodResources API is asked during a
// change: the resolution of the device end point. The kubelet allows that
// API 100 requests a second (burst 10) from all its clients together;
// asking more often would starve the agent's own calls, which it rejects
// with ResourceExhausted.
const pollEvery = 20 * time.Millisecond

// deviceSet is the kubelet's allocatable devices of carve's resources:
// resource name -> sorted device IDs. A resource without a healthy device
// is absent.
type deviceSet map[string][]string

// counts are the number of devices per resource.
func (s deviceSet) counts() map[string]int64 {
	out := make(map[string]int64, len(s))
	for r, ids := range s {
		out[r] = int64(len(ids))
	}
	return out
}

func (s deviceSet) equal(o deviceSet) bool {
	return maps.EqualFunc(s, o, slices.Equal[[]string])
}

// kubelet asks the kubelet's PodResources API for its allocatable devices.
type kubelet struct {
	conn   *grpc.ClientConn
	client podresourcesapi.PodResourcesListerClient
}

// dialKubelet connects to the kubelet's PodResources socket.
func dialKubelet(socket string) (*kubelet, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("PodResources socket %s: %w", socket, err)
	}
	return &kubelet{conn: conn, client: podresourcesapi.NewPodResourcesListerClient(conn)}, nil
}

func (k *kubelet) close() { k.conn.Close() }

// devices returns the kubelet's allocatable devices of carve's resources:
// its device manager's devices that the device plugins' last ListAndWatch
// answers listed as healthy (GetAllocatableDevices).
func (k *kubelet) devices(ctx context.Context) (deviceSet, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := k.client.GetAllocatableResources(ctx, &podresourcesapi.AllocatableResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("PodResources GetAllocatableResources: %w", err)
	}
	out := deviceSet{}
	for _, d := range resp.GetDevices() {
		if strings.HasPrefix(d.GetResourceName(), harness.ResourcePrefix) {
			out[d.GetResourceName()] = append(out[d.GetResourceName()], d.GetDeviceIds()...)
		}
	}
	for _, ids := range out {
		slices.Sort(ids)
	}
	return out, nil
}

// waitDevices asks the kubelet every pollEvery until its devices number
// want per resource, and returns when it first saw them and the set.
func (k *kubelet) waitDevices(ctx context.Context, want map[string]int64) (time.Time, deviceSet, error) {
	var last deviceSet
	for {
		s, err := k.devices(ctx)
		at := time.Now()
		if err == nil && maps.Equal(s.counts(), want) {
			return at, s, nil
		}
		if err == nil {
			last = s
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return time.Time{}, nil, fmt.Errorf("kubelet devices: want %v, last seen %v: %w (last error: %w)", want, last.counts(), ctx.Err(), err)
			}
			return time.Time{}, nil, fmt.Errorf("kubelet devices: want %v, last seen %v: %w", want, last.counts(), ctx.Err())
		case <-time.After(pollEvery):
		}
	}
}

// nodeView is the node as an informer last delivered it: its carve
// allocatable counts, since when they are so, and the agent's record.
type nodeView struct {
	mu      sync.Mutex
	alloc   map[string]int64
	allocAt time.Time
	record  carvev1.NodeRecord
	changed chan struct{} // closed and replaced at every update
}

// update takes a delivered Node.
func (v *nodeView) update(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	now := time.Now()
	rec, _ := harness.RecordOf(n) // none yet: the zero record
	alloc := harness.Allocatable(n)
	v.mu.Lock()
	defer v.mu.Unlock()
	if !maps.Equal(alloc, v.alloc) {
		v.alloc, v.allocAt = alloc, now
	}
	v.record = rec
	close(v.changed)
	v.changed = make(chan struct{})
}

// watchNode runs an informer on the node until ctx ends.
func watchNode(ctx context.Context, cs kubernetes.Interface, node string) (*nodeView, error) {
	v := &nodeView{changed: make(chan struct{})}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", node).String()
	}))
	inf := f.Core().V1().Nodes().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: v.update, UpdateFunc: func(_, o any) { v.update(o) },
	}); err != nil {
		return nil, fmt.Errorf("watch node %s: %w", node, err)
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("watch node %s: %w", node, ctx.Err())
	}
	return v, nil
}

// waitFor waits until cond holds for the view (called with its lock
// held), and returns its error with what was last seen.
func (v *nodeView) waitFor(ctx context.Context, what string, cond func(*nodeView) bool) error {
	for {
		v.mu.Lock()
		ok, ch := cond(v), v.changed
		alloc, rec := v.alloc, v.record
		v.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node never had %s (allocatable %v, record %s %s %q): %w",
				what, alloc, rec.State, rec.Profile, rec.LastError, ctx.Err())
		case <-ch:
		}
	}
}

// waitAllocatable waits until the allocatable counts are want and returns
// when the informer delivered them.
func (v *nodeView) waitAllocatable(ctx context.Context, want map[string]int64) (time.Time, error) {
	var at time.Time
	err := v.waitFor(ctx, fmt.Sprintf("allocatable %v", want), func(v *nodeView) bool {
		at = v.allocAt
		return maps.Equal(v.alloc, want)
	})
	return at, err
}

// waitRecord waits until the agent's record says the profile label with
// the hash is realised.
func (v *nodeView) waitRecord(ctx context.Context, label, hash string) error {
	return v.waitFor(ctx, fmt.Sprintf("profile %s (%s) in state success", label, hash), func(v *nodeView) bool {
		r := v.record
		return r.State == carvev1.StateSuccess && r.Profile == label && r.ProfileHash == hash
	})
}
