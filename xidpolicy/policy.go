// Package xidpolicy is carve's XID policy: which XID errors NVML reports
// are ignored, which make a device unhealthy for a quiet period only, and
// which (every other one) keep it unhealthy until its GPU is reset or the
// node reboots; and, for Dynamic Resource Allocation, the taint effect
// each class puts on the devices it hits. Its defaults are NVIDIA's device
// plugin's behaviour; the facts behind them are NVIDIA's XID catalogue
// (docs.nvidia.com/deploy/xid-errors).
package xidpolicy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Class is what an XID does to the health of the devices it hits.
type Class int

const (
	// Critical XIDs keep a device unhealthy until its GPU is reset (by
	// carve, or a reset the agent sees) or the node reboots.
	Critical Class = iota
	// Recoverable XIDs make a device unhealthy until Policy.Quiet has
	// passed without another XID on it.
	Recoverable
	// Ignored XIDs change nothing: errors an application causes.
	Ignored
)

// String returns "critical", "recoverable" or "ignored".
func (c Class) String() string {
	switch c {
	case Recoverable:
		return "recoverable"
	case Ignored:
		return "ignored"
	default:
		return "critical"
	}
}

// Effect is a DRA device taint effect, spelt as resource.k8s.io spells it.
type Effect string

const (
	// NoSchedule keeps new claims off the device; pods running on it stay.
	NoSchedule Effect = "NoSchedule"
	// NoExecute also evicts the pods whose claims hold the device.
	NoExecute Effect = "NoExecute"
	// EffectNone is an informational taint: the scheduler and the
	// eviction controller ignore it.
	EffectNone Effect = "None"
)

// Effects returns the valid taint effects.
func Effects() []Effect { return []Effect{NoSchedule, NoExecute, EffectNone} }

// Flag names of carve-agent's XID policy settings, for error messages.
const (
	FlagIgnored          = "--xid-ignored"
	FlagRecoverable      = "--xid-recoverable"
	FlagRecoveryQuiet    = "--xid-recovery-quiet"
	FlagTaintRecoverable = "--xid-taint-recoverable"
	FlagTaintCritical    = "--xid-taint-critical"
)

// Limits on the settings, so that any input costs bounded time and memory.
const (
	// MaxXID is the largest XID number accepted. NVIDIA's catalogue
	// numbers its XIDs below 200; the bound leaves room for new ones.
	MaxXID = 65535
	// MaxListed is the most XIDs one list may name.
	MaxListed = 1024
	// MaxQuiet is the longest quiet period accepted.
	MaxQuiet = 7 * 24 * time.Hour
)

// DefaultQuiet is the default quiet period of recoverable XIDs.
const DefaultQuiet = 5 * time.Minute

// DefaultIgnored returns the XIDs NVIDIA's device plugin ignores: errors an
// application causes, after which the GPU is still healthy (13 graphics
// engine exception, 31 GPU memory page fault, 43 GPU stopped processing,
// 45 preemptive cleanup, 68 video processor exception, 109 context switch
// timeout). A new slice on each call.
func DefaultIgnored() []uint64 { return []uint64{13, 31, 43, 45, 68, 109} }

// Policy is the XID policy. The zero value is not valid; start from
// Default or Parse.
type Policy struct {
	// Ignored and Recoverable are the XIDs of those classes, sorted, with
	// no XID in both; every other XID is critical.
	Ignored, Recoverable []uint64
	// Quiet is how long a device hit by a recoverable XID stays unhealthy
	// after the last one.
	Quiet time.Duration
	// RecoverableTaint and CriticalTaint are the DRA taint effects of the
	// two classes that make a device unhealthy.
	RecoverableTaint, CriticalTaint Effect
}

// Default returns NVIDIA's device plugin's behaviour: DefaultIgnored
// ignored, no XID recoverable (every other XID keeps the device unhealthy),
// and a NoSchedule taint, which like the device plugin's Unhealthy keeps
// new work off the device and leaves running pods alone.
func Default() Policy {
	return Policy{
		Ignored: DefaultIgnored(), Recoverable: []uint64{}, Quiet: DefaultQuiet,
		RecoverableTaint: NoSchedule, CriticalTaint: NoSchedule,
	}
}

// Settings are the policy as carve-agent's flags give it: XID lists as
// comma-separated numbers ("" for none), effects by name.
type Settings struct {
	Ignored, Recoverable            string
	Quiet                           time.Duration
	RecoverableTaint, CriticalTaint string
}

// DefaultSettings returns Default as flag values.
func DefaultSettings() Settings {
	d := Default()
	return Settings{
		Ignored: FormatXIDs(d.Ignored), Recoverable: FormatXIDs(d.Recoverable), Quiet: d.Quiet,
		RecoverableTaint: string(d.RecoverableTaint), CriticalTaint: string(d.CriticalTaint),
	}
}

// Parse checks the settings and returns the policy. Each error names the
// flag and the value at fault: a malformed or out-of-range XID, one listed
// twice, one both ignored and recoverable, a quiet period out of range,
// an unknown taint effect.
func Parse(s Settings) (Policy, error) {
	var p Policy
	var err error
	if p.Ignored, err = parseXIDs(FlagIgnored, s.Ignored); err != nil {
		return Policy{}, err
	}
	if p.Recoverable, err = parseXIDs(FlagRecoverable, s.Recoverable); err != nil {
		return Policy{}, err
	}
	for _, x := range p.Recoverable {
		if _, found := slices.BinarySearch(p.Ignored, x); found {
			return Policy{}, fmt.Errorf("%s %q: XID %d is also in %s %q: an XID has one class", FlagRecoverable, s.Recoverable, x, FlagIgnored, s.Ignored)
		}
	}
	if s.Quiet <= 0 || s.Quiet > MaxQuiet {
		return Policy{}, fmt.Errorf("%s %s: want a duration above 0 and at most %s", FlagRecoveryQuiet, s.Quiet, MaxQuiet)
	}
	p.Quiet = s.Quiet
	if p.RecoverableTaint, err = parseEffect(FlagTaintRecoverable, s.RecoverableTaint); err != nil {
		return Policy{}, err
	}
	if p.CriticalTaint, err = parseEffect(FlagTaintCritical, s.CriticalTaint); err != nil {
		return Policy{}, err
	}
	return p, nil
}

// parseXIDs reads a comma-separated list of XID numbers; "" is none.
func parseXIDs(flag, v string) ([]uint64, error) {
	out := []uint64{}
	if strings.TrimSpace(v) == "" {
		return out, nil
	}
	fields := strings.Split(v, ",")
	if len(fields) > MaxListed {
		return nil, fmt.Errorf("%s: %d XIDs listed, at most %d", flag, len(fields), MaxListed)
	}
	for _, f := range fields {
		f = strings.TrimSpace(f)
		x, err := strconv.ParseUint(f, 10, 64)
		if err != nil || x == 0 || x > MaxXID {
			return nil, fmt.Errorf("%s %q: %q is not an XID: want a number from 1 to %d", flag, v, f, MaxXID)
		}
		if slices.Contains(out, x) {
			return nil, fmt.Errorf("%s %q: XID %d listed twice", flag, v, x)
		}
		out = append(out, x)
	}
	slices.Sort(out)
	return out, nil
}

// parseEffect reads a taint effect.
func parseEffect(flag, v string) (Effect, error) {
	for _, e := range Effects() {
		if string(e) == v {
			return e, nil
		}
	}
	return "", fmt.Errorf("%s %q: want %s, %s or %s", flag, v, NoSchedule, NoExecute, EffectNone)
}

// FormatXIDs writes XIDs as a flag takes them: "13,31,43".
func FormatXIDs(xids []uint64) string {
	s := make([]string, len(xids))
	for i, x := range xids {
		s[i] = strconv.FormatUint(x, 10)
	}
	return strings.Join(s, ",")
}

// Classify returns the class of an XID.
func (p Policy) Classify(xid uint64) Class {
	if _, ok := slices.BinarySearch(p.Ignored, xid); ok {
		return Ignored
	}
	if _, ok := slices.BinarySearch(p.Recoverable, xid); ok {
		return Recoverable
	}
	return Critical
}

// Taint returns the DRA taint effect of a class, and false for Ignored,
// which taints nothing.
func (p Policy) Taint(c Class) (Effect, bool) {
	switch c {
	case Recoverable:
		return p.RecoverableTaint, true
	case Critical:
		return p.CriticalTaint, true
	default:
		return "", false
	}
}
