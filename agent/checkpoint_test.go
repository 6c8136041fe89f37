package agent

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	carvev1 "github.com/carve-dev/carve/api/v1"
)

func TestCheckpoints(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	c := &Checkpoints{Dir: dir}
	if in, err := c.Load(); err != nil || in != nil {
		t.Fatalf("Load with no checkpoint = %v, %v; want nil, nil", in, err)
	}
	if err := c.Clear(); err != nil {
		t.Fatalf("Clear with no directory: %v", err)
	}
	intent := carvev1.Checkpoint{
		Profile: "balanced", ProfileHash: "0123", Started: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		Plan: carvev1.NodePlan{GPUs: []carvev1.GPUPlan{{Index: 2, UUID: "GPU-c", Ops: []carvev1.Op{
			{Kind: carvev1.OpCreateGI, Profile: "1g.10gb", Placement: carvev1.Placement{Start: 0, Size: 1}, GIID: -1, CIID: -1},
			{Kind: carvev1.OpCreateCI, Profile: "1g.10gb", Placement: carvev1.Placement{Start: 0, Size: 1}, GIID: -1, CIID: -1},
		}}}},
		Done: map[int]int{2: 1},
	}
	for step := 1; step <= 2; step++ {
		intent.Done[2] = step
		if err := c.Save(intent); err != nil {
			t.Fatal(err)
		}
		got, err := c.Load()
		if err != nil {
			t.Fatal(err)
		}
		want := intent
		want.Version = carvev1.CheckpointVersion
		// Started is compared with ==, not time.Time.Equal: the same
		// instant in the same location, as it was saved.
		exact := cmp.Comparer(func(a, b time.Time) bool {
			return a == b //nolint:revive,staticcheck // == on purpose, see above
		})
		if diff := cmp.Diff(want, *got, exact); diff != "" {
			t.Fatalf("Load mismatch (-want +got):\n%s", diff)
		}
		if got.OpsDone() != step {
			t.Fatalf("OpsDone = %d, want %d", got.OpsDone(), step)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != intentFile {
		t.Fatalf("state dir holds %v, want only %s", entries, intentFile)
	}
	if err := c.Clear(); err != nil {
		t.Fatal(err)
	}
	if in, err := c.Load(); err != nil || in != nil {
		t.Fatalf("Load after Clear = %v, %v; want nil, nil", in, err)
	}
}

func TestCheckpointsLoadRejects(t *testing.T) {
	tests := []struct{ name, content string }{
		{"not JSON", "{"},
		{"other version", `{"version": 99, "profile": "x"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, intentFile), []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := (&Checkpoints{Dir: dir}).Load(); err == nil {
				t.Fatal("Load accepted a bad checkpoint")
			}
		})
	}
}
