package dra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	drapbv1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/carve-dev/carve/kubeclient"
)

// carve serves the kubelet's side of DRA itself (plugin registration and
// the DRAPlugin gRPC service, versions v1 and v1beta1) rather than through
// k8s.io/dynamic-resource-allocation's kubeletplugin: that library takes
// client-go's whole clientset, and linking it costs every agent, DRA or
// not, the memory of every API group's types (docs/benchmarks.md). What
// the library adds beyond these calls (publishing ResourceSlices, device
// metadata files, rolling-update sockets) carve does not use.

// ClaimRef names a claim the kubelet asks the driver to unprepare.
type ClaimRef struct {
	Namespace, Name string
	UID             types.UID
}

// PreparedDevices is the answer for one claim: its devices, or why it
// could not be prepared.
type PreparedDevices struct {
	Devices []KubeletDevice
	Err     error
}

// KubeletDevice is one prepared device as the kubelet is told of it.
type KubeletDevice struct {
	// Requests are the claim's requests the device satisfies.
	Requests []string
	// PoolName and DeviceName name the device in the ResourceSlice.
	PoolName, DeviceName string
	// CDIDeviceIDs are the CDI devices the container runtime injects.
	CDIDeviceIDs []string
	// ShareID sets a shared device's allocation apart; nil for others.
	ShareID *types.UID
}

// claimPreparer is what the kubelet server asks of the driver.
type claimPreparer interface {
	PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]PreparedDevices, error)
	UnprepareResourceClaims(ctx context.Context, claims []ClaimRef) (map[types.UID]error, error)
}

// kubeletServer is the DRAPlugin gRPC service over a claimPreparer.
type kubeletServer struct {
	drapbv1.UnsafeDRAPluginServer
	client kubeclient.Interface
	driver claimPreparer
}

var _ drapbv1.DRAPluginServer = (*kubeletServer)(nil)

// NodePrepareResources reads each claim from the API server (the kubelet
// sends only its name and UID) and prepares the allocated ones. A claim
// that cannot be read, is not allocated, or was replaced by another of the
// same name fails alone.
func (s *kubeletServer) NodePrepareResources(ctx context.Context, req *drapbv1.NodePrepareResourcesRequest) (*drapbv1.NodePrepareResourcesResponse, error) {
	resp := &drapbv1.NodePrepareResourcesResponse{Claims: map[string]*drapbv1.NodePrepareResourceResponse{}}
	var claims []*resourceapi.ResourceClaim
	for _, r := range req.GetClaims() {
		c, err := s.claim(ctx, r)
		if err != nil {
			resp.Claims[r.GetUid()] = &drapbv1.NodePrepareResourceResponse{Error: err.Error()}
			continue
		}
		claims = append(claims, c)
	}
	if len(claims) == 0 {
		return resp, nil
	}
	result, err := s.driver.PrepareResourceClaims(ctx, claims)
	if err != nil {
		return nil, fmt.Errorf("prepare resource claims: %w", err)
	}
	for uid, r := range result {
		out := &drapbv1.NodePrepareResourceResponse{Error: errorText(r.Err)}
		for _, d := range r.Devices {
			out.Devices = append(out.Devices, &drapbv1.Device{
				RequestNames: baseRequests(d.Requests), PoolName: d.PoolName, DeviceName: d.DeviceName,
				CdiDeviceIds: d.CDIDeviceIDs, ShareId: (*string)(d.ShareID),
			})
		}
		resp.Claims[string(uid)] = out
	}
	return resp, nil
}

// claim reads the claim the kubelet names and checks it is the one meant.
func (s *kubeletServer) claim(ctx context.Context, r *drapbv1.Claim) (*resourceapi.ResourceClaim, error) {
	c, err := s.client.ResourceClaims(r.GetNamespace()).Get(ctx, r.GetName(), metav1.GetOptions{})
	switch {
	case err != nil:
		return nil, fmt.Errorf("claim %s/%s: read: %w", r.GetNamespace(), r.GetName(), err)
	case string(c.UID) != r.GetUid():
		return nil, fmt.Errorf("claim %s/%s: replaced (UID %s, the kubelet asked for %s)", r.GetNamespace(), r.GetName(), c.UID, r.GetUid())
	case c.Status.Allocation == nil:
		return nil, fmt.Errorf("claim %s/%s: not allocated", r.GetNamespace(), r.GetName())
	}
	return c, nil
}

// NodeUnprepareResources unprepares each claim.
func (s *kubeletServer) NodeUnprepareResources(ctx context.Context, req *drapbv1.NodeUnprepareResourcesRequest) (*drapbv1.NodeUnprepareResourcesResponse, error) {
	refs := make([]ClaimRef, 0, len(req.GetClaims()))
	for _, c := range req.GetClaims() {
		refs = append(refs, ClaimRef{Namespace: c.GetNamespace(), Name: c.GetName(), UID: types.UID(c.GetUid())})
	}
	result, err := s.driver.UnprepareResourceClaims(ctx, refs)
	if err != nil {
		return nil, fmt.Errorf("unprepare resource claims: %w", err)
	}
	resp := &drapbv1.NodeUnprepareResourcesResponse{Claims: map[string]*drapbv1.NodeUnprepareResourceResponse{}}
	for uid, err := range result {
		resp.Claims[string(uid)] = &drapbv1.NodeUnprepareResourceResponse{Error: errorText(err)}
	}
	return resp, nil
}

// baseRequests drops the subrequest part ("req/sub" -> "req") of request
// names: the kubelet matches devices to the claim's top-level requests.
func baseRequests(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i], _, _ = strings.Cut(n, "/")
	}
	return out
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// registrar answers the kubelet's plugin watcher: which driver, where its
// DRA socket is, which services it speaks.
type registrar struct {
	registerapi.UnsafeRegistrationServer
	endpoint string
	services []string
	log      *slog.Logger
}

// GetInfo implements registerapi.RegistrationServer.
func (r *registrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{
		Type: registerapi.DRAPlugin, Name: DriverName, Endpoint: r.endpoint, SupportedVersions: r.services,
	}, nil
}

// NotifyRegistrationStatus implements registerapi.RegistrationServer.
func (r *registrar) NotifyRegistrationStatus(_ context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if !st.GetPluginRegistered() {
		r.log.Error("the kubelet refused the DRA driver's registration", "error", st.GetError())
		return nil, fmt.Errorf("registration refused: %s", st.GetError())
	}
	r.log.Info("registered with the kubelet", "driver", DriverName)
	return &registerapi.RegistrationStatusResponse{}, nil
}

// socketServer is a gRPC server on a unix socket that it removes on stop.
type socketServer struct {
	srv  *grpc.Server
	path string
	done chan error
}

// serveSocket listens on path (replacing a stale socket) and serves srv.
func serveSocket(ctx context.Context, srv *grpc.Server, path string) (*socketServer, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket: %w", err)
	}
	lis, err := (&net.ListenConfig{}).Listen(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	s := &socketServer{srv: srv, path: path, done: make(chan error, 1)}
	go func() { s.done <- srv.Serve(lis) }()
	return s, nil
}

// stop stops serving and removes the socket.
func (s *socketServer) stop() {
	s.srv.Stop()
	if err := <-s.done; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		slog.Default().Debug("gRPC server ended", "socket", s.path, "error", err)
	}
	_ = os.Remove(s.path)
}

// kubeletPlugin is the driver's two sockets: the DRA service in the
// plugin's data directory, then the registration in the kubelet's
// registry, which the kubelet's plugin watcher finds.
type kubeletPlugin struct {
	servers []*socketServer
	once    sync.Once
}

// startKubeletPlugin serves driver to the kubelet under the given
// directories. register adds more services (health) to the DRA server and
// returns their names for the registration.
func startKubeletPlugin(ctx context.Context, client kubeclient.Interface, driver claimPreparer, registry, data string,
	register func(*grpc.Server) []string, log *slog.Logger) (*kubeletPlugin, error) {
	draSrv := grpc.NewServer()
	ks := &kubeletServer{client: client, driver: driver}
	drapbv1.RegisterDRAPluginServer(draSrv, ks)
	drapbv1beta1.RegisterDRAPluginServer(draSrv, drapbv1beta1.V1ServerWrapper{DRAPluginServer: ks})
	services := []string{drapbv1.DRAPluginService, drapbv1beta1.DRAPluginService}
	if register != nil {
		services = append(services, register(draSrv)...)
	}
	endpoint := filepath.Join(data, "dra.sock")
	p := &kubeletPlugin{}
	s, err := serveSocket(ctx, draSrv, endpoint)
	if err != nil {
		return nil, fmt.Errorf("DRA service on %s: %w", endpoint, err)
	}
	p.servers = append(p.servers, s)
	regSrv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(regSrv, &registrar{endpoint: endpoint, services: services, log: log})
	regPath := filepath.Join(registry, DriverName+"-reg.sock")
	if s, err = serveSocket(ctx, regSrv, regPath); err != nil {
		p.stop()
		return nil, fmt.Errorf("registration on %s: %w", regPath, err)
	}
	p.servers = append(p.servers, s)
	return p, nil
}

// stop stops the registration first, so that the kubelet stops using the
// driver, then the DRA service.
func (p *kubeletPlugin) stop() {
	p.once.Do(func() {
		for _, s := range slices.Backward(p.servers) {
			s.stop()
		}
	})
}
