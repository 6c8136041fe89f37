package plugin

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
)

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
