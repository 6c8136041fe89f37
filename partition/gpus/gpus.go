package gpus

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/nvml"
	"github.com/carve-dev/carve/partition/sim"
)

// NVML is the --gpus value for this machine's real GPUs.
const NVML = "nvml"

// Options are the flags that go with --gpus. They concern simulated GPUs
// only: From and SimState name simulator state files (at most one may be
// set), SimLatency how long the simulated GPUs take.
type Options struct {
	// From is a saved simulator state (carvectl's --from) that the
	// simulated machine starts in. The file is only read: changes made
	// through the opened GPUs stay in memory.
	From string
	// SimState is the file in which the simulated machine keeps its MIG
	// state across restarts, as real GPUs keep theirs (carve-agent's
	// --sim-state): the machine starts from it when it exists, creates it
	// when it does not, and replaces it after every change.
	SimState string
	// SimLatency is how long the simulated GPUs' mutating calls take
	// (--sim-latency): "none" or "" (no time, the default), "realistic",
	// a duration for every call ("200ms"), or op=duration pairs
	// ("create-gi=1s,reset-gpu=5s"); see sim.ParseLatency. Reads never
	// take time.
	SimLatency string
}

// Check reports whether spec and opts go together, without opening
// anything: spec must be "nvml" or "sim:<machine>", the latency must parse,
// and a state file or a latency other than none needs simulated GPUs.
// Whether the machine exists is left to Open. Errors name the flags
// (--gpus, --from, --sim-state, --sim-latency).
func Check(spec string, opts Options) error {
	simulated := strings.HasPrefix(spec, sim.Prefix)
	if spec != NVML && !simulated {
		return fmt.Errorf("--gpus %q: want nvml or sim:<machine>", spec)
	}
	latency, err := Latency(opts.SimLatency)
	if err != nil {
		return err
	}
	switch {
	case !latency.IsZero() && !simulated:
		return errors.New("--sim-latency works with simulated GPUs only (--gpus sim:<machine>)")
	case opts.From != "" && opts.SimState != "":
		return errors.New("--from and --sim-state cannot be used together")
	case opts.From != "" && !simulated:
		return errors.New("--from works with simulated GPUs only (--gpus sim:<machine>)")
	case opts.SimState != "" && !simulated:
		return errors.New("--sim-state works with simulated GPUs only (--gpus sim:<machine>)")
	}
	return nil
}

// Latency parses a --sim-latency value (see sim.ParseLatency); its errors
// name the flag.
func Latency(value string) (sim.Latency, error) {
	l, err := sim.ParseLatency(value)
	if err != nil {
		return sim.Latency{}, fmt.Errorf("--sim-latency %w", err)
	}
	return l, nil
}

// Open returns the GPUs spec names (see Check), not yet initialised: the
// caller calls Init, and Shutdown when done. "nvml" opens nothing before
// Init, so it succeeds on a machine without a driver; Init then fails with
// an error wrapping partition.ErrLibraryNotFound. For "sim:<machine>" it
// builds the simulated machine, from the state file in opts if any, with
// the latency in opts; an unknown machine, an unreadable state file or a
// state made for another machine fails here.
func Open(spec string, opts Options) (partition.NVML, error) {
	if err := Check(spec, opts); err != nil {
		return nil, err
	}
	if spec == NVML {
		return nvml.New(), nil
	}
	m, err := openSim(spec, opts)
	if err != nil {
		return nil, err
	}
	latency, err := Latency(opts.SimLatency) // checked above
	if err != nil {
		return nil, err
	}
	m.SetLatency(latency)
	return m, nil
}

// openSim opens the simulated machine of a "sim:<machine>" spec.
func openSim(spec string, opts Options) (*sim.Machine, error) {
	name := strings.TrimPrefix(spec, sim.Prefix)
	if opts.From == "" {
		// With an empty SimState, sim.Open is sim.New: state in memory only.
		m, err := sim.Open(name, opts.SimState)
		if err != nil {
			return nil, fmt.Errorf("--gpus %s: %w", spec, err)
		}
		return m, nil
	}
	m, err := sim.New(name)
	if err != nil {
		return nil, fmt.Errorf("--gpus %s: %w", spec, err)
	}
	data, err := os.ReadFile(opts.From)
	if err != nil {
		return nil, fmt.Errorf("--from: %w", err)
	}
	if err := m.LoadState(data); err != nil {
		return nil, fmt.Errorf("--from %s: %w", opts.From, err)
	}
	return m, nil
}
