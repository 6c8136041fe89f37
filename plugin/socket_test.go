package plugin

import (
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/timeslice"
)

// withUmask runs the rest of the test with the process's umask set to
// mask (not in parallel with other tests: the umask is the process's).
func withUmask(t *testing.T, mask int) {
	t.Helper()
	old := syscall.Umask(mask)
	t.Cleanup(func() { syscall.Umask(old) })
}

// TestSocketMode: every resource's socket is a socket of mode 0600, also
// under a umask that lets anyone write (0), also after the server restarts
// on a fresh socket; the kubelet (the same user here) registers each; and
// nothing of the private directory the socket is made in stays behind.
func TestSocketMode(t *testing.T) {
	withUmask(t, 0)
	e := newEnv(t, Options{RetryInterval: time.Hour}, true)
	resources := []string{carvev1.GPUResource, migRes}
	e.update(t, timeslice.Resources{carvev1.GPUResource: wholeGPUs(0, 1), migRes: migDevs(2, "1g.10gb", 1, 7)})
	for _, name := range resources {
		e.kubelet.plugin(t, name, msgWait).next(t, msgWait)
		checkSocketMode(t, e.socket(name))
	}

	// The kubelet deletes the sockets on start; the server makes a new one.
	if err := os.Remove(e.socket(carvev1.GPUResource)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "re-registration", func() bool {
		return e.kubelet.registrations()[carvev1.GPUResource] == 2
	})
	checkSocketMode(t, e.socket(carvev1.GPUResource))

	entries, err := os.ReadDir(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{DefaultKubeletSocket: true, e.listener(carvev1.GPUResource, 1): true, e.listener(migRes, 0): true}
	for _, en := range entries {
		if !want[en.Name()] {
			t.Errorf("left in the device-plugin directory: %s", en.Name())
		}
	}
}

func checkSocketMode(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != SocketMode {
		t.Errorf("%s: mode %v, want a socket of mode %v", filepath.Base(path), fi.Mode(), SocketMode)
	}
}

// TestSocketNeverWider: while sockets are made over and over under umask
// 0, a watcher that stats the socket's path as fast as it can never sees
// it with a mode other than 0600 (and does see it: else it proves
// nothing). Binding at the path and then changing the mode would show
// srwxrwxrwx in between.
func TestSocketNeverWider(t *testing.T) {
	withUmask(t, 0)
	path := filepath.Join(shortTempDir(t), listenerSocketName(carvev1.GPUResource, "0badc0de", 0))
	var stop atomic.Bool
	seen, wider := 0, map[string]int{} // looks, and looks by wider mode
	var wg sync.WaitGroup
	wg.Go(func() {
		for !stop.Load() {
			fi, err := os.Lstat(path)
			if err != nil {
				continue
			}
			seen++
			if fi.Mode().Perm() != SocketMode {
				wider[fi.Mode().String()]++
			}
		}
	})
	for range 300 {
		ln, err := listenSocket(path)
		if err != nil {
			stop.Store(true)
			wg.Wait()
			t.Fatal(err)
		}
		ln.Close()
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if seen == 0 {
		t.Fatal("the watcher never saw the socket")
	}
	if len(wider) > 0 {
		t.Errorf("the socket's path showed modes other than %v, times each in %d looks: %v", SocketMode, seen, wider)
	}
}
