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

// TestStatusRollout: status shows who holds the slots, who failed on the
// file's revision, and that the rollout is halted.
func TestStatusRollout(t *testing.T) {
	now := time.Date(2026, 11, 24, 20, 0, 0, 0, time.UTC)
	file := "version: v1\nprofiles:\n  full:\n    - gpus: all\nrollout: {maxUnavailable: 2, maxFailures: 1}\n"
	rev := rollout.Revision(file)
	objs := append(statusNodes(t),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "carve-profiles", Namespace: "carve-system"}, Data: map[string]string{"profiles.yaml": file}},
		rolloutLease(rollout.SlotName("carve-profiles", 0), rollout.KindSlot, "gpu-a", rev, now.Add(-5*time.Second), 15),
		rolloutLease(rollout.SlotName("carve-profiles", 1), rollout.KindSlot, "gpu-c", rev, now.Add(-20*time.Second), 15), // expired
		rolloutLease(rollout.FailureName("carve-profiles", "gpu-b"), rollout.KindFailure, "gpu-b", rev, now.Add(-time.Hour), 0),
		rolloutLease(rollout.FailureName("carve-profiles", "gpu-e"), rollout.KindFailure, "gpu-e", "older", now.Add(-time.Hour), 0),
	)
	for _, n := range []string{"gpu-a", "gpu-b", "gpu-c"} {
		objs = append(objs, rolloutLease(rollout.MemberName("carve-profiles", n), rollout.KindMember, n, "", now.Add(-time.Minute), 1800))
	}
	cs := fake.NewClientset(objs...)
	q := statusQuery{output: "table", namespace: "carve-system", configMap: "carve-profiles", now: now}
	var out strings.Builder
	if err := status(context.Background(), cs, "https://test", q, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Rollout of carve-system/carve-profiles (revision " + rev + "; maxUnavailable 2, maxFailures 1): 3 nodes",
		"slot " + rollout.SlotName("carve-profiles", 0) + ": gpu-a, for 1m5s",
		"HALTED: 1 of at most 1 nodes failed on this revision (gpu-b)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "gpu-c, for") {
		t.Errorf("an expired slot shown as held:\n%s", out.String())
	}

	rows, err := nodeStatuses(context.Background(), cs, "")
	if err != nil {
		t.Fatal(err)
	}
	ro := rolloutOf(context.Background(), cs, "carve-system", "carve-profiles", now)
	got := map[string]string{}
	for _, r := range rows {
		if part := ro.partOf(r.Node); part != "" {
			got[r.Node] = part
		}
	}
	if diff := cmp.Diff(map[string]string{"gpu-a": "slot", "gpu-b": "failed"}, got); diff != "" {
		t.Errorf("rollout parts (-want +got):\n%s", diff)
	}
}
