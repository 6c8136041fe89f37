// Package chaos records what the fault-injection runs tried and what
// survived them, for the report `make chaos` writes (docs/reliability.md).
// The runs are ordinary Go tests, in the agent package and in the
// end-to-end module; each appends Records to a JSON-lines file in the
// directory CARVE_CHAOS_OUT names, and `make chaos` assembles the report
// from them. Without CARVE_CHAOS_OUT nothing is written.
package chaos

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// Environment variables the runs read.
const (
	// EnvMode selects the size of the runs: "full" for `make chaos`, any
	// other value (or none) for the short mode `make test` runs.
	EnvMode = "CARVE_CHAOS"
	// EnvOut is the directory Records are written to.
	EnvOut = "CARVE_CHAOS_OUT"
)

// Full reports whether the full runs are asked for (CARVE_CHAOS=full).
func Full() bool { return os.Getenv(EnvMode) == "full" }

// Record is one fault tried and its outcome.
type Record struct {
	// Scenario groups records in the report ("NVML failure at every
	// operation"); one table per scenario.
	Scenario string `json:"scenario"`
	// Case names what was run ("H100-80GB:all-1g->balanced, op 3 of 9").
	Case string `json:"case"`
	// Fault is the fault injected ("CreateGPUInstance fails").
	Fault string `json:"fault"`
	// Survived is true when every check after the fault held: the agent
	// converged, and nothing was lost.
	Survived bool `json:"survived"`
	// Lost names anything lost (an instance a pod held, an orphan
	// instance, a device the kubelet dropped); empty when nothing was.
	Lost string `json:"lost,omitempty"`
	// Detail is a short note: what the agent reported, how long it took.
	Detail string `json:"detail,omitempty"`
	// Checked says what the run checks in the scenario: the text under
	// the scenario's heading in the report (the first one given). A
	// Record with Checked and no Case only carries that text
	// (Recorder.Describe); it is no case.
	Checked string `json:"checked,omitempty"`
}

// IsCase reports whether r is a case tried, not a description only.
func (r Record) IsCase() bool { return r.Case != "" }

// Recorder appends Records to <CARVE_CHAOS_OUT>/<name>.jsonl. The zero
// Recorder and one without a directory write nothing. It is safe for
// concurrent use.
type Recorder struct {
	mu   sync.Mutex
	path string
}

// NewRecorder returns a Recorder for the run called name (a file name
// without extension), writing into the directory CARVE_CHAOS_OUT names,
// or a Recorder that writes nothing when it is unset.
func NewRecorder(name string) *Recorder {
	dir := os.Getenv(EnvOut)
	if dir == "" {
		return &Recorder{}
	}
	return &Recorder{path: filepath.Join(dir, name+".jsonl")}
}

// Add appends r.
func (c *Recorder) Add(r Record) error {
	if c == nil || c.path == "" {
		return nil
	}
	line, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("chaos record %s/%s: %w", r.Scenario, r.Case, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(c.path), 0o755); err != nil {
		return fmt.Errorf("chaos records: %w", err)
	}
	f, err := os.OpenFile(c.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("chaos records: %w", err)
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		_ = f.Close()
		return fmt.Errorf("chaos records %s: %w", c.path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("chaos records %s: %w", c.path, err)
	}
	return nil
}

// Describe records what the run checks in scenario, for the text under
// the scenario's heading in the report.
func (c *Recorder) Describe(scenario, checked string) error {
	return c.Add(Record{Scenario: scenario, Checked: checked})
}
