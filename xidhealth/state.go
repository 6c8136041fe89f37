package xidhealth

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/internal/atomicfile"
	"github.com/carve-dev/carve/xidpolicy"
)

// BootIDFile is where Linux gives the boot ID, new at every boot.
const BootIDFile = "/proc/sys/kernel/random/boot_id"

// maxHealthFile bounds the XID health file read at start.
const maxHealthFile = 1 << 20

// ReadBootID returns the node's boot ID (BootIDFile).
func ReadBootID() (string, error) {
	b, err := os.ReadFile(BootIDFile)
	if err != nil {
		return "", fmt.Errorf("read boot ID: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// load reads the boot ID and, with a StateFile, the devices critical
// XIDs made unhealthy before a restart of the agent: they stay unhealthy
// unless the node rebooted since (another boot ID). A file that cannot be
// read or decoded is an error: carve cannot tell which devices are
// unhealthy, and does not guess that none are.
func (t *Tracker) load() error {
	h := t.opts
	if h.Disabled || t.lib == nil {
		return nil
	}
	boot, err := h.BootID()
	if err != nil {
		return fmt.Errorf("XID health: %w", err)
	}
	t.bootID = boot
	if h.StateFile == "" {
		return nil
	}
	rec, err := ReadStateFile(h.StateFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("XID health: %w (remove the file to forget the devices it lists as unhealthy)", err)
	}
	if rec.BootID != boot {
		if len(rec.Devices) > 0 {
			t.log.Info("the node rebooted since critical XIDs made devices unhealthy; they are healthy again", "devices", len(rec.Devices))
		}
		t.saveLocked()
		return nil
	}
	for _, d := range rec.Devices {
		t.sick[d.UUID] = Sick{UUID: d.UUID, GPU: d.GPU, XID: d.XID, At: d.At, Class: xidpolicy.Critical}
	}
	if len(rec.Devices) > 0 {
		t.log.Warn("devices critical XIDs made unhealthy before the agent restarted stay unhealthy until their GPU is reset or the node reboots", "devices", len(rec.Devices))
	}
	return nil
}

// ReadStateFile reads and decodes the XID health file, at most
// maxHealthFile bytes.
func ReadStateFile(path string) (carvev1.XIDHealth, error) {
	f, err := os.Open(path) //nolint:gosec // the agent's own state file
	if err != nil {
		return carvev1.XIDHealth{}, err
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, maxHealthFile+1))
	if err != nil {
		return carvev1.XIDHealth{}, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxHealthFile {
		return carvev1.XIDHealth{}, fmt.Errorf("%s: larger than %d bytes", path, maxHealthFile)
	}
	rec, err := carvev1.DecodeXIDHealth(b)
	if err != nil {
		return carvev1.XIDHealth{}, fmt.Errorf("%s: %w", path, err)
	}
	return rec, nil
}

// saveLocked writes the devices critical XIDs keep unhealthy to the
// StateFile; t.mu is held (or the Tracker not yet shared). A failed write
// is logged: the devices stay unhealthy in this process either way.
func (t *Tracker) saveLocked() {
	path := t.opts.StateFile
	if path == "" {
		return
	}
	rec := carvev1.XIDHealth{BootID: t.bootID}
	for u, s := range t.sick {
		if s.Class == xidpolicy.Critical {
			rec.Devices = append(rec.Devices, carvev1.XIDUnhealthy{UUID: u, GPU: s.GPU, XID: s.XID, At: s.At.UTC()})
		}
	}
	slices.SortFunc(rec.Devices, func(a, b carvev1.XIDUnhealthy) int { return strings.Compare(a.UUID, b.UUID) })
	b, err := rec.Encode()
	if err == nil {
		err = atomicfile.Write(path, b, 0o600)
	}
	if err != nil {
		t.log.Error("cannot save the devices critical XIDs made unhealthy; a restarted agent would forget them", "file", path, "err", err)
	}
}
