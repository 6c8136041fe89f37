package dra

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/testing/protocmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	drapbv1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/carve-dev/carve/kubeclient/clientset"
)

// recordingPreparer answers every claim with one device named after it,
// and records what it was asked.
type recordingPreparer struct {
	prepared   []string
	unprepared []ClaimRef
}

func (r *recordingPreparer) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]PreparedDevices, error) {
	out := map[types.UID]PreparedDevices{}
	for _, c := range claims {
		r.prepared = append(r.prepared, c.Name)
		out[c.UID] = PreparedDevices{Devices: []KubeletDevice{{
			Requests: []string{"gpu/small"}, PoolName: node, DeviceName: "dev-" + c.Name, CDIDeviceIDs: []string{"gpu.carve.dev/claim=" + string(c.UID)},
		}}}
	}
	return out, nil
}

func (r *recordingPreparer) UnprepareResourceClaims(_ context.Context, claims []ClaimRef) (map[types.UID]error, error) {
	r.unprepared = append(r.unprepared, claims...)
	out := map[types.UID]error{}
	for _, c := range claims {
		out[c.UID] = nil
		if c.Name == "broken" {
			out[c.UID] = errors.New("CDI spec: permission denied")
		}
	}
	return out, nil
}

func claimObj(name, uid string, allocated bool) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid)}}
	if allocated {
		c.Status.Allocation = &resourceapi.AllocationResult{}
	}
	return c
}

func dial(t *testing.T, path string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// TestKubeletPluginOverSockets registers and serves as the kubelet sees it,
// over real gRPC on unix sockets: the registration names the DRA socket and
// the services; a prepare reads each claim from the API server and fails
// alone a claim that is missing, replaced or not allocated; both API
// versions answer; stopping removes both sockets.
func TestKubeletPluginOverSockets(t *testing.T) {
	ctx := context.Background()
	registry, data := t.TempDir(), t.TempDir()
	cs := fake.NewClientset(claimObj("a", "uid-a", true), claimObj("b", "uid-b-new", true), claimObj("c", "uid-c", false))
	prep := &recordingPreparer{}
	p, err := startKubeletPlugin(ctx, clientset.Wrap(cs), prep, registry, data, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()

	info, err := registerapi.NewRegistrationClient(dial(t, filepath.Join(registry, DriverName+"-reg.sock"))).GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	wantInfo := &registerapi.PluginInfo{Type: registerapi.DRAPlugin, Name: DriverName, Endpoint: filepath.Join(data, "dra.sock"),
		SupportedVersions: []string{drapbv1.DRAPluginService, drapbv1beta1.DRAPluginService}}
	if diff := cmp.Diff(wantInfo, info, protocmp.Transform()); diff != "" {
		t.Errorf("GetInfo (-want +got):\n%s", diff)
	}

	conn := dial(t, info.GetEndpoint())
	req := &drapbv1.NodePrepareResourcesRequest{Claims: []*drapbv1.Claim{
		{Namespace: "ns", Name: "a", Uid: "uid-a"},
		{Namespace: "ns", Name: "b", Uid: "uid-b-old"},
		{Namespace: "ns", Name: "c", Uid: "uid-c"},
		{Namespace: "ns", Name: "gone", Uid: "uid-gone"},
	}}
	resp, err := drapbv1.NewDRAPluginClient(conn).NodePrepareResources(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for uid, r := range resp.GetClaims() {
		got[uid] = r.GetError()
		if uid == "uid-a" {
			var devs []KubeletDevice
			for _, d := range r.GetDevices() {
				devs = append(devs, KubeletDevice{Requests: d.GetRequestNames(), PoolName: d.GetPoolName(), DeviceName: d.GetDeviceName(), CDIDeviceIDs: d.GetCdiDeviceIds()})
			}
			// The subrequest ("gpu/small") is cut to its request.
			want := []KubeletDevice{{Requests: []string{"gpu"}, PoolName: node, DeviceName: "dev-a", CDIDeviceIDs: []string{"gpu.carve.dev/claim=uid-a"}}}
			if diff := cmp.Diff(want, devs); diff != "" {
				t.Errorf("devices of claim a (-want +got):\n%s", diff)
			}
		}
	}
	wantErr := map[string]string{
		"uid-a":     "",
		"uid-b-old": "claim ns/b: replaced (UID uid-b-new, the kubelet asked for uid-b-old)",
		"uid-c":     "claim ns/c: not allocated",
		"uid-gone":  `claim ns/gone: read: resourceclaims.resource.k8s.io "gone" not found`,
	}
	if diff := cmp.Diff(wantErr, got); diff != "" {
		t.Errorf("prepare errors (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a"}, prep.prepared); diff != "" {
		t.Errorf("claims passed to the driver (-want +got):\n%s", diff)
	}

	un, err := drapbv1beta1.NewDRAPluginClient(conn).NodeUnprepareResources(ctx, &drapbv1beta1.NodeUnprepareResourcesRequest{
		Claims: []*drapbv1beta1.Claim{{Namespace: "ns", Name: "a", Uid: "uid-a"}, {Namespace: "ns", Name: "broken", Uid: "uid-x"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	gotUn := map[string]string{}
	for uid, r := range un.GetClaims() {
		gotUn[uid] = r.GetError()
	}
	if diff := cmp.Diff(map[string]string{"uid-a": "", "uid-x": "CDI spec: permission denied"}, gotUn); diff != "" {
		t.Errorf("unprepare over v1beta1 (-want +got):\n%s", diff)
	}

	p.stop()
	for _, sock := range []string{filepath.Join(registry, DriverName+"-reg.sock"), info.GetEndpoint()} {
		if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after stop: %v, want it removed", sock, err)
		}
	}
}
