package v1

import (
	"encoding/json"
	"fmt"
	"time"
)

// CheckpointVersion is the format version of Checkpoint.
const CheckpointVersion = 1

// Checkpoint is what the agent keeps in its state directory while an apply
// runs: what it set out to do and how far it got. It is written before the
// first op and after each op, so that an agent that dies part-way knows on
// restart that an apply was interrupted, and of what. The restarted agent
// re-plans from the GPUs as they are (the planner keeps what was made and
// repairs half-made instances), so the checkpoint never drives NVML calls
// by itself.
type Checkpoint struct {
	// Version is CheckpointVersion.
	Version int `json:"version"`
	// Profile and ProfileHash name the target.
	Profile     string `json:"profile"`
	ProfileHash string `json:"profileHash"`
	// Started is when the apply began.
	Started time.Time `json:"started"`
	// Plan is the plan being applied.
	Plan NodePlan `json:"plan"`
	// Done counts, per GPU index, the ops of its plan that succeeded.
	Done map[int]int `json:"done"`
	// Paused are the GPU Operator operand labels paused for this apply
	// (OperandLabel), with the values to put back once it is done, also by
	// an agent that resumes it after a crash.
	Paused map[string]string `json:"paused,omitempty"`
}

// OpsDone returns the number of ops done over all GPUs.
func (c Checkpoint) OpsDone() int {
	n := 0
	for _, d := range c.Done {
		n += d
	}
	return n
}

// Encode returns the checkpoint's JSON with Version set.
func (c Checkpoint) Encode() ([]byte, error) {
	c.Version = CheckpointVersion
	b, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encode checkpoint: %w", err)
	}
	return b, nil
}

// DecodeCheckpoint parses a checkpoint written by Encode; another format
// version, a field this version does not know, or anything after the
// object is an error.
func DecodeCheckpoint(data []byte) (Checkpoint, error) {
	var c Checkpoint
	// A field this agent does not know is a checkpoint it cannot resume
	// faithfully (one a newer agent wrote): refuse it, and the caller
	// re-plans from the GPUs as they are.
	if err := decodeStrict(data, &c); err != nil {
		return Checkpoint{}, fmt.Errorf("decode checkpoint: %w", err)
	}
	if c.Version != CheckpointVersion {
		return Checkpoint{}, fmt.Errorf("decode checkpoint: format version %d, want %d", c.Version, CheckpointVersion)
	}
	return c, nil
}
