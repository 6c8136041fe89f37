package dra

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/carve-dev/carve/internal/testclock"
	"github.com/carve-dev/carve/kubeclient/clientset"
	"github.com/carve-dev/carve/xidhealth"
	"github.com/carve-dev/carve/xidpolicy"
)

// TestXIDTaints: a device an XID keeps unhealthy carries the XID taint in
// the slice, with the effect the policy gives its class (critical
// NoExecute, recoverable NoSchedule here); an ignored XID taints nothing;
// the agent's reset of the GPU lifts the taint, and so does the quiet
// period of a recoverable XID.
func TestXIDTaints(t *testing.T) {
	m, gpus := simGPUs(t, "h100-80gb*2")
	policy := xidpolicy.Default()
	policy.Recoverable, policy.Quiet = []uint64{48}, time.Hour
	policy.RecoverableTaint, policy.CriticalTaint = xidpolicy.NoSchedule, xidpolicy.NoExecute
	now := testclock.New(time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC))
	cs := newFake()
	d, err := New(Config{Client: clientset.Wrap(cs), NodeName: node, CDIDir: t.TempDir(), GPUs: m, Logger: slog.New(slog.DiscardHandler),
		Health: xidhealth.Options{Policy: policy, Poll: 10 * time.Millisecond, Now: now.Now, BootID: func() (string, error) { return "b", nil }}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); d.health.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if err := d.Advertise(ctx, gpus, expand(t, gpus, nil)); err != nil {
		t.Fatal(err)
	}
	taints := func() map[string]string {
		out := map[string]string{}
		for _, dev := range slicesOf(t, cs)[0].Spec.Devices {
			for _, tn := range dev.Taints {
				out[dev.Name] = tn.Key + "=" + tn.Value + ":" + string(tn.Effect)
			}
		}
		return out
	}
	waitTaints := func(what string, want map[string]string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			got := taints()
			if cmp.Equal(want, got) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: taints (-want +got):\n%s", what, cmp.Diff(want, got))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitTaints("before any XID", map[string]string{})
	if err := m.RaiseXID(0, 79, -1, -1); err != nil {
		t.Fatal(err)
	}
	waitTaints("critical XID 79 on GPU 0", map[string]string{"gpu-0": TaintXID + "=79:NoExecute"})
	if err := m.RaiseXID(1, 13, -1, -1); err != nil {
		t.Fatal(err)
	}
	if err := m.RaiseXID(1, 48, -1, -1); err != nil {
		t.Fatal(err)
	}
	waitTaints("ignored 13, recoverable 48 on GPU 1", map[string]string{"gpu-0": TaintXID + "=79:NoExecute", "gpu-1": TaintXID + "=48:NoSchedule"})
	d.GPUReset(gpus[0].UUID)
	waitTaints("GPU 0 reset", map[string]string{"gpu-1": TaintXID + "=48:NoSchedule"})
	now.Add(time.Hour)
	waitTaints("GPU 1's quiet period over", map[string]string{})
}
