//go:build cgo

package nvml

import (
	"fmt"
	"sync"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/carve-dev/carve/partition"
)

// options holds what Option sets (nocgo.go has the same, less the V2 reader).
type options struct {
	run          CommandRunner
	resetTimeout time.Duration
	// profileInfoV2 reads a GPU instance profile's version 2 info; nil:
	// none (see WithProfileInfoV2).
	profileInfoV2 profileInfoV2Func
}

// profileInfoV2Func reads version 2 of a GPU instance profile's info, which
// adds the profile's name. profile is one of gonvml.GPU_INSTANCE_PROFILE_*.
type profileInfoV2Func = func(dev gonvml.Device, profile int) (gonvml.GpuInstanceProfileInfo_v2, gonvml.Return)

// WithProfileInfoV2 makes GPUInstanceProfiles read each profile through
// read (version 2 of the profile info) and name the profile after the info's
// Name field ("MIG 1g.10gb" becomes "1g.10gb"). New uses go-nvml's
// GetGpuInstanceProfileInfoV(...).V2() when the driver has that call;
// NewFrom uses nothing unless told, because V2 on a mock device would
// call into the real library. Without it (or with read nil), names are
// built by partition.ProfileName. It exists only in builds with cgo.
func WithProfileInfoV2(read func(dev gonvml.Device, profile int) (gonvml.GpuInstanceProfileInfo_v2, gonvml.Return)) Option {
	return func(o *options) { o.profileInfoV2 = read }
}

// New returns the partition.NVML implementation over the system's NVML
// library (libnvidia-ml.so.1, through go-nvml). Without an NVIDIA driver
// its Init returns an error wrapping partition.ErrLibraryNotFound. Nothing
// is loaded before Init.
func New(opts ...Option) partition.NVML {
	l := newLib(gonvml.New(), opts)
	l.real = true
	return l
}

// NewFrom returns the partition.NVML implementation over any go-nvml
// Interface, such as the mocks of github.com/NVIDIA/go-nvml/pkg/nvml/mock.
// It exists only in builds with cgo.
func NewFrom(lib gonvml.Interface, opts ...Option) partition.NVML {
	return newLib(lib, opts)
}

// newLib returns the implementation over lib, with opts applied.
func newLib(lib gonvml.Interface, opts []Option) *library {
	return &library{lib: lib, opts: buildOptions(opts)}
}

// profileInfoVSymbol is the C symbol behind GetGpuInstanceProfileInfoV; old
// drivers lack it, and calling a missing symbol would crash.
const profileInfoVSymbol = "nvmlDeviceGetGpuInstanceProfileInfoV"

// library implements partition.NVML over go-nvml.
//
// NVML must not be called before Init or after the last Shutdown: go-nvml
// would call into a library that is not loaded. So every call takes mu for
// reading and checks refs; Init and Shutdown take it for writing. Handles
// carry the session (gen) they came from and fail once it has ended.
type library struct {
	lib  gonvml.Interface
	opts options
	// real marks the system library: V2 profile info is used where the
	// driver has it.
	real bool

	mu   sync.RWMutex
	refs int    // successful Inits not yet matched by a Shutdown
	gen  uint64 // counts sessions (refs going from 0 to 1)
	v2   profileInfoV2Func
}

// Init opens NVML. Calls are counted: each successful Init needs its own
// Shutdown, as with NVML itself.
func (l *library) Init() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ret := l.lib.Init(); ret != gonvml.SUCCESS {
		return returnError(ret, "initialize NVML")
	}
	if l.refs == 0 {
		l.gen++
		l.v2 = l.opts.profileInfoV2
		if l.v2 == nil && l.real && l.lib.Extensions().LookupSymbol(profileInfoVSymbol) == nil {
			l.v2 = systemProfileInfoV2
		}
	}
	l.refs++
	return nil
}

// systemProfileInfoV2 reads V2 profile info from the system library.
func systemProfileInfoV2(dev gonvml.Device, profile int) (gonvml.GpuInstanceProfileInfo_v2, gonvml.Return) {
	return dev.GetGpuInstanceProfileInfoV(profile).V2()
}

// Shutdown closes NVML once every Init has been matched.
func (l *library) Shutdown() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refs == 0 {
		return fmt.Errorf("shut down NVML: %w", partition.ErrUninitialized)
	}
	if ret := l.lib.Shutdown(); ret != gonvml.SUCCESS {
		return returnError(ret, "shut down NVML")
	}
	l.refs--
	return nil
}

// enter takes the read lock for one call of session gen (0: the current
// one). It fails, holding nothing, when NVML is not open or the session
// ended.
func (l *library) enter(gen uint64, what string) (release func(), err error) {
	l.mu.RLock()
	switch {
	case l.refs == 0:
		l.mu.RUnlock()
		return nil, fmt.Errorf("%s: %w", what, partition.ErrUninitialized)
	case gen != 0 && gen != l.gen:
		l.mu.RUnlock()
		return nil, fmt.Errorf("%s: handle from an NVML session that was shut down: %w", what, partition.ErrUninitialized)
	}
	return l.mu.RUnlock, nil
}

// DeviceCount returns the number of GPUs.
func (l *library) DeviceCount() (int, error) {
	release, err := l.enter(0, "count GPUs")
	if err != nil {
		return 0, err
	}
	defer release()
	n, ret := l.lib.DeviceGetCount()
	if ret != gonvml.SUCCESS {
		return 0, returnError(ret, "count GPUs")
	}
	return n, nil
}

// Device returns the GPU at an index.
func (l *library) Device(index int) (partition.Device, error) {
	what := fmt.Sprintf("GPU %d: get handle", index)
	release, err := l.enter(0, what)
	if err != nil {
		return nil, err
	}
	defer release()
	h, ret := l.lib.DeviceGetHandleByIndex(index)
	if ret != gonvml.SUCCESS {
		return nil, returnError(ret, "%s", what)
	}
	return &device{l: l, gen: l.gen, index: index, dev: h}, nil
}

// Topology tells how closely two GPUs are connected: their PCIe common
// ancestor and the NVLinks of a that end at b.
func (l *library) Topology(a, b int) (partition.Link, error) {
	what := fmt.Sprintf("GPU %d and GPU %d: topology", a, b)
	release, err := l.enter(0, what)
	if err != nil {
		return partition.Link{}, err
	}
	defer release()
	da, ret := l.lib.DeviceGetHandleByIndex(a)
	if ret != gonvml.SUCCESS {
		return partition.Link{}, returnError(ret, "%s: GPU %d", what, a)
	}
	db, ret := l.lib.DeviceGetHandleByIndex(b)
	if ret != gonvml.SUCCESS {
		return partition.Link{}, returnError(ret, "%s: GPU %d", what, b)
	}
	if a == b {
		return partition.Link{PCIe: int(gonvml.TOPOLOGY_INTERNAL)}, nil
	}
	level, ret := da.GetTopologyCommonAncestor(db)
	if ret != gonvml.SUCCESS {
		return partition.Link{}, returnError(ret, "%s: common ancestor", what)
	}
	busB, err := pciBusID(db)
	if err != nil {
		return partition.Link{}, fmt.Errorf("%s: GPU %d: %w", what, b, err)
	}
	links := 0
	for link := range gonvml.NVLINK_MAX_LINKS {
		state, ret := da.GetNvLinkState(link)
		switch ret {
		case gonvml.SUCCESS:
		case gonvml.ERROR_NOT_SUPPORTED, gonvml.ERROR_INVALID_ARGUMENT:
			continue // no NVLink, or no such link on this GPU
		default:
			return partition.Link{}, returnError(ret, "%s: NVLink %d state", what, link)
		}
		if state != gonvml.FEATURE_ENABLED {
			continue
		}
		remote, ret := da.GetNvLinkRemotePciInfo(link)
		if ret != gonvml.SUCCESS {
			return partition.Link{}, returnError(ret, "%s: NVLink %d remote", what, link)
		}
		if sameBusID(busIDOf(remote), busB) {
			links++
		}
	}
	return partition.Link{NVLinks: links, PCIe: int(level)}, nil
}

var _ partition.NVML = (*library)(nil)
