package plugin

import (
	"context"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/carve-dev/carve/timeslice"
)

// VisibleDevicesEnv is the environment variable Allocate sets to the
// physical UUIDs of a container's devices.
const VisibleDevicesEnv = "NVIDIA_VISIBLE_DEVICES"

// Allocate answers, per container request, NVIDIA_VISIBLE_DEVICES with the
// physical UUIDs behind the requested IDs (replicas folded to their device,
// each once, in request order) and, with CDI enabled, CDI device names.
// Unknown or withdrawn IDs, an empty request and more than one replica of a
// shared resource when refused (Options.FailRequestsGreaterThanOne for all
// shared resources, or the profile's timeSlicing.failRequestsGreaterThanOne
// carried by the devices) fail the whole call with codes.InvalidArgument.
func (s *server) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp, err := s.allocate(req)
	if err != nil {
		s.m.metrics.failures.WithLabelValues(s.resource).Inc()
		return nil, err
	}
	s.m.metrics.allocations.WithLabelValues(s.resource).Add(float64(len(resp.ContainerResponses)))
	return resp, nil
}

// anyFailsMany reports whether a requested device's profile entry set
// timeSlicing.failRequestsGreaterThanOne.
func anyFailsMany(known map[string]timeslice.Device, ids []string) bool {
	for _, id := range ids {
		if known[id].FailRequestsGreaterThanOne {
			return true
		}
	}
	return false
}

func (s *server) allocate(req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	known, shared := s.snapshot()
	opts := &s.m.opts
	resp := &pluginapi.AllocateResponse{
		ContainerResponses: make([]*pluginapi.ContainerAllocateResponse, 0, len(req.GetContainerRequests())),
	}
	for i, cr := range req.GetContainerRequests() {
		ids := cr.GetDevicesIds()
		if len(ids) == 0 {
			return nil, status.Errorf(codes.InvalidArgument, "%s: container request %d asks for no devices", s.resource, i)
		}
		var unknown []string
		for _, id := range ids {
			if _, ok := known[id]; !ok {
				unknown = append(unknown, id)
			}
		}
		if len(unknown) > 0 {
			return nil, status.Errorf(codes.InvalidArgument, "%s: container request %d: unknown device IDs %s (not advertised by carve now)", s.resource, i, strings.Join(unknown, ", "))
		}
		if len(ids) > 1 && (opts.FailRequestsGreaterThanOne && shared || anyFailsMany(known, ids)) {
			return nil, status.Errorf(codes.InvalidArgument, "%s: container request %d asks for %d devices of a shared (time-sliced) resource; at most 1 is allowed (failRequestsGreaterThanOne): %s", s.resource, i, len(ids), strings.Join(ids, ", "))
		}
		uuids, err := timeslice.Fold(ids)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "%s: container request %d: %v", s.resource, i, err)
		}
		car := &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{VisibleDevicesEnv: strings.Join(uuids, ",")},
		}
		if opts.CDI {
			car.CdiDevices = make([]*pluginapi.CDIDevice, len(uuids))
			for k, u := range uuids {
				car.CdiDevices[k] = &pluginapi.CDIDevice{Name: opts.CDIKind + "=" + u}
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, car)
	}
	return resp, nil
}
