package partition

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// MaxInUseProcesses is the most processes an InUseError names; the rest
// are counted.
const MaxInUseProcesses = 5

// maxProcessName bounds the length of a process name in messages, in
// bytes; a longer name keeps its end, where the program's name is.
const maxProcessName = 64

// Process is a process that holds a GPU or MIG device, as NVML lists it.
type Process struct {
	// PID is the process ID, as the host sees it.
	PID uint32 `json:"pid"`
	// Name is the process's name (NVML's process name, often the
	// program's path), "" where NVML could not tell.
	Name string `json:"name,omitempty"`
	// Device is the UUID of the GPU or MIG device it runs on.
	Device string `json:"device,omitempty"`
}

// String writes the process as "pid 4242 (python3)", or "pid 4242" when
// its name is not known.
func (p Process) String() string {
	name := cleanProcessName(p.Name)
	if name == "" {
		return "pid " + strconv.FormatUint(uint64(p.PID), 10)
	}
	return "pid " + strconv.FormatUint(uint64(p.PID), 10) + " (" + name + ")"
}

// cleanProcessName keeps a process name printable, on one line and at
// most maxProcessName bytes long.
func cleanProcessName(s string) string {
	s = strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) {
			return '?'
		}
		return r
	}, strings.TrimSpace(s))
	if len(s) <= maxProcessName {
		return s
	}
	cut := len(s) - (maxProcessName - len("…"))
	for cut < len(s) && !utf8Start(s[cut]) {
		cut++
	}
	return "…" + s[cut:]
}

// utf8Start reports whether b starts a UTF-8 encoded rune.
func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// InUseError is an error wrapping ErrInUse that says what holds the
// device: the GPU or MIG devices the refused call concerns and the
// processes NVML lists on them. NVML implementations return it (use
// errors.As) when a destroy, a MIG mode change or a reset is refused
// because the device is in use; errors.Is(err, ErrInUse) holds for it.
type InUseError struct {
	// Err is the device's own error; it wraps ErrInUse.
	Err error
	// Devices are the UUIDs of the GPU and MIG devices the refused call
	// concerns, sorted: a MIG device for a compute instance, those of a
	// GPU instance, or the GPU and all its MIG devices for a MIG mode
	// change or a reset.
	Devices []string
	// Processes are the first MaxInUseProcesses processes that hold one of
	// Devices, by PID, each once.
	Processes []Process
	// More counts the processes beyond Processes.
	More int
	// Unlisted says why the processes could not be listed, "" when they
	// were.
	Unlisted string
}

// NewInUseError returns the InUseError of err, a refusal wrapping ErrInUse,
// on devices, held by procs: devices sorted and each once, procs each once
// by PID (a process on several devices keeps the first), sorted by PID and
// cut to MaxInUseProcesses with the rest counted in More.
func NewInUseError(err error, devices []string, procs []Process) *InUseError {
	e := &InUseError{Err: err, Devices: slices.Compact(slices.Sorted(slices.Values(devices)))}
	seen := make(map[uint32]bool, len(procs))
	var uniq []Process
	for _, p := range procs {
		if !seen[p.PID] {
			seen[p.PID] = true
			uniq = append(uniq, p)
		}
	}
	slices.SortStableFunc(uniq, func(a, b Process) int { return cmp.Compare(a.PID, b.PID) })
	if len(uniq) > MaxInUseProcesses {
		e.More = len(uniq) - MaxInUseProcesses
		uniq = slices.Clone(uniq[:MaxInUseProcesses])
	}
	e.Processes = uniq
	return e
}

// Error reads like "<the device's error>; held by pid 4242 (python3), pid
// 4300 (tritonserver) and 2 more".
func (e *InUseError) Error() string {
	if e.Err == nil {
		return ErrInUse.Error() + "; " + e.Holders()
	}
	return e.Err.Error() + "; " + e.Holders()
}

// Holders says who holds the devices, for a message: "held by pid 4242
// (python3), pid 4300 (tritonserver) and 2 more", "NVML lists no process
// holding it" or "the processes holding it are unknown: <why>".
func (e *InUseError) Holders() string {
	switch {
	case e.Unlisted != "":
		return "the processes holding it are unknown: " + e.Unlisted
	case len(e.Processes) == 0:
		return "NVML lists no process holding it"
	}
	parts := make([]string, len(e.Processes))
	for i, p := range e.Processes {
		parts[i] = p.String()
	}
	s := "held by " + strings.Join(parts, ", ")
	if e.More > 0 {
		s += fmt.Sprintf(" and %d more", e.More)
	}
	return s
}

// Unwrap returns the device's error, which wraps ErrInUse.
func (e *InUseError) Unwrap() error { return e.Err }

// Is reports ErrInUse, so that errors.Is holds even for an Err that lost
// the sentinel.
func (e *InUseError) Is(target error) bool { return target == ErrInUse }

// InUseOf returns the InUseError in err's chain, or nil.
func InUseOf(err error) *InUseError {
	if e, ok := errors.AsType[*InUseError](err); ok {
		return e
	}
	return nil
}
