package agent

import (
	"testing"
)

// BenchmarkReconcileSteady is one reconcile of an 8-GPU DGX H100 whose
// profile is already realised: what every label, ConfigMap or timer event
// costs the agent when nothing changes (read the GPUs, select, plan, and
// advertise the same devices).
func BenchmarkReconcileSteady(b *testing.B) {
	h := newHarness(b, "dgx-h100")
	f := h.parse(testProfiles)
	h.reconcile(f, nil, "balanced")
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		h.reconcile(f, nil, "balanced")
	}
}

// BenchmarkReconcileRepartition is one reconcile that repartitions an
// 8-GPU DGX H100 (simulated) between two MIG profiles, with checkpoints
// written to disk before and after every op: the agent's own share of a
// repartition (real NVML calls take far longer than the simulator's).
func BenchmarkReconcileRepartition(b *testing.B) {
	h := newHarness(b, "dgx-h100")
	f := h.parse(testProfiles)
	profiles := [2]string{"balanced", "small"}
	h.reconcile(f, nil, profiles[1])
	b.ReportAllocs()
	b.ResetTimer()
	i, ops := 0, 0
	for b.Loop() {
		res := h.reconcile(f, nil, profiles[i%2])
		if res.OpsApplied == 0 {
			b.Fatalf("reconcile to %s made no op", profiles[i%2])
		}
		ops += res.OpsApplied
		i++
	}
	b.ReportMetric(float64(ops)/float64(i), "ops/reconcile")
}
