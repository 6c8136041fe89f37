package dra

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/dra/partitionable"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
)

// recordedMetrics keeps what the driver told its Metrics.
type recordedMetrics struct {
	prepared, unprepared []string // "dynamic|static failure"
	tookZero             bool
}

func kindWord(dynamic bool) string {
	if dynamic {
		return "dynamic"
	}
	return "static"
}

func (r *recordedMetrics) ClaimPrepared(dynamic bool, took time.Duration, failure string) {
	r.prepared = append(r.prepared, kindWord(dynamic)+" "+failure)
	r.tookZero = r.tookZero || took <= 0
}

func (r *recordedMetrics) ClaimUnprepared(dynamic bool, took time.Duration, failure string) {
	r.unprepared = append(r.unprepared, kindWord(dynamic)+" "+failure)
	r.tookZero = r.tookZero || took <= 0
}

// TestMetricsOfPrepares: each claim a call prepares is told to Metrics
// once, as dynamic when it is allocated a dynamic device, with why it
// failed; a claim answered again and one unprepared that was never
// prepared are not counted; a refused make counts as make.
func TestMetricsOfPrepares(t *testing.T) {
	m := dynamicMachine(t)
	d := dynamicNode(t, m, t.TempDir())
	rec := &recordedMetrics{}
	d.cfg.Metrics = rec
	ctx := context.Background()
	if err := m.InjectFault(sim.Fault{Call: "CreateComputeInstance", GPU: 1, Err: partition.ErrInsufficientResources, Times: 1}); err != nil {
		t.Fatal(err)
	}
	claims := []*resourceapi.ResourceClaim{
		claim("refused", "refused", "gpu-1-dyn-2g20gb-2"),
		claim("big", "big", "gpu-1-dyn-3g40gb-4"),
		claim("static", "static", "gpu-0"),
		claim("nowhere", "nowhere", "gpu-9"),
		claim("taken", "taken", "gpu-0"),
		claim("empty", "empty"),
	}
	if _, err := d.PrepareResourceClaims(ctx, claims); err != nil {
		t.Fatal(err)
	}
	if _, err := d.PrepareResourceClaims(ctx, claims[1:2]); err != nil { // answered again
		t.Fatal(err)
	}
	_, err := d.UnprepareResourceClaims(ctx, []ClaimRef{{Namespace: "ns", Name: "big", UID: "big"}, {Namespace: "ns", Name: "static", UID: "static"}, {Namespace: "ns", Name: "never", UID: "never"}})
	if err != nil {
		t.Fatal(err)
	}
	want := &recordedMetrics{
		prepared:   []string{"dynamic " + FailureMake, "dynamic ", "static ", "static " + FailureUnknownDevice, "static " + FailureDeviceHeld, "static " + FailureNotAllocated},
		unprepared: []string{"dynamic ", "static "},
	}
	if diff := cmp.Diff(want, rec, cmp.AllowUnexported(recordedMetrics{})); diff != "" {
		t.Errorf("Metrics told (-want +got):\n%s", diff)
	}
}

// TestMetricsOfFailedUnprepare: a MIG device that cannot be destroyed
// fails its claim's unprepare as destroy.
func TestMetricsOfFailedUnprepare(t *testing.T) {
	m := dynamicMachine(t)
	d := dynamicNode(t, m, t.TempDir())
	rec := &recordedMetrics{}
	d.cfg.Metrics = rec
	ctx := context.Background()
	if res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim("c1", "c1", "gpu-1-dyn-1g10gb-6")}); err != nil || res["c1"].Err != nil {
		t.Fatal(err, res["c1"].Err)
	}
	if err := m.InjectFault(sim.Fault{Call: "DestroyComputeInstance", GPU: 1, Err: errors.New("stuck"), Times: 1}); err != nil {
		t.Fatal(err)
	}
	un, err := d.UnprepareResourceClaims(ctx, []ClaimRef{{Namespace: "ns", Name: "c1", UID: "c1"}})
	if err != nil || un["c1"] == nil {
		t.Fatalf("unprepare = %v %v, want the claim's error", err, un)
	}
	if diff := cmp.Diff([]string{"dynamic " + FailureDestroy}, rec.unprepared); diff != "" {
		t.Errorf("unprepares told (-want +got):\n%s", diff)
	}
}

// TestMadeInstancesAndLargestPlaceable: the MIG devices made for claims
// are listed with their claims' names, by placement; the largest
// profile still placeable on the GPU follows them.
func TestMadeInstancesAndLargestPlaceable(t *testing.T) {
	m := dynamicMachine(t)
	d := dynamicNode(t, m, t.TempDir())
	ctx := context.Background()
	largest := func() string {
		t.Helper()
		ps, err := d.LargestPlaceable()
		if err != nil || len(ps) != 1 || ps[0].GPUIndex != 1 {
			t.Fatalf("LargestPlaceable = %+v, %v; want GPU 1's", ps, err)
		}
		return ps[0].Profile
	}
	if got := largest(); got != "7g.80gb" {
		t.Errorf("empty GPU: largest placeable %q, want 7g.80gb", got)
	}
	for _, c := range []*resourceapi.ResourceClaim{claim("u-small", "small", "gpu-1-dyn-1g10gb-3"), claim("u-big", "big", "gpu-1-dyn-3g40gb-4")} {
		if res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c}); err != nil || res[c.UID].Err != nil {
			t.Fatal(err, res[c.UID].Err)
		}
	}
	var got []string
	for _, mi := range d.MadeInstances() {
		got = append(got, mi.Device+" "+mi.Namespace+"/"+mi.Name+" "+mi.Instance.State)
	}
	want := []string{"gpu-1-dyn-1g10gb-3 ns/small made", "gpu-1-dyn-3g40gb-4 ns/big made"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("MadeInstances (-want +got):\n%s", diff)
	}
	if got := largest(); got != "2g.20gb" {
		t.Errorf("3g.40gb at 4:4 and 1g.10gb at 3:1: largest placeable %q, want 2g.20gb", got)
	}
}

// TestLargestPlaceable computes the figure over made instances for
// offered profile lists.
func TestLargestPlaceable(t *testing.T) {
	h100 := model(t, "H100-80GB")
	made := func(profile string, start, size int) carvev1.ClaimInstance {
		p, ok := h100.Profile(profile)
		if !ok {
			t.Fatalf("no profile %s", profile)
		}
		return carvev1.ClaimInstance{Profile: profile, ProfileID: p.ID, Placement: carvev1.Placement{Start: start, Size: size}}
	}
	small, big := made("1g.10gb", 3, 1), made("3g.40gb", 4, 4)
	for _, tc := range []struct {
		name     string
		profiles []string
		made     []carvev1.ClaimInstance
		want     string
	}{
		{"empty, every profile", nil, nil, "7g.80gb"},
		{"empty, 1g and 3g", []string{"1g.10gb", "3g.40gb"}, nil, "3g.40gb"},
		{"3g at 4:4, every profile", nil, []carvev1.ClaimInstance{big}, "4g.40gb"},
		{"3g at 4:4, 1g and 3g", []string{"1g.10gb", "3g.40gb"}, []carvev1.ClaimInstance{big}, "3g.40gb"},
		{"3g at 4:4 and 1g at 3:1, 1g and 3g", []string{"1g.10gb", "3g.40gb"}, []carvev1.ClaimInstance{big, small}, "1g.10gb"},
		{"3g at 4:4 and 1g at 3:1, every profile", nil, []carvev1.ClaimInstance{big, small}, "2g.20gb"},
		{"7g", nil, []carvev1.ClaimInstance{made("7g.80gb", 0, 8)}, ""},
		{"two 3g: no compute slice for a 1g", []string{"1g.10gb", "3g.40gb"}, []carvev1.ClaimInstance{big, made("3g.40gb", 0, 4)}, ""},
		{"a made profile no longer offered blocks its slices", []string{"1g.10gb"}, []carvev1.ClaimInstance{made("4g.40gb", 0, 4), made("3g.40gb", 4, 4)}, ""},
	} {
		l, err := partitionable.NewLayout(h100, tc.profiles)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := largestPlaceable(l, tc.made)
		if got.Name != tc.want {
			t.Errorf("%s: largest placeable %q, want %q", tc.name, got.Name, tc.want)
		}
	}
}
