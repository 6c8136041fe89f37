package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/rollout"
)

func rolloutLease(name, kind, holder, revision string, renewed time.Time, seconds int32) *coordinationv1.Lease {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "carve-system",
			Labels:      map[string]string{carvev1.LeaseLabelConfigMap: "carve-profiles", carvev1.LeaseLabelKind: kind},
			Annotations: map[string]string{carvev1.LeaseAnnotationRevision: revision}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: new(holder), AcquireTime: new(metav1.NewMicroTime(renewed.Add(-time.Minute))),
			RenewTime: new(metav1.NewMicroTime(renewed))},
	}
	if seconds > 0 {
		l.Spec.LeaseDurationSeconds = new(seconds)
	}
	return l
}

// stuckNode is a GPU node whose record says a change is in progress
// since since, under slot.
func stuckNode(t *testing.T, name, slot string, since time.Time) *corev1.Node {
	t.Helper()
	rec := carvev1.NodeRecord{Profile: "full", State: carvev1.StateApplying, Generation: 4,
		Change: &carvev1.ChangeRecord{Since: since.UTC().Format(time.RFC3339), Profile: "balanced", Slot: slot}}
	return gpuNode(name, map[string]string{carvev1.LabelState: carvev1.StateApplying}, annotation(t, rec), map[string]int64{"nvidia.com/gpu": 0})
}

// setRecordFile makes n's record name the profile ConfigMap file.
func setRecordFile(t *testing.T, n *corev1.Node, file string) {
	t.Helper()
	var rec carvev1.NodeRecord
	if raw, ok := n.Annotations[carvev1.AnnotationRecord]; ok {
		var err error
		if rec, err = carvev1.DecodeNodeRecord(raw); err != nil {
			t.Fatalf("node %s: %v", n.Name, err)
		}
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	rec.ConfigMap = file
	raw, err := rec.Encode()
	if err != nil {
		t.Fatal(err)
	}
	n.Annotations[carvev1.AnnotationRecord] = raw
}

// TestStatusRollout: status shows who holds the slots, who failed on the
// file's revision, and that the rollout is halted; and every slot with a
// holder, an expired one with what its holder's Node says: gone or no
// change in progress (free to take), a change in progress (stuck, with
// since when), or a record that cannot be read. A released slot (no
// holder) is not shown.
func TestStatusRollout(t *testing.T) {
	now := time.Date(2026, 11, 24, 20, 0, 0, 0, time.UTC)
	file := "version: v1\nprofiles:\n  full:\n    - gpus: all\nrollout: {maxUnavailable: 6, maxFailures: 1}\n"
	rev := rollout.Revision(file)
	slot := func(i int) string { return rollout.SlotName("carve-profiles", i) }
	objs := append(statusNodes(t),
		stuckNode(t, "gpu-s", slot(2), now.Add(-20*time.Minute)),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "carve-profiles", Namespace: "carve-system"}, Data: map[string]string{"profiles.yaml": file}},
		rolloutLease(slot(0), rollout.KindSlot, "gpu-a", rev, now.Add(-5*time.Second), 15),
		rolloutLease(slot(1), rollout.KindSlot, "gpu-c", rev, now.Add(-20*time.Second), 15),   // expired, no record
		rolloutLease(slot(2), rollout.KindSlot, "gpu-s", rev, now.Add(-10*time.Minute), 15),   // expired, mid-change: stuck
		rolloutLease(slot(3), rollout.KindSlot, "gpu-gone", rev, now.Add(-3*time.Minute), 15), // expired, no Node
		rolloutLease(slot(4), rollout.KindSlot, "gpu-d", rev, now.Add(-time.Minute), 15),      // expired, record undecodable
		rolloutLease(slot(5), rollout.KindSlot, "", rev, now.Add(-time.Second), 15),           // released
		rolloutLease(rollout.FailureName("carve-profiles", "gpu-b"), rollout.KindFailure, "gpu-b", rev, now.Add(-time.Hour), 0),
		rolloutLease(rollout.FailureName("carve-profiles", "gpu-e"), rollout.KindFailure, "gpu-e", "older", now.Add(-time.Hour), 0),
	)
	// The records of gpu-a, gpu-b and gpu-c name the file; gpu-s's names
	// another one, and a member Lease an earlier version left counts for
	// nothing.
	for _, o := range objs {
		if n, ok := o.(*corev1.Node); ok {
			switch n.Name {
			case "gpu-a", "gpu-b", "gpu-c":
				setRecordFile(t, n, "carve-system/carve-profiles")
			case "gpu-s":
				setRecordFile(t, n, "carve-system/other-profiles")
			}
		}
	}
	objs = append(objs, rolloutLease(rollout.MemberName("carve-profiles", "gpu-s"), rollout.KindMember, "gpu-s", "", now.Add(-time.Minute), 1800))
	cs := fake.NewClientset(objs...)
	q := statusQuery{output: "table", namespace: "carve-system", configMap: "carve-profiles", now: now}
	var out strings.Builder
	if err := status(context.Background(), cs, "https://test", q, &out); err != nil {
		t.Fatal(err)
	}
	_, table, _ := strings.Cut(out.String(), "\nRollout of")
	var lines []string
	for l := range strings.Lines("Rollout of" + table) {
		lines = append(lines, strings.TrimRight(l, "\n"))
	}
	want := []string{
		"Rollout of carve-system/carve-profiles (revision " + rev + "; maxUnavailable 6, maxFailures 1): 3 nodes",
		"  slot " + slot(0) + ": gpu-a, for 1m5s",
		"  slot " + slot(1) + ": gpu-c (state success), expired 5s ago, no change in progress: free to take",
		"  slot " + slot(2) + ": STUCK: gpu-s (state applying) mid-change since 2026-11-24T19:40:00Z (20m0s ago), slot expired since 2026-11-24T19:50:15Z (expired 9m45s ago); " +
			"not taken over, it counts against maxUnavailable until the agent renews it or it is released (carvectl rollout release gpu-s)",
		"  slot " + slot(3) + ": gpu-gone, expired 2m45s ago; node gpu-gone is gone: free to take",
		"  slot " + slot(4) + ": gpu-d, expired 45s ago; node gpu-d: annotation carve.dev/partition: ",
		"  HALTED: 1 of at most 1 nodes failed on this revision (gpu-b); no further node starts a disruptive change until the file changes",
	}
	if len(lines) != len(want) {
		t.Fatalf("rollout lines (-want +got):\n%s", cmp.Diff(want, lines))
	}
	for i := range want {
		if !strings.HasPrefix(lines[i], want[i]) {
			t.Errorf("line %d:\n got %s\nwant %s", i, lines[i], want[i])
		}
	}

	rows, err := nodeStatuses(context.Background(), cs, "")
	if err != nil {
		t.Fatal(err)
	}
	ro := rolloutOf(context.Background(), cs, "carve-system", "carve-profiles", now)
	type part struct {
		Rollout string
		Slot    *nodeSlot
	}
	got := map[string]part{}
	for _, r := range rows {
		if r = ro.mark(r); r.Rollout != "" {
			got[r.Node] = part{r.Rollout, r.Slot}
		}
	}
	since := func(ago time.Duration) time.Time { return now.Add(-ago - time.Minute) }
	expired := func(ago time.Duration) *time.Time { return new(now.Add(-ago)) }
	wantParts := map[string]part{
		"gpu-a": {"slot", &nodeSlot{Name: slot(0), Since: since(5 * time.Second)}},
		"gpu-b": {"failed", nil},
		"gpu-c": {"expired", &nodeSlot{Name: slot(1), Since: since(20 * time.Second), ExpiredAt: expired(5 * time.Second)}},
		"gpu-d": {"expired", &nodeSlot{Name: slot(4), Since: since(time.Minute), ExpiredAt: expired(45 * time.Second)}},
		"gpu-s": {"stuck", &nodeSlot{Name: slot(2), Since: since(10 * time.Minute), ExpiredAt: expired(9*time.Minute + 45*time.Second),
			Stuck: true, MidChangeSince: "2026-11-24T19:40:00Z"}},
	}
	if diff := cmp.Diff(wantParts, got); diff != "" {
		t.Errorf("rollout parts (-want +got):\n%s", diff)
	}
}
