package allocate

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// kubelet is the Registration server of a device-plugin directory. Like
// the kubelet, it dials every plugin that registers back, asks for its
// options and keeps a ListAndWatch stream open (draining it), so that both
// servers measured have the same client state.
type kubelet struct {
	pluginapi.UnimplementedRegistrationServer
	dir    string
	srv    *grpc.Server
	ctx    context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	conns []*grpc.ClientConn
	// endpoints are the endpoints registered, in order.
	endpoints []string
}

// startKubelet serves the Registration API on dir/kubelet.sock.
func startKubelet(dir string) (*kubelet, error) {
	sock := filepath.Join(dir, "kubelet.sock")
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "unix", sock)
	if err != nil {
		return nil, fmt.Errorf("kubelet stand-in: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	k := &kubelet{dir: dir, srv: grpc.NewServer(), ctx: ctx, cancel: cancel}
	pluginapi.RegisterRegistrationServer(k.srv, k)
	go func() { _ = k.srv.Serve(ln) }() // returns when stop closes ln
	return k, nil
}

// socket is the path plugins register at.
func (k *kubelet) socket() string { return filepath.Join(k.dir, "kubelet.sock") }

// Register accepts a plugin of the current API version, dials it back and
// opens its ListAndWatch stream.
func (k *kubelet) Register(ctx context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	if req.GetVersion() != pluginapi.Version {
		return nil, fmt.Errorf("unsupported device-plugin API version %q", req.GetVersion())
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(k.dir, req.GetEndpoint()), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial back %s: %w", req.GetEndpoint(), err)
	}
	client := pluginapi.NewDevicePluginClient(conn)
	if _, err := client.GetDevicePluginOptions(ctx, &pluginapi.Empty{}); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("options of %s: %w", req.GetEndpoint(), err)
	}
	stream, err := client.ListAndWatch(k.ctx, &pluginapi.Empty{})
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("ListAndWatch %s: %w", req.GetEndpoint(), err)
	}
	go func() {
		for {
			if _, err := stream.Recv(); err != nil {
				return
			}
		}
	}()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.conns = append(k.conns, conn)
	k.endpoints = append(k.endpoints, req.GetEndpoint())
	return &pluginapi.Empty{}, nil
}

// registered returns the endpoints registered so far.
func (k *kubelet) registered() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.endpoints...)
}

// stop ends the streams and the server.
func (k *kubelet) stop() error {
	k.cancel()
	k.srv.Stop()
	k.mu.Lock()
	defer k.mu.Unlock()
	var errs []error
	for _, c := range k.conns {
		errs = append(errs, c.Close())
	}
	k.conns = nil
	return errors.Join(errs...)
}
