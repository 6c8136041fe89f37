package agent

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/kubeclient/clientset"
)

// TestControllerWithNVIDIALabels: --profile-label nvidia.com/mig.config
// pins the profile (carve.dev/profile no longer does), the state is
// mirrored into nvidia.com/mig.config.state, and with GFD's keys left to
// GFD carve writes only carve.dev/* and the mirrored state.
func TestControllerWithNVIDIALabels(t *testing.T) {
	h := newHarness(t, "h100-80gb*1")
	h.r.Labels = LabelOptions{MIGManagerState: true, CarveOnly: true}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{
		carvev1.LabelMIGManagerConfig: "balanced", carvev1.LabelProfile: "small", "nvidia.com/gpu.product": "written-by-gfd",
	}}}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "carve-system", Name: "carve-profiles"},
		Data: map[string]string{ConfigKey: testProfiles}}
	client := fake.NewClientset(node, cm)
	c := &Controller{
		Client: clientset.Wrap(client), NodeName: "node-1", ConfigMapNamespace: "carve-system", ConfigMapName: "carve-profiles",
		Reconciler: h.r, Logger: slog.New(slog.DiscardHandler), ProfileLabel: carvev1.LabelMIGManagerConfig,
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

	n := waitNode(t, client, "balanced applied", func(n *corev1.Node) bool {
		return n.Labels[carvev1.LabelApplied] == "balanced" && n.Labels[carvev1.LabelState] == carvev1.StateSuccess
	})
	want := map[string]string{
		carvev1.LabelMIGManagerConfig: "balanced", carvev1.LabelProfile: "small", "nvidia.com/gpu.product": "written-by-gfd",
		carvev1.LabelApplied: "balanced", carvev1.LabelSource: "label", carvev1.LabelState: carvev1.StateSuccess,
		carvev1.LabelMIGManagerState: carvev1.MIGManagerSuccess,
	}
	if diff := cmp.Diff(want, n.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}

	// An unknown configuration name: failed, in both state labels.
	n.Labels[carvev1.LabelMIGManagerConfig] = "all-1g.5gb"
	if _, err := client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	n = waitNode(t, client, "state failed", func(n *corev1.Node) bool {
		return n.Labels[carvev1.LabelState] == carvev1.StateFailed
	})
	if got := n.Labels[carvev1.LabelMIGManagerState]; got != carvev1.MIGManagerFailed {
		t.Errorf("%s = %q, want failed", carvev1.LabelMIGManagerState, got)
	}
	rec, err := carvev1.DecodeNodeRecord(n.Annotations[carvev1.AnnotationRecord])
	if err != nil || !strings.Contains(rec.LastError, "node label nvidia.com/mig.config=all-1g.5gb") {
		t.Errorf("record's last error %q (err %v), want one naming the label", rec.LastError, err)
	}
}

func TestCheckProfileLabel(t *testing.T) {
	for _, tt := range []struct {
		key string
		ok  bool
	}{
		{"", true},
		{carvev1.LabelProfile, true},
		{carvev1.LabelMIGManagerConfig, true},
		{"example.com/gpu-profile", true},
		{"gpu-profile", true},
		{carvev1.LabelState, false},
		{"nvidia.com/gpu.product", false},
		{"bad key!", false},
	} {
		if err := CheckProfileLabel(tt.key); (err == nil) != tt.ok {
			t.Errorf("CheckProfileLabel(%q) = %v, want ok=%v", tt.key, err, tt.ok)
		}
	}
}
