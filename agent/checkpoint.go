package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/internal/atomicfile"
)

// intentFile is the checkpoint's file name inside the state directory.
const intentFile = "intent.json"

// Checkpoints keeps the apply checkpoint (carvev1.Checkpoint) in a
// directory, the agent's --state-dir.
type Checkpoints struct {
	// Dir is the state directory; it is created when missing.
	Dir string
}

func (c *Checkpoints) path() string { return filepath.Join(c.Dir, intentFile) }

// Load returns the checkpoint, or nil when there is none.
func (c *Checkpoints) Load() (*carvev1.Checkpoint, error) {
	data, err := os.ReadFile(c.path())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load checkpoint: %w", err)
	}
	cp, err := carvev1.DecodeCheckpoint(data)
	if err != nil {
		return nil, fmt.Errorf("load checkpoint %s: %w", c.path(), err)
	}
	return &cp, nil
}

// Save replaces the checkpoint atomically: it writes a temporary file in
// the directory, syncs it, renames it over the checkpoint and syncs the
// directory, so a crash leaves either the old or the new checkpoint. So
// does a directory that cannot be written (read-only, full, a file in its
// place): the error then names the directory.
func (c *Checkpoints) Save(cp carvev1.Checkpoint) error {
	data, err := cp.Encode()
	if err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	if err := c.write(data); err != nil {
		return fmt.Errorf("save checkpoint in state directory %s: %w", c.Dir, err)
	}
	return nil
}

// write puts data in the checkpoint file, atomically.
func (c *Checkpoints) write(data []byte) error {
	return atomicfile.Write(c.path(), data, 0o600)
}

// Clear removes the checkpoint: the apply finished (or was given up).
func (c *Checkpoints) Clear() error {
	if err := os.Remove(c.path()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("clear checkpoint: %w", err)
	}
	return atomicfile.SyncDir(c.Dir)
}

// Probe checks that the state directory can take a checkpoint of size
// bytes: it creates the directory if need be, writes and syncs a file of
// that size there and removes it. A read-only, full or missing directory
// fails here, before an apply starts, instead of at its first checkpoint.
func (c *Checkpoints) Probe(size int) error {
	if err := c.probe(size); err != nil {
		return fmt.Errorf("state directory %s cannot take a checkpoint: %w", c.Dir, err)
	}
	return nil
}

func (c *Checkpoints) probe(size int) error {
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(c.Dir, intentFile+".probe-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(f.Name()) }()
	if _, err := f.Write(make([]byte, size)); err != nil {
		return errors.Join(fmt.Errorf("write %s: %w", f.Name(), err), f.Close())
	}
	if err := f.Sync(); err != nil {
		return errors.Join(fmt.Errorf("sync %s: %w", f.Name(), err), f.Close())
	}
	return f.Close()
}
