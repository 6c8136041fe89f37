package partition_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/carve-dev/carve/partition"
)

func TestNewInUseError(t *testing.T) {
	cause := fmt.Errorf("GPU 1: destroy GPU instance 3: %w", partition.ErrInUse)
	var procs []partition.Process
	for pid := uint32(20); pid > 10; pid-- {
		procs = append(procs, partition.Process{PID: pid, Name: fmt.Sprint("p", pid), Device: "MIG-b"})
	}
	procs = append(procs, partition.Process{PID: 12, Name: "again", Device: "MIG-a"}) // the same PID on another device
	e := partition.NewInUseError(cause, []string{"MIG-b", "MIG-a", "MIG-b"}, procs)
	want := &partition.InUseError{
		Err:     cause,
		Devices: []string{"MIG-a", "MIG-b"},
		Processes: []partition.Process{
			{PID: 11, Name: "p11", Device: "MIG-b"}, {PID: 12, Name: "p12", Device: "MIG-b"}, {PID: 13, Name: "p13", Device: "MIG-b"},
			{PID: 14, Name: "p14", Device: "MIG-b"}, {PID: 15, Name: "p15", Device: "MIG-b"},
		},
		More: 5,
	}
	if diff := cmp.Diff(want, e, cmpopts.IgnoreFields(partition.InUseError{}, "Err")); diff != "" || !errors.Is(e.Err, cause) {
		t.Errorf("NewInUseError (-want +got):\n%s\nErr %v, want %v", diff, e.Err, cause)
	}
	if got, want := e.Error(), "GPU 1: destroy GPU instance 3: in use; held by pid 11 (p11), pid 12 (p12), pid 13 (p13), pid 14 (p14), pid 15 (p15) and 5 more"; got != want {
		t.Errorf("Error()\n got %q\nwant %q", got, want)
	}
	// Wrapped as the applier and the agent wrap it, it is still found.
	wrapped := fmt.Errorf("profile p: %w", &partition.OpError{GPU: 1, Step: 1, Total: 2, Op: partition.Op{Kind: partition.OpDestroyGI}, Err: e})
	if !errors.Is(wrapped, partition.ErrInUse) || partition.InUseOf(wrapped) != e {
		t.Errorf("wrapped %q: Is ErrInUse %v, InUseOf %p, want true, %p", wrapped, errors.Is(wrapped, partition.ErrInUse), partition.InUseOf(wrapped), e)
	}
	if partition.InUseOf(cause) != nil {
		t.Errorf("InUseOf(%q) is not nil", cause)
	}
}

func TestInUseErrorHolders(t *testing.T) {
	long := "/opt/" + strings.Repeat("x", 100) + "/bin/tritonserver"
	tests := []struct {
		name string
		e    partition.InUseError
		want string
	}{
		{"none listed", partition.InUseError{}, "NVML lists no process holding it"},
		{"unknown", partition.InUseError{Unlisted: "no permission"}, "the processes holding it are unknown: no permission"},
		{"no name", partition.InUseError{Processes: []partition.Process{{PID: 7}}}, "held by pid 7"},
		{"a name on one line", partition.InUseError{Processes: []partition.Process{{PID: 7, Name: " evil\nname\t "}}}, "held by pid 7 (evil?name)"},
		{"a long name keeps its end", partition.InUseError{Processes: []partition.Process{{PID: 7, Name: long}}},
			"held by pid 7 (…" + long[len(long)-61:] + ")"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.e.Holders(); got != tt.want {
				t.Errorf("Holders()\n got %q\nwant %q", got, tt.want)
			}
		})
	}
	if got := (&partition.InUseError{}).Error(); got != "in use; NVML lists no process holding it" {
		t.Errorf("Error() without a cause = %q", got)
	}
	if !errors.Is(&partition.InUseError{}, partition.ErrInUse) {
		t.Error("an InUseError without a cause is not ErrInUse")
	}
}

// TestRebootRequiredWithHolders: a reset refused with an InUseError still
// makes the node wait for a reboot.
func TestRebootRequiredWithHolders(t *testing.T) {
	e := partition.NewInUseError(fmt.Errorf("GPU 0: reset: %w", partition.ErrInUse), []string{"GPU-a"}, []partition.Process{{PID: 1}})
	if !partition.RebootRequired(&partition.OpError{Op: partition.Op{Kind: partition.OpResetGPU}, Err: e}) {
		t.Error("RebootRequired = false for a reset held by a process")
	}
}
