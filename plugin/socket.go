package plugin

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// socketBase returns the name every socket of a resource's servers starts
// with: "carve-" + the resource name with every character other than
// letters, digits, '.', '-' and '_' (the '/' in particular) written as '_'.
// nvidia.com/mig-1g.10gb gives carve-nvidia.com_mig-1g.10gb.
func socketBase(resource string) string {
	var b strings.Builder
	b.WriteString("carve-")
	for _, r := range resource {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

// listenerSocketName is the socket file name of the n-th listener (from 0)
// of a resource in the Manager whose token is token:
// socketBase + "+" + token + "-" + n + ".sock", for example
// carve-nvidia.com_gpu+3f9a1c2e-0.sock. '+' never occurs in a socketBase,
// so no listener of one resource takes a name of another's.
//
// No two listeners share a path, across restarts of the server and of
// the agent: the kubelet keys device-plugin endpoints by socket path, and
// kubelet 1.37 handles a registration on a path it still holds an
// endpoint at (the previous listener's, whose end it has not noticed yet)
// by refusing it and dropping its record of the old client, after which
// it keeps that dead endpoint for good (see spent).
func listenerSocketName(resource, token string, n uint64) string {
	return fmt.Sprintf("%s+%s-%d.sock", socketBase(resource), token, n)
}

// newSocketToken returns the random token that sets a Manager's socket
// names apart from those of every earlier Manager (an agent restart).
func newSocketToken() (string, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("socket name token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// unreached reports whether a failed Register cannot have reached the
// kubelet's handler: the kubelet socket file is missing, the context ended
// before it was sent, or no connection was made (Unavailable, which is also what a kubelet that died
// meanwhile, taking its endpoints with it, gives). Such a registration is
// retried on the same path; any other failure, a timeout included, may
// have left the kubelet with a record of the path, so the path is spent.
func unreached(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, errNotSent) || status.Code(err) == codes.Unavailable
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
