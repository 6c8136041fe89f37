package plugin

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/carve-dev/carve/timeslice"
)

// Defaults of the PodResources client.
const (
	// DefaultPodResourcesSocket is the kubelet's PodResources socket
	// (agent flag --pod-resources-socket).
	DefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"
	// DefaultPodResourcesTimeout bounds one List call.
	DefaultPodResourcesTimeout = 10 * time.Second
	// carvePrefix starts the names of the resources carve advertises.
	carvePrefix = "nvidia.com/"
	// maxPodResourcesMsg is the largest List answer accepted (the
	// kubelet's own limit).
	maxPodResourcesMsg = 16 << 20
)

// PodResourcesClient asks the kubelet's PodResources API (v1) which of
// carve's devices are assigned to containers. It dials for every call, so it
// survives kubelet restarts; the zero value is not usable, use
// NewPodResourcesClient.
type PodResourcesClient struct {
	socket  string
	timeout time.Duration
}

// NewPodResourcesClient returns a client of the PodResources API on the
// unix socket path (default DefaultPodResourcesSocket when ""), each call
// bounded by timeout (default DefaultPodResourcesTimeout when <= 0).
func NewPodResourcesClient(socket string, timeout time.Duration) *PodResourcesClient {
	if socket == "" {
		socket = DefaultPodResourcesSocket
	}
	if timeout <= 0 {
		timeout = DefaultPodResourcesTimeout
	}
	return &PodResourcesClient{socket: socket, timeout: timeout}
}

// Assignment is the devices of one carve resource assigned to one container.
type Assignment struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Container string `json:"container"`
	// Resource is the resource name, e.g. "nvidia.com/mig-1g.10gb".
	Resource string `json:"resource"`
	// DeviceIDs are the device-plugin IDs as the kubelet assigned them.
	DeviceIDs []string `json:"deviceIDs"`
	// UUIDs are the physical devices behind DeviceIDs (replicas folded).
	UUIDs []string `json:"uuids"`
}

// InUse is what the kubelet says is assigned of carve's resources.
type InUse struct {
	// Assignments, sorted by namespace, pod, container, resource.
	Assignments []Assignment `json:"assignments"`
	// UUIDs are the physical GPU and MIG device UUIDs some container
	// holds, sorted, each once: the planner's in-use set.
	UUIDs []string `json:"uuids"`
}

// Holds reports whether some container holds the physical device uuid.
func (u *InUse) Holds(uuid string) bool {
	i := sort.SearchStrings(u.UUIDs, uuid)
	return i < len(u.UUIDs) && u.UUIDs[i] == uuid
}

// Set returns the physical device UUIDs some container holds as a set: the
// planner's in-use set. A nil InUse holds nothing.
func (u *InUse) Set() map[string]bool {
	if u == nil {
		return nil
	}
	set := make(map[string]bool, len(u.UUIDs))
	for _, id := range u.UUIDs {
		set[id] = true
	}
	return set
}

// Holding returns the containers that hold one of the physical devices
// uuids, in Assignments order.
func (u *InUse) Holding(uuids []string) []Assignment {
	if u == nil {
		return nil
	}
	var out []Assignment
	for _, a := range u.Assignments {
		for _, id := range a.UUIDs {
			if slices.Contains(uuids, id) {
				out = append(out, a)
				break
			}
		}
	}
	return out
}

// InUse lists the pods' resources and keeps the devices of resources whose
// names start with "nvidia.com/".
func (c *PodResourcesClient) InUse(ctx context.Context) (*InUse, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+c.socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxPodResourcesMsg)))
	if err != nil {
		return nil, fmt.Errorf("pod resources: connect to %s: %w", c.socket, err)
	}
	defer conn.Close()
	resp, err := podresourcesapi.NewPodResourcesListerClient(conn).List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("pod resources: List on %s (timeout %v): %w", c.socket, c.timeout, err)
	}
	return inUseFrom(resp)
}

// inUseFrom extracts carve's assignments from a List answer.
func inUseFrom(resp *podresourcesapi.ListPodResourcesResponse) (*InUse, error) {
	out := &InUse{Assignments: []Assignment{}, UUIDs: []string{}}
	all := map[string]bool{}
	for _, pod := range resp.GetPodResources() {
		for _, ctr := range pod.GetContainers() {
			// One container may list a resource in several entries.
			byRes := map[string]*Assignment{}
			var order []string
			for _, dev := range ctr.GetDevices() {
				name := dev.GetResourceName()
				if !strings.HasPrefix(name, carvePrefix) || len(dev.GetDeviceIds()) == 0 {
					continue
				}
				a := byRes[name]
				if a == nil {
					a = &Assignment{Namespace: pod.GetNamespace(), Pod: pod.GetName(), Container: ctr.GetName(), Resource: name}
					byRes[name] = a
					order = append(order, name)
				}
				a.DeviceIDs = append(a.DeviceIDs, dev.GetDeviceIds()...)
			}
			for _, name := range order {
				a := byRes[name]
				uuids, err := timeslice.Fold(a.DeviceIDs)
				if err != nil {
					return nil, fmt.Errorf("pod resources: %s/%s container %s resource %s: %w", a.Namespace, a.Pod, a.Container, name, err)
				}
				a.UUIDs = uuids
				for _, u := range uuids {
					all[u] = true
				}
				out.Assignments = append(out.Assignments, *a)
			}
		}
	}
	sort.SliceStable(out.Assignments, func(i, j int) bool {
		a, b := out.Assignments[i], out.Assignments[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Pod != b.Pod {
			return a.Pod < b.Pod
		}
		if a.Container != b.Container {
			return a.Container < b.Container
		}
		return a.Resource < b.Resource
	})
	for u := range all {
		out.UUIDs = append(out.UUIDs, u)
	}
	sort.Strings(out.UUIDs)
	return out, nil
}
