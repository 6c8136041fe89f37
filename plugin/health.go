package plugin

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/xidpolicy"
)

// healthLoop watches XID events until ctx ends. NVML errors are logged and
// the watch is set up again after an exponential backoff.
func (m *Manager) healthLoop(ctx context.Context) {
	h := m.opts.Health
	backoff := h.MinBackoff
	for ctx.Err() == nil {
		worked, err := m.watchXIDs(ctx)
		if ctx.Err() != nil {
			return
		}
		if worked {
			backoff = h.MinBackoff
		}
		if errors.Is(err, partition.ErrReleased) {
			m.log.Info("XID health watch paused: the GPU driver is being replaced", "retryIn", backoff)
		} else {
			m.log.Error("XID health watch failed; retrying", "err", err, "backoff", backoff)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, h.MaxBackoff)
	}
}

// watchXIDs sets up an event set for every GPU and handles its events until
// ctx ends (nil error) or NVML fails. worked says an event set was set up
// and waited on successfully at least once.
func (m *Manager) watchXIDs(ctx context.Context) (worked bool, err error) {
	n, err := m.opts.NVML.DeviceCount()
	if err != nil {
		return false, fmt.Errorf("count GPUs: %w", err)
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	es, err := m.opts.NVML.WatchXIDs(idx)
	if err != nil {
		return false, fmt.Errorf("watch XIDs of GPUs %v: %w", idx, err)
	}
	defer func() {
		if cerr := es.Close(); cerr != nil {
			m.log.Warn("close XID event set", "err", cerr)
		}
	}()
	for {
		if ctx.Err() != nil {
			return worked, nil
		}
		wait := m.recover(m.opts.Health.Now())
		ev, err := es.Wait(wait)
		switch {
		case errors.Is(err, partition.ErrTimeout):
			worked = true
		case err != nil:
			return worked, fmt.Errorf("wait for XID events: %w", err)
		default:
			worked = true
			m.handleXID(ev)
		}
	}
}

// handleXID classifies an XID by the policy and marks the devices it hit
// unhealthy, unless it is ignored.
func (m *Manager) handleXID(ev partition.XIDEvent) {
	class := m.opts.Health.Policy.Classify(ev.XID)
	if class == xidpolicy.Ignored {
		m.metrics.xids.WithLabelValues("false").Inc()
		m.log.Info("ignoring XID (the XID policy ignores it)", "gpu", ev.UUID, "xid", ev.XID, "gi", ev.GIID, "ci", ev.CIID)
		return
	}
	m.metrics.xids.WithLabelValues("true").Inc()
	targets := []string{ev.UUID}
	if ev.GIID >= 0 {
		migs, err := m.migUUIDs(ev.UUID, ev.GIID, ev.CIID)
		if err != nil || len(migs) == 0 {
			m.log.Warn("cannot resolve the MIG device of an XID; marking the whole GPU unhealthy",
				"gpu", ev.UUID, "xid", ev.XID, "gi", ev.GIID, "ci", ev.CIID, "err", err)
		} else {
			targets = migs
		}
	}
	m.log.Warn(class.String()+" XID; devices unhealthy", "gpu", ev.UUID, "xid", ev.XID, "gi", ev.GIID, "ci", ev.CIID, "devices", targets)
	now := m.opts.Health.Now()
	m.mu.Lock()
	newCritical := false
	for _, u := range targets {
		old, was := m.sick[u]
		c := class
		if was && old.class == xidpolicy.Critical {
			c = xidpolicy.Critical // a recoverable XID does not lift a critical one
		}
		newCritical = newCritical || (c == xidpolicy.Critical && (!was || old.class != xidpolicy.Critical))
		m.sick[u] = sickness{at: now, xid: ev.XID, gpu: ev.UUID, class: c}
	}
	m.refreshLocked()
	if newCritical {
		m.saveHealthLocked()
	}
	m.mu.Unlock()
}

// GPUReset makes every device of the GPU with the given UUID healthy
// again: a GPU reset clears what XIDs, critical ones too, did to it. The
// agent calls it after its own reset of the GPU succeeded.
func (m *Manager) GPUReset(gpuUUID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var healed []string
	critical := false
	for u, s := range m.sick {
		if s.gpu == gpuUUID || u == gpuUUID {
			healed = append(healed, u)
			critical = critical || s.class == xidpolicy.Critical
			delete(m.sick, u)
		}
	}
	if len(healed) == 0 {
		return
	}
	m.log.Info("GPU reset; its devices are healthy again", "gpu", gpuUUID, "devices", healed)
	m.refreshLocked()
	if critical {
		m.saveHealthLocked()
	}
}

// migUUIDs finds the MIG device UUIDs of GPU instance gi (compute instance
// ci, or all of them when ci < 0) on the GPU with the given UUID.
func (m *Manager) migUUIDs(gpuUUID string, gi, ci int) ([]string, error) {
	n, err := m.opts.NVML.DeviceCount()
	if err != nil {
		return nil, fmt.Errorf("count GPUs: %w", err)
	}
	for i := range n {
		d, err := m.opts.NVML.Device(i)
		if err != nil {
			return nil, fmt.Errorf("GPU %d: %w", i, err)
		}
		u, err := d.UUID()
		if err != nil {
			return nil, fmt.Errorf("GPU %d UUID: %w", i, err)
		}
		if u != gpuUUID {
			continue
		}
		cis, err := d.ComputeInstances(gi)
		if err != nil {
			return nil, fmt.Errorf("GPU %d compute instances of GI %d: %w", i, gi, err)
		}
		var out []string
		for _, c := range cis {
			if ci < 0 || c.ID == ci {
				out = append(out, c.UUID)
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("no GPU with UUID %s", gpuUUID)
}

// recover turns devices healthy whose last recoverable XID is at least
// the quiet period old, and returns how long the next wait for events may
// be. Devices a critical XID hit stay unhealthy.
func (m *Manager) recover(now time.Time) time.Duration {
	quiet := m.opts.Health.Policy.Quiet
	wait := m.opts.Health.Poll
	m.mu.Lock()
	defer m.mu.Unlock()
	healed := false
	for u, s := range m.sick {
		if s.class != xidpolicy.Recoverable {
			continue
		}
		left := quiet - now.Sub(s.at)
		if left <= 0 {
			delete(m.sick, u)
			healed = true
			m.log.Info("device healthy again after quiet period", "device", u, "lastXID", strconv.FormatUint(s.xid, 10), "quiet", quiet)
			continue
		}
		wait = min(wait, left)
	}
	if healed {
		m.refreshLocked()
	}
	return max(wait, time.Millisecond)
}
