//go:build cgo

package nvml

import (
	"fmt"
	"math"
	"os"
	"sync"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/carve-dev/carve/partition"
)

// WatchXIDs registers the GPUs at indexes for critical XID events. A GPU
// that cannot be registered fails the whole call and frees the set.
func (l *library) WatchXIDs(indexes []int) (partition.EventSet, error) {
	release, err := l.enter(0, "watch XIDs")
	if err != nil {
		return nil, err
	}
	defer release()
	set, ret := l.lib.EventSetCreate()
	if ret != gonvml.SUCCESS {
		return nil, returnError(ret, "watch XIDs: create event set")
	}
	es := &eventSet{l: l, gen: l.gen, set: set}
	for _, i := range indexes {
		h, ret := l.lib.DeviceGetHandleByIndex(i)
		if ret == gonvml.SUCCESS {
			var uuid string
			if uuid, ret = h.GetUUID(); ret == gonvml.SUCCESS {
				es.devices = append(es.devices, watchedDevice{dev: h, uuid: uuid})
				ret = h.RegisterEvents(gonvml.EventTypeXidCriticalError, set)
			}
		}
		if ret != gonvml.SUCCESS {
			_ = set.Free()
			return nil, returnError(ret, "watch XIDs: GPU %d", i)
		}
	}
	return es, nil
}

// eventSet implements partition.EventSet over a go-nvml event set. Its
// handles belong to the NVML session (gen) it was made in.
type eventSet struct {
	l       *library
	gen     uint64
	set     gonvml.EventSet
	devices []watchedDevice

	mu     sync.Mutex // one Wait or Close at a time
	closed bool
}

// watchedDevice is a registered GPU and its UUID, read once at
// registration so events name their GPU without another NVML call.
type watchedDevice struct {
	dev  gonvml.Device
	uuid string
}

// noInstance is what NVML reports as the GPU or compute instance ID of an
// event that hit the whole GPU.
const noInstance = math.MaxUint32

// Wait waits for the next XID event. It holds NVML open while it waits, so
// a Shutdown waits for it.
func (s *eventSet) Wait(timeout time.Duration) (partition.XIDEvent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return partition.XIDEvent{}, fmt.Errorf("wait for XID events: %w", os.ErrClosed)
	}
	release, err := s.l.enter(s.gen, "wait for XID events")
	if err != nil {
		return partition.XIDEvent{}, err
	}
	defer release()
	ms := min(max(timeout.Milliseconds(), 0), math.MaxUint32)
	ev, ret := s.set.Wait(uint32(ms))
	if ret != gonvml.SUCCESS {
		return partition.XIDEvent{}, returnError(ret, "wait for XID events")
	}
	x := partition.XIDEvent{XID: ev.EventData, GIID: instanceID(ev.GpuInstanceId), CIID: instanceID(ev.ComputeInstanceId), Time: time.Now()}
	for _, d := range s.devices {
		if d.dev == ev.Device {
			x.UUID = d.uuid
			break
		}
	}
	if x.UUID == "" && ev.Device != nil {
		uuid, ret := ev.Device.GetUUID()
		if ret != gonvml.SUCCESS {
			return x, returnError(ret, "XID %d: UUID of the GPU", ev.EventData)
		}
		x.UUID = uuid
	}
	return x, nil
}

// instanceID turns an event's GPU or compute instance ID into the
// partition.XIDEvent form: -1 for the whole GPU.
func instanceID(id uint32) int {
	if id == noInstance {
		return -1
	}
	return int(id)
}

// Close frees the event set; closing twice is harmless.
func (s *eventSet) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	release, err := s.l.enter(s.gen, "close XID event set")
	if err != nil {
		return err
	}
	defer release()
	s.closed = true
	if ret := s.set.Free(); ret != gonvml.SUCCESS {
		return returnError(ret, "close XID event set")
	}
	return nil
}

var _ partition.EventSet = (*eventSet)(nil)
