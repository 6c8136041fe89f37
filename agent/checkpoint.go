package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/carve-dev/carve/partition"
)

// intentFile is the checkpoint's file name inside the state directory.
const intentFile = "intent.json"

// intentVersion is the format version of the checkpoint file.
const intentVersion = 1

// Intent is the checkpoint of an apply: what the agent set out to do and
// how far it got. It is written before the first op and after each op, so
// that an agent that dies part-way knows on restart that an apply was
// interrupted, and of what. The restarted agent re-plans from the GPUs as
// they are (the planner keeps what was made and repairs half-made
// instances), so the checkpoint never drives NVML calls by itself.
type Intent struct {
	// Version is the file format version.
	Version int `json:"version"`
	// Profile and ProfileHash name the target.
	Profile     string `json:"profile"`
	ProfileHash string `json:"profileHash"`
	// Started is when the apply began.
	Started time.Time `json:"started"`
	// Plan is the plan being applied.
	Plan partition.NodePlan `json:"plan"`
	// Done counts, per GPU index, the ops of its plan that succeeded.
	Done map[int]int `json:"done"`
}

// OpsDone returns the number of ops done over all GPUs.
func (in Intent) OpsDone() int {
	n := 0
	for _, d := range in.Done {
		n += d
	}
	return n
}

// Checkpoints keeps the Intent in a directory (the agent's --state-dir).
type Checkpoints struct {
	// Dir is the state directory; it is created when missing.
	Dir string
}

func (c *Checkpoints) path() string { return filepath.Join(c.Dir, intentFile) }

// Load returns the checkpoint, or nil when there is none.
func (c *Checkpoints) Load() (*Intent, error) {
	data, err := os.ReadFile(c.path())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load checkpoint: %w", err)
	}
	var in Intent
	if err := json.Unmarshal(data, &in); err != nil {
		return nil, fmt.Errorf("load checkpoint %s: %w", c.path(), err)
	}
	if in.Version != intentVersion {
		return nil, fmt.Errorf("load checkpoint %s: format version %d, want %d", c.path(), in.Version, intentVersion)
	}
	return &in, nil
}

// Save replaces the checkpoint atomically: it writes a temporary file in
// the directory, syncs it, renames it over the checkpoint and syncs the
// directory, so a crash leaves either the old or the new checkpoint.
func (c *Checkpoints) Save(in Intent) error {
	in.Version = intentVersion
	data, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	tmp, err := os.CreateTemp(c.Dir, intentFile+".tmp-*")
	if err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("save checkpoint: write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("save checkpoint: sync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("save checkpoint: close %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), c.path()); err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	return syncDir(c.Dir)
}

// Clear removes the checkpoint: the apply finished (or was given up).
func (c *Checkpoints) Clear() error {
	if err := os.Remove(c.path()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("clear checkpoint: %w", err)
	}
	return syncDir(c.Dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sync state dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync state dir %s: %w", dir, err)
	}
	return nil
}
