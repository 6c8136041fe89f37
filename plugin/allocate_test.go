package plugin

import (
	"context"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/timeslice"
)

// testResources: whole GPUs 0-3, 4 replicas of GPUs 4-6 (renamed shared),
// two MIG devices with 2 replicas each on GPU 7.
func testResources() timeslice.Resources {
	return timeslice.Resources{
		carvev1.GPUResource: wholeGPUs(0, 1, 2, 3),
		sharedRes:           sharedGPUs(4, 4, 5, 6),
		migRes:              migDevs(7, "1g.10gb", 2, 1, 2),
	}
}

func TestAllocate(t *testing.T) {
	type want struct {
		envs [][]string // per container: NVIDIA_VISIBLE_DEVICES split
		cdi  [][]string // per container: CDI names (nil: none expected)
	}
	tests := []struct {
		name     string
		opts     Options
		resource string
		requests [][]string
		want     want
		// errHas are substrings of an InvalidArgument error; none: success.
		errHas []string
	}{
		{"whole GPUs", Options{}, carvev1.GPUResource, [][]string{{"GPU-2", "GPU-0"}},
			want{envs: [][]string{{"GPU-2", "GPU-0"}}}, nil},
		{"replicas of one GPU folded", Options{}, sharedRes, [][]string{{"GPU-4::0", "GPU-4::2", "GPU-5::1", "GPU-4::3"}},
			want{envs: [][]string{{"GPU-4", "GPU-5"}}}, nil},
		{"MIG replicas folded", Options{}, migRes, [][]string{{"MIG-7-1::1", "MIG-7-1::0"}},
			want{envs: [][]string{{"MIG-7-1"}}}, nil},
		{"per container", Options{}, carvev1.GPUResource, [][]string{{"GPU-0"}, {"GPU-1", "GPU-3"}},
			want{envs: [][]string{{"GPU-0"}, {"GPU-1", "GPU-3"}}}, nil},
		{"CDI names", Options{CDI: true}, sharedRes, [][]string{{"GPU-4::1", "GPU-6::0", "GPU-4::0"}},
			want{envs: [][]string{{"GPU-4", "GPU-6"}}, cdi: [][]string{{"nvidia.com/gpu=GPU-4", "nvidia.com/gpu=GPU-6"}}}, nil},
		{"CDI kind", Options{CDI: true, CDIKind: "k8s.example.com/gpu"}, migRes, [][]string{{"MIG-7-2::0"}},
			want{envs: [][]string{{"MIG-7-2"}}, cdi: [][]string{{"k8s.example.com/gpu=MIG-7-2"}}}, nil},
		{"unknown IDs", Options{}, carvev1.GPUResource, [][]string{{"GPU-0", "GPU-9", "GPU-4::0"}},
			want{}, []string{"unknown device IDs", "GPU-9", "GPU-4::0", carvev1.GPUResource}},
		{"unknown in second container", Options{}, sharedRes, [][]string{{"GPU-4::0"}, {"GPU-4::7"}},
			want{}, []string{"container request 1", "GPU-4::7"}},
		{"empty request", Options{}, carvev1.GPUResource, [][]string{{}},
			want{}, []string{"no devices"}},
		{"shared, >1 with failRequestsGreaterThanOne", Options{FailRequestsGreaterThanOne: true}, sharedRes, [][]string{{"GPU-4::0", "GPU-5::0"}},
			want{}, []string{"shared", "at most 1", "failRequestsGreaterThanOne"}},
		{"shared, 1 with failRequestsGreaterThanOne", Options{FailRequestsGreaterThanOne: true}, sharedRes, [][]string{{"GPU-5::3"}},
			want{envs: [][]string{{"GPU-5"}}}, nil},
		{"unshared, >1 with failRequestsGreaterThanOne", Options{FailRequestsGreaterThanOne: true}, carvev1.GPUResource, [][]string{{"GPU-0", "GPU-1"}},
			want{envs: [][]string{{"GPU-0", "GPU-1"}}}, nil},
		{"shared, >1 without the option", Options{}, sharedRes, [][]string{{"GPU-4::0", "GPU-5::0"}},
			want{envs: [][]string{{"GPU-4", "GPU-5"}}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			tt.opts.Registerer = reg
			e := newEnv(t, tt.opts, false)
			e.update(t, testResources())
			req := &pluginapi.AllocateRequest{}
			for _, ids := range tt.requests {
				req.ContainerRequests = append(req.ContainerRequests, &pluginapi.ContainerAllocateRequest{DevicesIds: ids})
			}
			resp, err := dialPlugin(t, e.socket(tt.resource)).Allocate(context.Background(), req)
			if tt.errHas != nil {
				if status.Code(err) != codes.InvalidArgument {
					t.Fatalf("Allocate error %v, want InvalidArgument", err)
				}
				for _, s := range tt.errHas {
					if !strings.Contains(status.Convert(err).Message(), s) {
						t.Errorf("error %q does not mention %q", status.Convert(err).Message(), s)
					}
				}
				if got := testutil.ToFloat64(e.m.metrics.failures.WithLabelValues(tt.resource)); got != 1 {
					t.Errorf("failure counter %v, want 1", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Allocate: %v", err)
			}
			if len(resp.ContainerResponses) != len(tt.requests) {
				t.Fatalf("%d container responses, want %d", len(resp.ContainerResponses), len(tt.requests))
			}
			for i, cr := range resp.ContainerResponses {
				if got := strings.Split(cr.Envs[VisibleDevicesEnv], ","); !reflect.DeepEqual(got, tt.want.envs[i]) {
					t.Errorf("container %d: %s=%v, want %v", i, VisibleDevicesEnv, got, tt.want.envs[i])
				}
				var cdi []string
				for _, d := range cr.CdiDevices {
					cdi = append(cdi, d.Name)
				}
				var wantCDI []string
				if tt.want.cdi != nil {
					wantCDI = tt.want.cdi[i]
				}
				if !reflect.DeepEqual(cdi, wantCDI) {
					t.Errorf("container %d: CDI %v, want %v", i, cdi, wantCDI)
				}
			}
			if got := testutil.ToFloat64(e.m.metrics.allocations.WithLabelValues(tt.resource)); got != float64(len(tt.requests)) {
				t.Errorf("allocation counter %v, want %d", got, len(tt.requests))
			}
		})
	}
}

// topologyNVML is a 4-GPU topology where the closest pair is not the
// lowest-numbered one: 0-1 share a PCIe switch but only 1-3 have 12
// NVLinks.
func topologyNVML() *fakeNVML {
	f := newFakeNVML(8)
	f.link(0, 1, partition.Link{PCIe: 10})
	f.link(0, 2, partition.Link{NVLinks: 2, PCIe: 40})
	f.link(0, 3, partition.Link{PCIe: 50})
	f.link(1, 2, partition.Link{PCIe: 40})
	f.link(1, 3, partition.Link{NVLinks: 12, PCIe: 50})
	f.link(2, 3, partition.Link{NVLinks: 4, PCIe: 50})
	return f
}

func TestGetPreferredAllocation(t *testing.T) {
	all := func(res string) []string {
		var ids []string
		for _, d := range testResources()[res] {
			ids = append(ids, d.ID)
		}
		return ids
	}
	tests := []struct {
		name     string
		policy   ReplicaPolicy
		resource string
		avail    []string
		must     []string
		size     int32
		want     []string // sorted
	}{
		{"closest pair is 1-3", Spread, carvev1.GPUResource, all(carvev1.GPUResource), nil, 2, []string{"GPU-1", "GPU-3"}},
		{"closest triple", Spread, carvev1.GPUResource, all(carvev1.GPUResource), nil, 3, []string{"GPU-1", "GPU-2", "GPU-3"}},
		{"must include 0, triple", Spread, carvev1.GPUResource, all(carvev1.GPUResource), []string{"GPU-0"}, 3, []string{"GPU-0", "GPU-1", "GPU-3"}},
		{"must include 0, pair", Spread, carvev1.GPUResource, all(carvev1.GPUResource), []string{"GPU-0"}, 2, []string{"GPU-0", "GPU-2"}},
		{"only available", Spread, carvev1.GPUResource, []string{"GPU-0", "GPU-1", "GPU-2"}, nil, 2, []string{"GPU-0", "GPU-2"}},
		{"size beyond available", Spread, carvev1.GPUResource, []string{"GPU-0", "GPU-1"}, nil, 3, []string{"GPU-0", "GPU-1"}},
		{"unknown IDs only to fill", Spread, carvev1.GPUResource, []string{"GPU-x", "GPU-0"}, nil, 2, []string{"GPU-0", "GPU-x"}},
		{"spread replicas", Spread, sharedRes, all(sharedRes), nil, 3, []string{"GPU-4::0", "GPU-5::0", "GPU-6::0"}},
		{"spread wraps around", Spread, sharedRes, all(sharedRes), nil, 4, []string{"GPU-4::0", "GPU-4::1", "GPU-5::0", "GPU-6::0"}},
		{"spread avoids must-include GPU", Spread, sharedRes, all(sharedRes), []string{"GPU-4::2"}, 2, []string{"GPU-4::2", "GPU-5::0"}},
		{"spread within available", Spread, sharedRes, []string{"GPU-4::0", "GPU-4::1", "GPU-4::2", "GPU-6::3"}, nil, 3, []string{"GPU-4::0", "GPU-4::1", "GPU-6::3"}},
		{"pack replicas", Pack, sharedRes, all(sharedRes), nil, 3, []string{"GPU-4::0", "GPU-4::1", "GPU-4::2"}},
		{"pack beyond one GPU", Pack, sharedRes, all(sharedRes), nil, 6, []string{"GPU-4::0", "GPU-4::1", "GPU-4::2", "GPU-4::3", "GPU-5::0", "GPU-5::1"}},
		{"pack next to must-include", Pack, sharedRes, all(sharedRes), []string{"GPU-6::3"}, 3, []string{"GPU-6::0", "GPU-6::1", "GPU-6::3"}},
		{"pack onto the fullest device", Pack, sharedRes, []string{"GPU-4::0", "GPU-4::1", "GPU-5::0", "GPU-5::1", "GPU-5::2"}, nil, 3, []string{"GPU-5::0", "GPU-5::1", "GPU-5::2"}},
		{"spread MIG replicas", Spread, migRes, all(migRes), nil, 2, []string{"MIG-7-1::0", "MIG-7-2::0"}},
		{"pack MIG replicas", Pack, migRes, all(migRes), nil, 2, []string{"MIG-7-1::0", "MIG-7-1::1"}},
		{"must-include beyond size", Spread, carvev1.GPUResource, all(carvev1.GPUResource), []string{"GPU-0", "GPU-2"}, 1, []string{"GPU-0", "GPU-2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, Options{NVML: topologyNVML(), ReplicaPolicy: tt.policy, Health: HealthOptions{Disabled: true}}, false)
			e.update(t, testResources())
			resp, err := dialPlugin(t, e.socket(tt.resource)).GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{
				ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
					AvailableDeviceIDs: tt.avail, MustIncludeDeviceIDs: tt.must, AllocationSize: tt.size,
				}},
			})
			if err != nil {
				t.Fatalf("GetPreferredAllocation: %v", err)
			}
			got := append([]string(nil), resp.ContainerResponses[0].DeviceIDs...)
			sort.Strings(got)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
			// Invariants: must-include kept, nothing outside available.
			in := map[string]bool{}
			for _, id := range append(append([]string(nil), tt.avail...), tt.must...) {
				in[id] = true
			}
			for _, id := range got {
				if !in[id] {
					t.Errorf("chose %s, which is neither available nor must-include", id)
				}
			}
			for _, id := range tt.must {
				if !slices.Contains(got, id) {
					t.Errorf("must-include %s missing", id)
				}
			}
		})
	}
}

func TestGetPreferredAllocationNegativeSize(t *testing.T) {
	e := newEnv(t, Options{}, false)
	e.update(t, testResources())
	_, err := dialPlugin(t, e.socket(carvev1.GPUResource)).GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: []string{"GPU-0"}, AllocationSize: -1}},
	})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("error %v, want InvalidArgument", err)
	}
}

// TestAllocateProfileFailRequests checks the per-profile setting
// (timeSlicing.failRequestsGreaterThanOne), which reaches the plugin on the
// devices rather than as a manager-wide option.
func TestAllocateProfileFailRequests(t *testing.T) {
	marked := sharedGPUs(4, 4, 5)
	for i := range marked {
		marked[i].FailRequestsGreaterThanOne = true
	}
	e := newEnv(t, Options{}, false)
	e.update(t, timeslice.Resources{sharedRes: marked, carvev1.GPUResource: wholeGPUs(0, 1)})
	tests := []struct {
		resource string
		ids      []string
		refused  bool
	}{
		{sharedRes, []string{"GPU-4::0", "GPU-5::1"}, true},
		{sharedRes, []string{"GPU-4::0", "GPU-4::1"}, true},
		{sharedRes, []string{"GPU-5::2"}, false},
		{carvev1.GPUResource, []string{"GPU-0", "GPU-1"}, false},
	}
	for _, tt := range tests {
		req := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: tt.ids}}}
		_, err := dialPlugin(t, e.socket(tt.resource)).Allocate(context.Background(), req)
		if tt.refused {
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "failRequestsGreaterThanOne") {
				t.Errorf("%v: err %v, want InvalidArgument naming failRequestsGreaterThanOne", tt.ids, err)
			}
		} else if err != nil {
			t.Errorf("%v: %v", tt.ids, err)
		}
	}
}
