package plugin

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc/status"
)

// errEndpointHeld marks a registration the kubelet refused because it
// still holds an endpoint at the same socket path.
var errEndpointHeld = errors.New("the kubelet still holds an endpoint at this socket path")

// held reports whether the kubelet refused a registration because it
// holds an endpoint at the same path already ("device plugin already
// connected"). The kubelet keeps such an endpoint until the stream of the
// listener that had the path ends and it notices; if a registration on the
// same path comes in between, kubelet 1.37 drops its record of the old
// client and keeps the endpoint for good, refusing that path from then on.
func held(err error) bool {
	return err != nil && strings.Contains(status.Convert(err).Message(), "device plugin already connected")
}

// listenerSocketName is the socket file name of the n-th listener (from 0)
// of a resource in this process: SocketName for the first, then
// SocketName with "+<n>" before ".sock". '+' never occurs in a SocketName,
// so no listener of one resource takes a name of another's.
func listenerSocketName(resource string, n uint64) string {
	base := SocketName(resource)
	if n == 0 {
		return base
	}
	return fmt.Sprintf("%s+%d.sock", strings.TrimSuffix(base, ".sock"), n)
}

// answers reports whether a process accepts connections on the unix socket
// at path, within timeout.
func answers(path string, timeout time.Duration) bool {
	// No caller context reaches here; the dial is bounded by the timeout.
	conn, err := net.DialTimeout("unix", path, timeout) //nolint:noctx // see above
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// SocketMode is the mode of the device-plugin sockets: only their owner
// (root, as the kubelet is) may connect, since Allocate hands out GPUs.
const SocketMode os.FileMode = 0o600

// listenSocket listens on a unix socket at path whose file has SocketMode
// from the moment it appears there, whatever the process's umask: the
// socket is bound in a private directory (mode 0700) made next to path,
// given SocketMode there, and renamed into place, so that nobody can
// connect through a wider mode in between. The caller has made path free
// (claimSocket); a file that appeared there since is replaced. Closing the
// listener leaves the file: the server removes it, and only while it is
// still its own.
func listenSocket(path string) (*net.UnixListener, error) {
	dir, err := os.MkdirTemp(filepath.Dir(path), ".carve-")
	if err != nil {
		return nil, fmt.Errorf("listen on %s: private directory: %w", path, err)
	}
	defer func() { _ = os.RemoveAll(dir) }() // empty once the socket is renamed
	// A short name: the path is no longer than the socket's own, within
	// the 108 bytes a unix socket address holds.
	tmp := filepath.Join(dir, "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, SocketMode); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	return ln, nil
}
