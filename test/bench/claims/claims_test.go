package claims

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/carve-dev/carve/test/cluster"
	"github.com/carve-dev/carve/test/harness"
)

// TestMeasureShort runs the measurement in short mode on the local cluster
// and checks what the table says of it, never how fast: every static
// sample got a device of GPU 0 and every dynamic one a device of GPU 1 of
// its profile, made after the claim was allocated and before the pod ran,
// no sooner than the NVML calls allow (Measure itself checks that each
// dynamic device is destroyed after its claim and that GPU 0 keeps its
// seven instances).
func TestMeasureShort(t *testing.T) {
	c := cluster.ForTest(t, cluster.Options{NodeName: "bench-claims"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root, err := harness.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	bin, err := harness.BuildAgent(ctx, root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	res, err := Measure(ctx, Options{Cluster: c, Agent: bin, Short: true, Log: &log})
	t.Log(log.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Series) != len(Kinds()) || res.Make != 300*time.Millisecond {
		t.Fatalf("%d series, NVML make time %s; want %d, 300ms", len(res.Series), res.Make, len(Kinds()))
	}
	for _, s := range res.Series {
		if len(s.Samples) != SamplesShort {
			t.Errorf("%s: %d samples, want %d", s.Kind.Name, len(s.Samples), SamplesShort)
		}
		prefix := "gpu-0-mig-" + strings.ReplaceAll(s.Kind.Profile, ".", "") + "-"
		if s.Kind.Dynamic {
			prefix = "gpu-1-dyn-" + strings.ReplaceAll(s.Kind.Profile, ".", "") + "-"
		}
		for i, x := range s.Samples {
			checkSample(t, s.Kind, i, x, prefix, res.Make)
		}
	}
	tables := Tables(res, true)
	for _, tb := range tables {
		if err := tb.Check(); err != nil {
			t.Error(err)
		}
		t.Log("\n" + tb.Markdown())
	}
}

// checkSample checks one sample's device and the order of its stages.
func checkSample(t *testing.T, kind Kind, i int, x Sample, prefix string, calls time.Duration) {
	t.Helper()
	if !strings.HasPrefix(x.Device, prefix) {
		t.Errorf("%s, sample %d: allocated %q, want a device %s*", kind.Name, i+1, x.Device, prefix)
	}
	if x.Allocated <= 0 || x.Running <= x.Allocated {
		t.Errorf("%s, sample %d: allocated after %s, running after %s", kind.Name, i+1, x.Allocated, x.Running)
	}
	if !kind.Dynamic {
		if x.Made != 0 {
			t.Errorf("%s, sample %d: a device made after %s for a static device", kind.Name, i+1, x.Made)
		}
		return
	}
	// The watch sees the allocation a few milliseconds after it was
	// written; the calls start after it.
	if x.Made-x.Allocated < calls-50*time.Millisecond || x.Made >= x.Running {
		t.Errorf("%s, sample %d: allocated after %s, device made after %s (NVML calls %s), running after %s",
			kind.Name, i+1, x.Allocated, x.Made, calls, x.Running)
	}
}
