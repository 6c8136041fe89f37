package sim

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/carve-dev/carve/partition"
)

// Machine is a simulated node with GPUs. It implements partition.NVML and
// enforces the MIG geometry of docs/hardware.md. All methods are safe
// for concurrent use.
//
// Besides the NVML calls, Machine has a test and fault API: SetProcesses,
// SetBusy, SetRebootOnly, SetMIGModeVolatile, Reboot, InjectFault, ClearFaults,
// RaiseXID, OpLog, ResetOpLog and CreateComputeInstanceSlices. These work
// without Init.
type Machine struct {
	spec Spec
	// statePath is where the state is written after each change; "" keeps
	// it in memory only.
	statePath string

	mu       sync.Mutex
	inits    int
	gpus     []*gpuState
	faults   []*Fault
	ops      []Op
	journal  io.Writer
	watchers map[*eventSet]struct{}
	// latency is how long mutating NVML calls take (SetLatency); sleep
	// waits it out, time.Sleep when nil (tests record the waits instead).
	latency Latency
	sleep   func(time.Duration)
	// lastPID is the PID SetBusy last gave a process it made up.
	lastPID uint32
	// unloaded: the driver is unloaded (UnloadDriver); refusedUnloads
	// counts the unloads refused because the driver was held.
	unloaded       bool
	refusedUnloads int
}

var _ partition.NVML = (*Machine)(nil)

// gpuState is the state of one simulated GPU.
type gpuState struct {
	index       int
	model       partition.Model
	uuid, busID string
	current     partition.MIGMode
	pending     partition.MIGMode
	rebootOnly  bool
	// migVolatile marks a GPU whose MIG mode a reboot turns off (see
	// Machine.SetMIGModeVolatile).
	migVolatile bool
	// procs are the processes holding the whole GPU (SetProcesses).
	procs []partition.Process
	gis   map[int]*giState
}

// giState is a GPU instance.
type giState struct {
	id        int
	profile   partition.GIProfile
	placement partition.Placement
	cis       map[int]*ciState
}

// ciState is a compute instance.
type ciState struct {
	id, slices int
	uuid       string
	// procs are the processes holding the MIG device (SetProcesses).
	procs []partition.Process
}

// New returns a simulated machine for a spec (see Parse) with every GPU in
// its factory state: MIG disabled, no instances. Its state lives in memory
// only; see Open for a machine that keeps it in a file.
func New(spec string) (*Machine, error) {
	s, err := Parse(spec)
	if err != nil {
		return nil, err
	}
	return newMachine(s), nil
}

// newMachine builds a machine in factory state.
func newMachine(s Spec) *Machine {
	m := &Machine{spec: s, watchers: map[*eventSet]struct{}{}}
	m.gpus = freshGPUs(s)
	return m
}

// freshGPUs returns the GPUs of a spec in factory state.
func freshGPUs(s Spec) []*gpuState {
	gpus := make([]*gpuState, len(s.GPUs))
	for i, model := range s.GPUs {
		gpus[i] = &gpuState{
			index: i, model: cloneModel(model),
			uuid: s.gpuUUID(i), busID: pciBusID(i),
			gis: map[int]*giState{},
		}
	}
	return gpus
}

// Open returns a simulated machine whose MIG state persists in statePath,
// as the hardware keeps it across restarts of the agent. When the file
// exists, the machine starts from it (it must have been made for the same
// machine spec); otherwise it starts in factory state and the file is
// created. After every successful change the file is replaced atomically.
// With an empty statePath, Open is New.
func Open(spec, statePath string) (*Machine, error) {
	m, err := New(spec)
	if err != nil || statePath == "" {
		return m, err
	}
	data, err := os.ReadFile(statePath)
	switch {
	case errors.Is(err, os.ErrNotExist):
		m.statePath = statePath
		if err := m.Save(statePath); err != nil {
			return nil, fmt.Errorf("simulated machine %s: create state file: %w", m.spec.Name, err)
		}
		return m, nil
	case err != nil:
		return nil, fmt.Errorf("simulated machine %s: read state: %w", m.spec.Name, err)
	}
	st, err := ParseState(data)
	if err != nil {
		return nil, fmt.Errorf("simulated machine %s: state file %s: %w", m.spec.Name, statePath, err)
	}
	gpus, err := m.spec.restore(st)
	if err != nil {
		return nil, fmt.Errorf("simulated machine %s: state file %s: %w", m.spec.Name, statePath, err)
	}
	m.gpus = gpus
	m.statePath = statePath
	return m, nil
}

// Spec returns the machine's spec.
func (m *Machine) Spec() Spec {
	s := m.spec
	s.GPUs = make([]partition.Model, len(m.spec.GPUs))
	for i, g := range m.spec.GPUs {
		s.GPUs[i] = cloneModel(g)
	}
	return s
}

// Init opens the simulated library. Calls nest: each Init needs a Shutdown.
// While the driver is unloaded (UnloadDriver) it fails with an error
// wrapping partition.ErrDriverNotLoaded.
func (m *Machine) Init() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.unloaded {
		return fmt.Errorf("Init: %w", partition.ErrDriverNotLoaded)
	}
	if err := m.fault("Init", -1); err != nil {
		return err
	}
	m.inits++
	return nil
}

// Shutdown undoes one Init; it fails with ErrUninitialized when there was
// none.
func (m *Machine) Shutdown() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.ready("Shutdown", -1); err != nil {
		return err
	}
	m.inits--
	return nil
}

// ready checks, with m.mu held, that the library is initialised and that no
// injected fault fails the call.
func (m *Machine) ready(call string, gpu int) error {
	if m.inits == 0 {
		if gpu >= 0 {
			return fmt.Errorf("GPU %d: %s: %w", gpu, call, partition.ErrUninitialized)
		}
		return fmt.Errorf("%s: %w", call, partition.ErrUninitialized)
	}
	return m.fault(call, gpu)
}

// DeviceCount returns the number of GPUs.
func (m *Machine) DeviceCount() (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.ready("DeviceCount", -1); err != nil {
		return 0, err
	}
	return len(m.gpus), nil
}

// Device returns a handle to the GPU at index.
func (m *Machine) Device(index int) (partition.Device, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if index < 0 || index >= len(m.gpus) {
		return nil, fmt.Errorf("device %d: machine has %d GPUs: %w", index, len(m.gpus), partition.ErrInvalidArgument)
	}
	if err := m.ready("Device", index); err != nil {
		return nil, err
	}
	return &device{m: m, index: index}, nil
}

// Topology tells how closely the GPUs at two indexes are connected; see
// Spec.Link.
func (m *Machine) Topology(a, b int) (partition.Link, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.ready("Topology", a); err != nil {
		return partition.Link{}, err
	}
	if a != b {
		if err := m.fault("Topology", b); err != nil {
			return partition.Link{}, err
		}
	}
	return m.spec.Link(a, b)
}

// mutation runs one state-changing call on GPU i with m.mu held: when nvml
// is set it first waits out the call's latency (see SetLatency; m.mu is
// released meanwhile) and checks Init and injected faults; then it runs fn,
// writes the state file (undoing fn when that fails) and records the call
// in the op log.
func (m *Machine) mutation(i int, nvml bool, call, args string, fn func(g *gpuState) (string, error)) error {
	if nvml {
		m.wait(call, args)
	}
	op := Op{GPU: i, Call: call, Args: args}
	err := m.runMutation(i, nvml, call, fn, &op)
	op.Err = err
	m.ops = append(m.ops, op)
	if m.journal != nil {
		// A lost line only makes a reader of the journal see fewer ops than
		// were made; the GPU change itself stands.
		_, _ = fmt.Fprintln(m.journal, op.String())
	}
	return err
}

// runMutation does the work of mutation.
func (m *Machine) runMutation(i int, nvml bool, call string, fn func(g *gpuState) (string, error), op *Op) error {
	if nvml {
		if err := m.ready(call, i); err != nil {
			return err
		}
	}
	g := m.gpus[i]
	saved := g.clone()
	result, err := fn(g)
	if err != nil {
		return err
	}
	if err := m.persist(); err != nil {
		m.gpus[i] = saved
		return fmt.Errorf("GPU %d: %s: change undone: %w", i, call, err)
	}
	op.Result = result
	return nil
}

// clone returns a deep copy of the GPU's state.
func (g *gpuState) clone() *gpuState {
	c := *g
	c.gis = make(map[int]*giState, len(g.gis))
	for id, gi := range g.gis {
		gc := *gi
		gc.cis = make(map[int]*ciState, len(gi.cis))
		for cid, ci := range gi.cis {
			cc := *ci
			gc.cis[cid] = &cc
		}
		c.gis[id] = &gc
	}
	return &c
}

// migCapable reports whether the GPU supports MIG.
func (g *gpuState) migCapable() bool { return len(g.model.Profiles) > 0 }

// processes counts the distinct processes holding the GPU or its MIG
// devices.
func (g *gpuState) processes() int {
	_, procs := g.holders()
	pids := map[uint32]bool{}
	for _, p := range procs {
		pids[p.PID] = true
	}
	return len(pids)
}

// holders returns the GPU's UUID and its MIG devices' with the processes
// on each, as NVML lists them for a reset or a MIG mode change.
func (g *gpuState) holders() ([]string, []partition.Process) {
	devices := []string{g.uuid}
	procs := onDevice(g.uuid, g.procs)
	for _, gi := range g.sortedGIs() {
		d, p := gi.holders()
		devices, procs = append(devices, d...), append(procs, p...)
	}
	return devices, procs
}

// onDevice returns procs with Device set to uuid.
func onDevice(uuid string, procs []partition.Process) []partition.Process {
	out := make([]partition.Process, len(procs))
	for i, p := range procs {
		p.Device = uuid
		out[i] = p
	}
	return out
}

// inUse returns the InUseError of err on devices held by procs, or err
// itself when no process holds them (err must wrap ErrInUse).
func inUse(err error, devices []string, procs []partition.Process) error {
	if len(procs) == 0 {
		return err
	}
	return partition.NewInUseError(err, devices, procs)
}

// sortedGIs returns the GPU instances in ID order.
func (g *gpuState) sortedGIs() []*giState {
	out := make([]*giState, 0, len(g.gis))
	for _, gi := range g.gis {
		out = append(out, gi)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].id < out[b].id })
	return out
}

// sortedCIs returns the compute instances in ID order.
func (gi *giState) sortedCIs() []*ciState {
	out := make([]*ciState, 0, len(gi.cis))
	for _, ci := range gi.cis {
		out = append(out, ci)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].id < out[b].id })
	return out
}

// usedSlices returns the compute slices the GI's compute instances use.
func (gi *giState) usedSlices() int {
	n := 0
	for _, ci := range gi.cis {
		n += ci.slices
	}
	return n
}

// holders returns the GI's MIG device UUIDs with the processes on each.
func (gi *giState) holders() ([]string, []partition.Process) {
	var devices []string
	var procs []partition.Process
	for _, ci := range gi.sortedCIs() {
		devices = append(devices, ci.uuid)
		procs = append(procs, onDevice(ci.uuid, ci.procs)...)
	}
	return devices, procs
}

// public returns the GI as NVML reports it.
func (gi *giState) public() partition.GPUInstance {
	return partition.GPUInstance{ID: gi.id, ProfileID: gi.profile.ID, Placement: gi.placement}
}

// public returns the CI as NVML reports it.
func (ci *ciState) public(giID int) partition.ComputeInstance {
	return partition.ComputeInstance{ID: ci.id, GIID: giID, ComputeSlices: ci.slices, UUID: ci.uuid}
}

// needMIG fails with ErrNotSupported unless MIG mode is current.
func (g *gpuState) needMIG(what string) error {
	if !g.migCapable() {
		return fmt.Errorf("GPU %d: %s: %s has no MIG: %w", g.index, what, g.model.Product, partition.ErrNotSupported)
	}
	if g.current != partition.MIGEnabled {
		return fmt.Errorf("GPU %d: %s: MIG mode is disabled: %w", g.index, what, partition.ErrNotSupported)
	}
	return nil
}

// createGI creates a GPU instance, enforcing the geometry. id < 0 picks the
// lowest free ID from 1.
func (g *gpuState) createGI(profileID int, at partition.Placement, id int) (*giState, error) {
	if err := g.needMIG("create GPU instance"); err != nil {
		return nil, err
	}
	p, ok := g.model.ProfileByID(profileID)
	if !ok {
		return nil, fmt.Errorf("GPU %d: create GPU instance: unknown profile ID %d on %s: %w", g.index, profileID, g.model.Key, partition.ErrInvalidArgument)
	}
	where := fmt.Sprintf("GPU %d: create GPU instance %s at %s", g.index, p.Name, at.String())
	valid := false
	for _, pl := range p.Placements {
		if pl == at {
			valid = true
		}
	}
	if !valid {
		return nil, fmt.Errorf("%s: not a placement of %s (valid: %s): %w", where, p.Name, placementsString(p.Placements), partition.ErrInvalidArgument)
	}
	count, slices, media := 0, 0, p.Engines
	for _, gi := range g.sortedGIs() {
		if gi.profile.ID == p.ID {
			count++
		}
		slices += gi.profile.ComputeSlices
		media = media.Plus(gi.profile.Engines, 1)
		if p.MediaExtensions && gi.profile.MediaExtensions {
			return nil, fmt.Errorf("%s: GPU instance %d (%s) already has the media extensions: %w", where, gi.id, gi.profile.Name, partition.ErrInsufficientResources)
		}
		if gi.placement.Overlaps(at) {
			return nil, fmt.Errorf("%s: overlaps GPU instance %d (%s at %s): %w", where, gi.id, gi.profile.Name, gi.placement.String(), partition.ErrInsufficientResources)
		}
	}
	if count >= p.MaxCount {
		return nil, fmt.Errorf("%s: %s allows at most %d instances: %w", where, p.Name, p.MaxCount, partition.ErrInsufficientResources)
	}
	if slices+p.ComputeSlices > g.model.ComputeSlices {
		return nil, fmt.Errorf("%s: %d of %d compute slices in use: %w", where, slices, g.model.ComputeSlices, partition.ErrInsufficientResources)
	}
	if over := media.MediaBeyond(g.model.MediaEngines()); len(over) > 0 {
		return nil, fmt.Errorf("%s: the GPU instances would need %s: %w", where, strings.Join(over, ", "), partition.ErrInsufficientResources)
	}
	if id < 0 {
		id = 1
		for g.gis[id] != nil {
			id++
		}
	} else if g.gis[id] != nil {
		return nil, fmt.Errorf("%s: GPU instance ID %d taken: %w", where, id, partition.ErrInvalidArgument)
	}
	gi := &giState{id: id, profile: p, placement: at, cis: map[int]*ciState{}}
	g.gis[id] = gi
	return gi, nil
}

// placementsString lists placements as "0:4, 4:4".
func placementsString(ps []partition.Placement) string {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(p.String())
	}
	return b.String()
}

// lookupGI returns GI giID or an ErrNotFound error.
func (g *gpuState) lookupGI(what string, giID int) (*giState, error) {
	if err := g.needMIG(what); err != nil {
		return nil, err
	}
	gi := g.gis[giID]
	if gi == nil {
		return nil, fmt.Errorf("GPU %d: %s: no GPU instance %d: %w", g.index, what, giID, partition.ErrNotFound)
	}
	return gi, nil
}

// createCI creates a compute instance of slices compute slices in GI giID;
// slices 0 fills the GI, which must then have no compute instance yet.
// id < 0 picks the lowest free ID from 0.
func (g *gpuState) createCI(spec Spec, giID, slices, id int) (*ciState, error) {
	what := fmt.Sprintf("create compute instance in GPU instance %d", giID)
	gi, err := g.lookupGI(what, giID)
	if err != nil {
		return nil, err
	}
	what = fmt.Sprintf("GPU %d: %s (%s at %s)", g.index, what, gi.profile.Name, gi.placement.String())
	used := gi.usedSlices()
	switch {
	case slices == 0 && len(gi.cis) > 0:
		return nil, fmt.Errorf("%s: it already has %d compute instance(s): %w", what, len(gi.cis), partition.ErrInsufficientResources)
	case slices == 0:
		slices = gi.profile.ComputeSlices
	case slices < 0 || slices > gi.profile.ComputeSlices:
		return nil, fmt.Errorf("%s: %d compute slices, the GPU instance has %d: %w", what, slices, gi.profile.ComputeSlices, partition.ErrInvalidArgument)
	case used+slices > gi.profile.ComputeSlices:
		return nil, fmt.Errorf("%s: %d compute slices wanted, %d of %d in use: %w", what, slices, used, gi.profile.ComputeSlices, partition.ErrInsufficientResources)
	}
	if id < 0 {
		id = 0
		for gi.cis[id] != nil {
			id++
		}
	} else if gi.cis[id] != nil {
		return nil, fmt.Errorf("%s: compute instance ID %d taken: %w", what, id, partition.ErrInvalidArgument)
	}
	full := slices == gi.profile.ComputeSlices
	ci := &ciState{id: id, slices: slices, uuid: spec.migUUID(g.index, gi.profile.Name, gi.placement, full, id, slices)}
	gi.cis[id] = ci
	return ci, nil
}

// applyPending makes the pending MIG mode current, as a GPU reset or a
// reboot does; the GPU's MIG instances do not survive it.
func (g *gpuState) applyPending() {
	g.current = g.pending
	g.gis = map[int]*giState{}
}

// findMIG returns the compute instance whose MIG device has that UUID.
func (g *gpuState) findMIG(uuid string) *ciState {
	for _, gi := range g.gis {
		for _, ci := range gi.cis {
			if ci.uuid == uuid {
				return ci
			}
		}
	}
	return nil
}

// checkGPU validates a GPU index given to the test API.
func (m *Machine) checkGPU(what string, i int) error {
	if i < 0 || i >= len(m.gpus) {
		return fmt.Errorf("%s: GPU %d: machine has %d GPUs: %w", what, i, len(m.gpus), partition.ErrInvalidArgument)
	}
	return nil
}

// SetBusyProcessName is the name of the processes SetBusy makes up.
const SetBusyProcessName = "sim-process"

// firstBusyPID is the PID of the first process SetBusy makes up.
const firstBusyPID = 4000

// SetBusy marks a GPU (by GPU UUID) or a MIG device (by MIG device UUID) as
// held by a process, or frees it: SetProcesses with one made-up process
// (named SetBusyProcessName, PIDs counting from 4000) when the device has
// none, or with none. Unknown UUIDs fail with ErrNotFound.
func (m *Machine) SetBusy(uuid string, busy bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	procs, err := m.deviceProcs("set busy", uuid)
	if err != nil {
		return err
	}
	switch {
	case !busy:
		*procs = nil
	case len(*procs) == 0:
		m.lastPID = max(m.lastPID+1, firstBusyPID)
		*procs = []partition.Process{{PID: m.lastPID, Name: SetBusyProcessName}}
	}
	return nil
}

// SetProcesses sets the processes that hold a GPU (by GPU UUID) or a MIG
// device (by MIG device UUID), as NVML would list them; none frees it. A
// held device counts in its GPU's Processes and makes Reset fail with
// ErrInUse, and a held MIG device refuses the destruction of its compute
// and GPU instance with ErrInUse. Those errors are *partition.InUseError
// naming the devices and processes, as the real NVML binding returns them.
// (A MIG mode change is not refused: as on real GPUs, it stays pending
// until a reset.)
// A process's Device is ignored; PIDs must be above 0. Unknown UUIDs fail
// with ErrNotFound. Processes are not persisted and a Reboot ends them.
func (m *Machine) SetProcesses(uuid string, procs []partition.Process) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range procs {
		if p.PID == 0 {
			return fmt.Errorf("set processes of %s: PID 0: %w", uuid, partition.ErrInvalidArgument)
		}
	}
	held, err := m.deviceProcs("set processes", uuid)
	if err != nil {
		return err
	}
	*held = onDevice("", procs)
	if len(procs) == 0 {
		*held = nil
	}
	return nil
}

// deviceProcs returns the process list of the GPU or MIG device uuid; the
// caller holds m.mu.
func (m *Machine) deviceProcs(what, uuid string) (*[]partition.Process, error) {
	for _, g := range m.gpus {
		if g.uuid == uuid {
			return &g.procs, nil
		}
		if ci := g.findMIG(uuid); ci != nil {
			return &ci.procs, nil
		}
	}
	return nil, fmt.Errorf("%s: no GPU or MIG device %s: %w", what, uuid, partition.ErrNotFound)
}

// SetRebootOnly marks GPU gpu as one that only a reboot can change (as on
// some VMs): its Reset fails with ErrNotSupported, and pending MIG modes
// wait for Reboot.
func (m *Machine) SetRebootOnly(gpu int, rebootOnly bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkGPU("set reboot-only", gpu); err != nil {
		return err
	}
	g := m.gpus[gpu]
	was := g.rebootOnly
	g.rebootOnly = rebootOnly
	if err := m.persist(); err != nil {
		g.rebootOnly = was
		return fmt.Errorf("GPU %d: set reboot-only: change undone: %w", gpu, err)
	}
	return nil
}

// CreateComputeInstanceSlices creates a compute instance of slices compute
// slices in GPU instance giID of GPU gpu, which may already hold others, so
// tests can build the partial layouts real clusters have. Slices must be
// between 1 and the GPU instance's compute slices, and all its compute
// instances together may not use more. The call is recorded in the op log
// as CreateComputeInstance; it needs no Init and ignores injected faults.
func (m *Machine) CreateComputeInstanceSlices(gpu, giID, slices int) (partition.ComputeInstance, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkGPU("create compute instance", gpu); err != nil {
		return partition.ComputeInstance{}, err
	}
	if slices <= 0 {
		return partition.ComputeInstance{}, fmt.Errorf("GPU %d: create compute instance in GPU instance %d: %d compute slices: %w", gpu, giID, slices, partition.ErrInvalidArgument)
	}
	var out partition.ComputeInstance
	err := m.mutation(gpu, false, "CreateComputeInstance", fmt.Sprintf("gi %d, %d slices", giID, slices), func(g *gpuState) (string, error) {
		ci, err := g.createCI(m.spec, giID, slices, -1)
		if err != nil {
			return "", err
		}
		out = ci.public(giID)
		return fmt.Sprintf("ci %d %s", ci.id, ci.uuid), nil
	})
	return out, err
}
