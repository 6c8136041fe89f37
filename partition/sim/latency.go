package sim

import (
	"fmt"
	"strings"
	"time"

	"github.com/carve-dev/carve/partition"
)

// Latency is how long a simulated machine takes for each mutating NVML
// call, named by the plan operation the call carries out (partition.OpKind:
// create-gi, destroy-gi, create-ci, destroy-ci, enable-mig, disable-mig,
// reset-gpu). The zero Latency takes no time, as the simulator always did.
// Reads never take time. See Machine.SetLatency and ParseLatency.
type Latency struct {
	CreateGI, DestroyGI   time.Duration
	CreateCI, DestroyCI   time.Duration
	EnableMIG, DisableMIG time.Duration
	ResetGPU              time.Duration
}

// RealisticLatency returns the per-operation durations of `--sim-latency
// realistic`: roughly what the calls take on an H100 or A100, from the
// public reports listed in docs/reference.md (simulated latency). They are
// round figures, not a measurement of one machine.
func RealisticLatency() Latency {
	return Latency{
		CreateGI:   time.Second,
		DestroyGI:  500 * time.Millisecond,
		CreateCI:   500 * time.Millisecond,
		DestroyCI:  500 * time.Millisecond,
		EnableMIG:  time.Second,
		DisableMIG: time.Second,
		ResetGPU:   5 * time.Second,
	}
}

// UniformLatency returns a Latency in which every mutating call takes d.
func UniformLatency(d time.Duration) Latency {
	return Latency{CreateGI: d, DestroyGI: d, CreateCI: d, DestroyCI: d, EnableMIG: d, DisableMIG: d, ResetGPU: d}
}

// latencyOps are the operations of a Latency in the order String and the
// error messages list them.
var latencyOps = []partition.OpKind{
	partition.OpCreateGI, partition.OpDestroyGI, partition.OpCreateCI, partition.OpDestroyCI,
	partition.OpEnableMIG, partition.OpDisableMIG, partition.OpResetGPU,
}

// field returns the duration of op in l, nil for an op a Latency does not
// know.
func (l *Latency) field(op partition.OpKind) *time.Duration {
	switch op {
	case partition.OpCreateGI:
		return &l.CreateGI
	case partition.OpDestroyGI:
		return &l.DestroyGI
	case partition.OpCreateCI:
		return &l.CreateCI
	case partition.OpDestroyCI:
		return &l.DestroyCI
	case partition.OpEnableMIG:
		return &l.EnableMIG
	case partition.OpDisableMIG:
		return &l.DisableMIG
	case partition.OpResetGPU:
		return &l.ResetGPU
	}
	return nil
}

// For returns how long op takes; 0 for an op kind it does not know.
func (l Latency) For(op partition.OpKind) time.Duration {
	if p := l.field(op); p != nil {
		return *p
	}
	return 0
}

// IsZero reports whether no operation takes time.
func (l Latency) IsZero() bool { return l == Latency{} }

// Estimate returns how long ops take one after another, as carve's applier
// runs them.
func (l Latency) Estimate(ops []partition.Op) time.Duration {
	var total time.Duration
	for _, op := range ops {
		total += l.For(op.Kind)
	}
	return total
}

// String writes l the way ParseLatency reads it: "none", "realistic", one
// duration ("200ms") when every operation takes the same, or the list of
// the operations that take time ("create-gi=1s,reset-gpu=5s").
func (l Latency) String() string {
	switch {
	case l.IsZero():
		return "none"
	case l == RealisticLatency():
		return "realistic"
	case l == UniformLatency(l.CreateGI):
		return l.CreateGI.String()
	}
	var parts []string
	for _, op := range latencyOps {
		if d := l.For(op); d != 0 {
			parts = append(parts, string(op)+"="+d.String())
		}
	}
	return strings.Join(parts, ",")
}

// latencyForms says what ParseLatency accepts, for its errors.
const latencyForms = "want none, realistic, a duration (200ms) or op=duration pairs (create-gi=1s,reset-gpu=5s)"

// ParseLatency reads a --sim-latency value:
//
//   - "none" (or ""): no operation takes time;
//   - "realistic": RealisticLatency;
//   - a Go duration such as "200ms": every mutating call takes that long;
//   - comma-separated op=duration pairs such as "create-gi=1s,reset-gpu=5s",
//     the ops named as in a plan (create-gi, destroy-gi, create-ci,
//     destroy-ci, enable-mig, disable-mig, reset-gpu), each at most once;
//     the ops not named take no time.
//
// Durations must not be negative. Errors quote the value and say what was
// wanted, to follow the flag's name.
func ParseLatency(s string) (Latency, error) {
	switch s {
	case "", "none":
		return Latency{}, nil
	case "realistic":
		return RealisticLatency(), nil
	}
	if !strings.Contains(s, "=") {
		d, err := time.ParseDuration(s)
		if err != nil {
			return Latency{}, fmt.Errorf("%q: %s", s, latencyForms)
		}
		if d < 0 {
			return Latency{}, fmt.Errorf("%q: negative duration", s)
		}
		return UniformLatency(d), nil
	}
	var l Latency
	seen := map[string]bool{}
	for item := range strings.SplitSeq(s, ",") {
		name, value, ok := strings.Cut(strings.TrimSpace(item), "=")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if !ok || name == "" || value == "" {
			return Latency{}, fmt.Errorf("%q: %q is not op=duration (such as create-gi=1s)", s, item)
		}
		p := l.field(partition.OpKind(name))
		if p == nil {
			return Latency{}, fmt.Errorf("%q: unknown operation %q (want %s)", s, name, opList())
		}
		if seen[name] {
			return Latency{}, fmt.Errorf("%q: %s given twice", s, name)
		}
		seen[name] = true
		d, err := time.ParseDuration(value)
		if err != nil {
			return Latency{}, fmt.Errorf("%q: %s: %q is not a duration (such as 500ms)", s, name, value)
		}
		if d < 0 {
			return Latency{}, fmt.Errorf("%q: %s: negative duration %s", s, name, value)
		}
		*p = d
	}
	return l, nil
}

// opList lists the operation names of a Latency: "create-gi, ..., or
// reset-gpu".
func opList() string {
	names := make([]string, len(latencyOps))
	for i, op := range latencyOps {
		names[i] = string(op)
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// callOp returns the plan operation a mutating NVML call of the simulator
// carries out, from the call's name and its op-log arguments; false for a
// call that is none (a SetMIGMode with an invalid mode).
func callOp(call, args string) (partition.OpKind, bool) {
	switch call {
	case "CreateGPUInstance":
		return partition.OpCreateGI, true
	case "DestroyGPUInstance":
		return partition.OpDestroyGI, true
	case "CreateComputeInstance":
		return partition.OpCreateCI, true
	case "DestroyComputeInstance":
		return partition.OpDestroyCI, true
	case "Reset":
		return partition.OpResetGPU, true
	case "SetMIGMode":
		switch args {
		case partition.MIGEnabled.String():
			return partition.OpEnableMIG, true
		case partition.MIGDisabled.String():
			return partition.OpDisableMIG, true
		}
	}
	return "", false
}

// SetLatency makes the machine's mutating NVML calls take the time l says
// from now on (the zero Latency: none, the default). A call waits before
// it checks or changes anything, with the machine unlocked, so reads and
// calls from other goroutines go on meanwhile; then it runs as without a
// latency, so the op log and the state file record calls in the order they
// took effect. A call that fails (an injected fault, an overlap) takes as
// long as one that succeeds; a call before Init fails at once. The test
// API (CreateComputeInstanceSlices, SetBusy, Reboot, ...) never waits.
func (m *Machine) SetLatency(l Latency) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.latency = l
}

// Latency returns the latency set with SetLatency.
func (m *Machine) Latency() Latency {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.latency
}

// wait waits out the latency of a mutating NVML call; the caller holds
// m.mu, which wait releases while it sleeps.
func (m *Machine) wait(call, args string) {
	op, ok := callOp(call, args)
	if !ok || m.inits == 0 {
		return
	}
	d := m.latency.For(op)
	if d <= 0 {
		return
	}
	sleep := m.sleep
	if sleep == nil {
		sleep = time.Sleep
	}
	m.mu.Unlock()
	sleep(d)
	m.mu.Lock()
}
