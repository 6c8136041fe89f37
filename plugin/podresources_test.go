package plugin

import (
	"context"
	"net"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// stubPodResources serves List with a fixed answer, or hangs until the
// caller gives up.
type stubPodResources struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
	resp *podresourcesapi.ListPodResourcesResponse
	// hang, when not nil, makes List wait for it to close.
	hang chan struct{}
}

func (s *stubPodResources) List(_ context.Context, _ *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	if s.hang != nil {
		<-s.hang
		return nil, status.Error(codes.Aborted, "released")
	}
	return s.resp, nil
}

func startStubPodResources(t *testing.T, stub *stubPodResources) string {
	t.Helper()
	sock := filepath.Join(shortTempDir(t), "kubelet.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	podresourcesapi.RegisterPodResourcesListerServer(srv, stub)
	go func() { _ = srv.Serve(ln) }() // returns when Stop closes ln
	t.Cleanup(srv.Stop)
	return sock
}

func ctrDevices(resource string, ids ...string) *podresourcesapi.ContainerDevices {
	return &podresourcesapi.ContainerDevices{ResourceName: resource, DeviceIds: ids}
}

func TestPodResourcesInUse(t *testing.T) {
	tests := []struct {
		name      string
		pods      []*podresourcesapi.PodResources
		want      []Assignment
		wantUUIDs []string
		errHas    string
	}{
		{
			name: "assignments",
			pods: []*podresourcesapi.PodResources{
				{Namespace: "ml", Name: "train", Containers: []*podresourcesapi.ContainerResources{
					{Name: "main", Devices: []*podresourcesapi.ContainerDevices{
						ctrDevices("nvidia.com/gpu", "GPU-0", "GPU-3"),
						ctrDevices("example.com/fpga", "fpga-1"),
					}},
					{Name: "side", Devices: []*podresourcesapi.ContainerDevices{
						ctrDevices("nvidia.com/gpu.shared", "GPU-1::0", "GPU-1::3"),
						ctrDevices("nvidia.com/mig-1g.10gb", "MIG-2-1::1"),
					}},
				}},
				{Namespace: "default", Name: "web", Containers: []*podresourcesapi.ContainerResources{
					{Name: "c", Devices: []*podresourcesapi.ContainerDevices{
						ctrDevices("nvidia.com/gpu.shared", "GPU-1::1"),
						ctrDevices("nvidia.com/gpu.shared", "GPU-4::0"),
					}},
					{Name: "no-gpu"},
				}},
				{Namespace: "default", Name: "cpu-only"},
			},
			want: []Assignment{
				{Namespace: "default", Pod: "web", Container: "c", Resource: "nvidia.com/gpu.shared", DeviceIDs: []string{"GPU-1::1", "GPU-4::0"}, UUIDs: []string{"GPU-1", "GPU-4"}},
				{Namespace: "ml", Pod: "train", Container: "main", Resource: "nvidia.com/gpu", DeviceIDs: []string{"GPU-0", "GPU-3"}, UUIDs: []string{"GPU-0", "GPU-3"}},
				{Namespace: "ml", Pod: "train", Container: "side", Resource: "nvidia.com/gpu.shared", DeviceIDs: []string{"GPU-1::0", "GPU-1::3"}, UUIDs: []string{"GPU-1"}},
				{Namespace: "ml", Pod: "train", Container: "side", Resource: "nvidia.com/mig-1g.10gb", DeviceIDs: []string{"MIG-2-1::1"}, UUIDs: []string{"MIG-2-1"}},
			},
			wantUUIDs: []string{"GPU-0", "GPU-1", "GPU-3", "GPU-4", "MIG-2-1"},
		},
		{name: "nothing assigned", pods: nil, want: []Assignment{}, wantUUIDs: []string{}},
		{
			name: "bad device ID",
			pods: []*podresourcesapi.PodResources{{Namespace: "ns", Name: "p", Containers: []*podresourcesapi.ContainerResources{
				{Name: "c", Devices: []*podresourcesapi.ContainerDevices{ctrDevices("nvidia.com/gpu", "::3")}},
			}}},
			errHas: "ns/p container c",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sock := startStubPodResources(t, &stubPodResources{resp: &podresourcesapi.ListPodResourcesResponse{PodResources: tt.pods}})
			got, err := NewPodResourcesClient(sock, 5*time.Second).InUse(context.Background())
			if tt.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errHas) {
					t.Fatalf("error %v, want one mentioning %q", err, tt.errHas)
				}
				return
			}
			if err != nil {
				t.Fatalf("InUse: %v", err)
			}
			if !reflect.DeepEqual(got.Assignments, tt.want) {
				t.Errorf("assignments\n got %+v\nwant %+v", got.Assignments, tt.want)
			}
			if !reflect.DeepEqual(got.UUIDs, tt.wantUUIDs) {
				t.Errorf("UUIDs %v, want %v", got.UUIDs, tt.wantUUIDs)
			}
			for _, u := range tt.wantUUIDs {
				if !got.Holds(u) {
					t.Errorf("Holds(%s) = false", u)
				}
			}
			if got.Holds("GPU-2") {
				t.Error("Holds(GPU-2) = true for a free GPU")
			}
		})
	}
}

func TestPodResourcesErrors(t *testing.T) {
	release := make(chan struct{})
	hanging := startStubPodResources(t, &stubPodResources{hang: release})
	t.Cleanup(func() { close(release) })
	missing := filepath.Join(shortTempDir(t), "absent.sock")
	tests := []struct {
		name   string
		socket string
		code   codes.Code
	}{
		{"no kubelet", missing, codes.Unavailable},
		{"kubelet does not answer", hanging, codes.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewPodResourcesClient(tt.socket, 200*time.Millisecond).InUse(context.Background())
			if err == nil {
				t.Fatal("InUse succeeded")
			}
			if !strings.Contains(err.Error(), tt.socket) {
				t.Errorf("error %q does not name the socket", err)
			}
			if got := status.Code(err); got != tt.code {
				t.Errorf("code %v, want %v (%v)", got, tt.code, err)
			}
		})
	}
}

func TestPodResourcesDefaults(t *testing.T) {
	c := NewPodResourcesClient("", 0)
	if c.socket != DefaultPodResourcesSocket || c.timeout != DefaultPodResourcesTimeout {
		t.Errorf("defaults %q %v", c.socket, c.timeout)
	}
}
