package allocate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/carve-dev/carve/plugin"
)

// Which table a case belongs to.
const (
	allocateTable = iota
	preferredTable
)

// benchCase is one row: the same request sent to both servers of a node.
type benchCase struct {
	// name is the table's; short is for the notes.
	name, short string
	table       int
	srv         *servers
	// ids are the requested devices (Allocate) or the available ones
	// (GetPreferredAllocation); size is the allocation size of the latter.
	ids  []string
	size int
}

// cases are the rows of both tables, in order.
func (b *bench) cases() []benchCase {
	ns, nb := len(b.small.node.ids()), len(b.big.node.ids())
	small := fmt.Sprintf("8 GPUs x %d replicas (%d devices)", smallReplicas, ns)
	big := fmt.Sprintf("8 GPUs x %d MIG %s x %d replicas (%d devices)", bigPerGPU, bigProfile, bigReplicas, nb)
	alloc := func(srv *servers, name string, devices, k int) benchCase {
		return benchCase{
			name: fmt.Sprintf("%s, %s", name, replicas(k)), short: fmt.Sprintf("%d devices, %s", devices, replicas(k)),
			table: allocateTable, srv: srv, ids: srv.node.strided(k),
		}
	}
	pref := func(srv *servers, name string, devices, size int) benchCase {
		return benchCase{
			name: fmt.Sprintf("%s available, %d wanted", name, size), short: fmt.Sprintf("%d available, %d wanted", devices, size),
			table: preferredTable, srv: srv, ids: srv.node.ids(), size: size,
		}
	}
	return []benchCase{
		alloc(b.small, small, ns, 2), alloc(b.big, big, nb, 1), alloc(b.big, big, nb, 16),
		pref(b.small, small, ns, 2), pref(b.big, big, nb, 4), pref(b.big, big, nb, 16),
	}
}

// replicas writes "1 replica", "2 replicas"...
func replicas(k int) string {
	if k == 1 {
		return "1 replica"
	}
	return fmt.Sprintf("%d replicas", k)
}

// allocateRequest is the Allocate request of an Allocate case: one
// container asking for the case's IDs.
func (c benchCase) allocateRequest() *pluginapi.AllocateRequest {
	return &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: c.ids}}}
}

// preferredRequest is the request of a GetPreferredAllocation case: one
// container, the case's IDs available, none that must be included.
func (c benchCase) preferredRequest() *pluginapi.PreferredAllocationRequest {
	return &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
		{AvailableDeviceIDs: c.ids, AllocationSize: int32(c.size)}, //nolint:gosec // a handful of devices
	}}
}

// calls returns the case's RPC on carve and on the stub.
func (c benchCase) calls() (carve, stub call) {
	if c.table == allocateTable {
		req := c.allocateRequest()
		rpc := func(cl pluginapi.DevicePluginClient) call {
			return func(ctx context.Context) error { _, err := cl.Allocate(ctx, req); return err }
		}
		return rpc(c.srv.carve), rpc(c.srv.stubClient)
	}
	req := c.preferredRequest()
	rpc := func(cl pluginapi.DevicePluginClient) call {
		return func(ctx context.Context) error { _, err := cl.GetPreferredAllocation(ctx, req); return err }
	}
	return rpc(c.srv.carve), rpc(c.srv.stubClient)
}

// measure checks both answers once, then times the calls interleaved.
func (c benchCase) measure(ctx context.Context, l limits) (series, error) {
	if err := c.verify(ctx); err != nil {
		return series{}, fmt.Errorf("%s: %w", c.name, err)
	}
	carve, stub := c.calls()
	s, err := interleave(ctx, l, carve, stub)
	if err != nil {
		return series{}, fmt.Errorf("%s: %w", c.name, err)
	}
	s.stubMap = stubMapCost(c.srv.stubDevs, min(l.calls, 2000))
	return s, nil
}

// verify asks both servers once and checks that each answers what the
// tables say it does.
func (c benchCase) verify(ctx context.Context) error {
	if c.table == allocateTable {
		req := c.allocateRequest()
		carve, err := c.srv.carve.Allocate(ctx, req)
		if err != nil {
			return fmt.Errorf("carve's Allocate: %w", err)
		}
		stub, err := c.srv.stubClient.Allocate(ctx, req)
		if err != nil {
			return fmt.Errorf("the stub's Allocate: %w", err)
		}
		return c.checkAllocate(carve, stub)
	}
	req := c.preferredRequest()
	carve, err := c.srv.carve.GetPreferredAllocation(ctx, req)
	if err != nil {
		return fmt.Errorf("carve's GetPreferredAllocation: %w", err)
	}
	stub, err := c.srv.stubClient.GetPreferredAllocation(ctx, req)
	if err != nil {
		return fmt.Errorf("the stub's GetPreferredAllocation: %w", err)
	}
	return c.checkPreferred(carve, stub)
}

// checkAllocate checks that carve names the physical devices behind the
// requested IDs (each once, in request order) and the stub the IDs.
func (c benchCase) checkAllocate(carve, stub *pluginapi.AllocateResponse) error {
	if len(carve.GetContainerResponses()) != 1 || len(stub.GetContainerResponses()) != 1 {
		return fmt.Errorf("container responses: carve %d, stub %d, want 1 each", len(carve.GetContainerResponses()), len(stub.GetContainerResponses()))
	}
	want := strings.Join(c.srv.node.physical(c.ids), ",")
	if got := carve.GetContainerResponses()[0].GetEnvs()[plugin.VisibleDevicesEnv]; got != want {
		return fmt.Errorf("carve's %s = %q, want %q", plugin.VisibleDevicesEnv, got, want)
	}
	if got, want := stub.GetContainerResponses()[0].GetEnvs()[plugin.VisibleDevicesEnv], strings.Join(c.ids, ","); got != want {
		return fmt.Errorf("the stub's %s = %q, want %q", plugin.VisibleDevicesEnv, got, want)
	}
	return nil
}

// checkPreferred checks that carve picks exactly size distinct IDs of the
// available ones and that the stub answers no preference.
func (c benchCase) checkPreferred(carve, stub *pluginapi.PreferredAllocationResponse) error {
	if n := len(stub.GetContainerResponses()); n != 0 {
		return fmt.Errorf("the stub answered %d container preferences, want none", n)
	}
	if n := len(carve.GetContainerResponses()); n != 1 {
		return fmt.Errorf("carve answered %d container preferences, want 1", n)
	}
	got := carve.GetContainerResponses()[0].GetDeviceIDs()
	if len(got) != c.size {
		return fmt.Errorf("carve preferred %d devices, want %d", len(got), c.size)
	}
	seen := map[string]bool{}
	for _, id := range got {
		if seen[id] || !slices.Contains(c.ids, id) {
			return errors.New("carve preferred " + strings.Join(got, ",") + ": a duplicate or an ID not available")
		}
		seen[id] = true
	}
	return nil
}
