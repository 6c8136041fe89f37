package agent

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/kubeclient/clientset"
	"github.com/carve-dev/carve/partition/sim"
)

// logRecorder is a slog.Handler that keeps the records with a given
// message, with their time and attributes.
type logRecorder struct {
	mu      sync.Mutex
	msg     string
	records []slog.Record
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	if r.Message != l.msg {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r.Clone())
	return nil
}

func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

// durations returns the value of attribute key of each record kept.
func (l *logRecorder) durations(key string) []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []time.Duration
	for _, r := range l.records {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == key {
				out = append(out, a.Value.Duration())
			}
			return true
		})
	}
	return out
}

// TestControllerRetriesAFailedApplyWithBackoff: an apply whose first NVML
// call fails three passes in a row ends failed each time and is retried
// 0.5, 1 and 2 s later (not after the 30 s retry interval the pass asks
// for), then converges once the fault is gone.
func TestControllerRetriesAFailedApplyWithBackoff(t *testing.T) {
	h := newHarness(t, "h100-80gb*1")
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{carvev1.LabelProfile: "full"}}}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "carve-system", Name: "carve-profiles"},
		Data: map[string]string{ConfigKey: testProfiles}}
	client := fake.NewClientset(node, cm)
	retries := &logRecorder{msg: "reconcile ended failed; retrying with backoff"}
	c := &Controller{
		Client: clientset.Wrap(client), NodeName: "node-1", ConfigMapNamespace: "carve-system", ConfigMapName: "carve-profiles",
		Reconciler: h.r, Logger: slog.New(retries),
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	// The node carries carve's labels for a pinned profile: the failed
	// passes change none of them (but carve.dev/state), so none starts a
	// pass at once.
	waitNode(t, client, "full applied", func(n *corev1.Node) bool {
		return n.Labels[carvev1.LabelApplied] == "full" && n.Labels[carvev1.LabelState] == carvev1.StateSuccess
	})
	if err := h.m.InjectFault(sim.Fault{Call: "SetMIGMode", GPU: -1, Err: errNVML, Times: 3}); err != nil {
		t.Fatal(err)
	}
	n, err := client.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Labels[carvev1.LabelProfile] = "balanced"
	start := time.Now()
	if _, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	waitNode(t, client, "balanced applied", func(n *corev1.Node) bool {
		return n.Labels[carvev1.LabelApplied] == "balanced" && n.Labels[carvev1.LabelState] == carvev1.StateSuccess
	})
	took := time.Since(start)
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second}
	if diff := cmp.Diff(want, retries.durations("retryIn")); diff != "" {
		t.Errorf("retry delays (-want +got):\n%s", diff)
	}
	if took < 3500*time.Millisecond || took > 20*time.Second {
		t.Errorf("converged after %s, want after the three retries (3.5 s) and well before the retry interval", took)
	}
	failed := 0
	for _, op := range h.mutations() {
		if op.Err != nil {
			failed++
		}
	}
	if failed != 3 {
		t.Errorf("%d failed NVML calls, want 3: %v", failed, h.mutations())
	}
}
