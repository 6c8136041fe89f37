package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// DefaultLockPath is the machine-wide lock every cluster holds while it runs.
//
// The kubelet serves its device-plugin registration socket from the fixed
// directory /var/lib/kubelet/device-plugins, whatever its --root-dir says, and
// empties that directory when it starts. Two kubelets on one machine would
// therefore destroy each other's registrations, so clusters started by this
// package run one at a time: Start blocks until the lock is free (or its
// context ends). The lock file also records who holds it, so a later Start can
// clean up after a holder that died without stopping its cluster.
const DefaultLockPath = "/var/lib/kubelet/carve-cluster.lock"

// lockRecord is what the holder of the machine lock writes into the lock
// file. It names everything the holder's cluster may leave behind.
type lockRecord struct {
	PID        int       `json:"pid"`
	PIDStart   uint64    `json:"pidStart"`
	Dir        string    `json:"dir"`
	Kubeconfig string    `json:"kubeconfig"`
	CgroupRoot string    `json:"cgroupRoot"`
	Containerd string    `json:"containerdSocket"`
	NodeName   string    `json:"nodeName"`
	Owner      string    `json:"owner"`
	Started    time.Time `json:"started"`
	// Components lists the component processes as pid and start time.
	Components []lockedProcess `json:"components,omitempty"`
}

// lockedProcess identifies one process across pid reuse.
type lockedProcess struct {
	Name  string `json:"name"`
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// machineLock is a held flock on the lock file.
type machineLock struct {
	path string
	f    *os.File
}

// acquireLock blocks until it holds an exclusive flock on path or ctx ends.
// While waiting it reports the current holder once through logf. It returns
// the record left by the previous holder (zero when none).
func acquireLock(ctx context.Context, path string, logf func(string, ...any)) (*machineLock, lockRecord, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, lockRecord{}, fmt.Errorf("create lock directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, lockRecord{}, fmt.Errorf("open lock %s: %w", path, err)
	}
	reported := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			_ = f.Close()
			return nil, lockRecord{}, fmt.Errorf("lock %s: %w", path, err)
		}
		holder, _ := readLockRecord(path)
		if !reported {
			logf("waiting for the machine lock %s, held by %s", path, holder)
			reported = true
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, lockRecord{}, fmt.Errorf("waiting for the machine lock %s (held by %s): %w", path, holder, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
	prev, err := decodeLockRecord(f)
	if err != nil {
		logf("ignoring unreadable lock record in %s: %v", path, err)
		prev = lockRecord{}
	}
	return &machineLock{path: path, f: f}, prev, nil
}

// write replaces the lock file's record.
func (l *machineLock) write(rec lockRecord) error {
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return fmt.Errorf("encode lock record: %w", err)
	}
	if err := l.f.Truncate(0); err != nil {
		return fmt.Errorf("truncate lock %s: %w", l.path, err)
	}
	if _, err := l.f.WriteAt(append(data, '\n'), 0); err != nil {
		return fmt.Errorf("write lock %s: %w", l.path, err)
	}
	return nil
}

// release clears the record (the cluster is gone) and drops the lock.
func (l *machineLock) release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Truncate(0)
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.f = nil
	if err != nil {
		return fmt.Errorf("release lock %s: %w", l.path, err)
	}
	return nil
}

// readLockRecord reads the record in the lock file without taking the lock.
func readLockRecord(path string) (lockRecord, error) {
	f, err := os.Open(path)
	if err != nil {
		return lockRecord{}, fmt.Errorf("open lock %s: %w", path, err)
	}
	defer f.Close()
	return decodeLockRecord(f)
}

func decodeLockRecord(r io.ReaderAt) (lockRecord, error) {
	data, err := io.ReadAll(io.NewSectionReader(r, 0, 1<<20))
	if err != nil {
		return lockRecord{}, fmt.Errorf("read lock record: %w", err)
	}
	var rec lockRecord
	if len(data) == 0 {
		return rec, nil
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		return lockRecord{}, fmt.Errorf("decode lock record: %w", err)
	}
	return rec, nil
}

// String describes the holder for humans.
func (r lockRecord) String() string {
	if r.PID == 0 {
		return "an unknown process"
	}
	return fmt.Sprintf("pid %d, %s (cluster %q in %s, since %s)", r.PID, r.Owner, r.NodeName, r.Dir, r.Started.Format(time.RFC3339))
}

// holderAlive reports whether the process that wrote the record still runs.
func (r lockRecord) holderAlive() bool {
	return sameProcess(r.PID, r.PIDStart)
}

// Info describes the cluster recorded in the machine lock: the one running
// now, or one whose owner died without stopping it.
type Info struct {
	// PID is the process that started the cluster and holds the lock.
	PID int
	// Running is true while that process lives.
	Running bool
	// Owner is the program that started the cluster.
	Owner      string
	NodeName   string
	Dir        string
	Kubeconfig string
	Started    time.Time
}

// Current returns the cluster recorded in the lock at lockPath (empty means
// DefaultLockPath), or ok=false when none is.
func Current(lockPath string) (info Info, ok bool, err error) {
	if lockPath == "" {
		lockPath = DefaultLockPath
	}
	rec, err := readLockRecord(lockPath)
	if errors.Is(err, os.ErrNotExist) {
		return Info{}, false, nil
	}
	if err != nil {
		return Info{}, false, err
	}
	if rec.PID == 0 && rec.Dir == "" {
		return Info{}, false, nil
	}
	return Info{
		PID:        rec.PID,
		Running:    rec.holderAlive(),
		Owner:      rec.Owner,
		NodeName:   rec.NodeName,
		Dir:        rec.Dir,
		Kubeconfig: rec.Kubeconfig,
		Started:    rec.Started,
	}, true, nil
}

// CleanupStale waits for the machine lock at lockPath (empty means
// DefaultLockPath), removes whatever a cluster whose owner died left behind
// (processes, pod processes, mounts, its directory), and releases the lock.
func CleanupStale(ctx context.Context, lockPath string, log io.Writer) error {
	if lockPath == "" {
		lockPath = DefaultLockPath
	}
	logf := func(format string, args ...any) { fmt.Fprintf(log, format+"\n", args...) }
	l, prev, err := acquireLock(ctx, lockPath, logf)
	if err != nil {
		return err
	}
	var cerr error
	if prev.Dir != "" || len(prev.Components) > 0 {
		logf("cleaning up after %s", prev)
		cerr = cleanupRecord(prev)
	}
	return errors.Join(cerr, l.release())
}
