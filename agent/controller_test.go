package agent

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/internal/apitest"
	"github.com/carve-dev/carve/kubeclient/clientset"
	"github.com/carve-dev/carve/plugin"
)

// waitNode polls the fake API server until cond holds for the Node.
func waitNode(t *testing.T, client *fake.Clientset, what string, cond func(*corev1.Node) bool) *corev1.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		n, err := client.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
		if err == nil && cond(n) {
			return n
		}
		select {
		case <-ctx.Done():
			t.Fatalf("node never got %s; last: %+v (err %v)", what, n.GetLabels(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func TestControllerRecordsOnTheNode(t *testing.T) {
	h := newHarness(t, "h100-80gb*1")
	// carve wrote mig-4g.40gb.count before (its record says so); GPU
	// feature discovery wrote mig-7g.80gb.count.
	prev, err := carvev1.NodeRecord{Generation: 1, Labels: []string{"nvidia.com/mig-4g.40gb.count"}}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{
		"pool": "inference", "carve.dev/profile": "balanced", "nvidia.com/mig-7g.80gb.count": "1", "nvidia.com/mig-4g.40gb.count": "1",
	}, Annotations: map[string]string{carvev1.AnnotationRecord: prev}}}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "carve-system", Name: "carve-profiles"},
		Data: map[string]string{ConfigKey: testProfiles}}
	client := fake.NewClientset(node, cm)
	events := record.NewFakeRecorder(100)
	c := &Controller{
		Client: clientset.Wrap(client), NodeName: "node-1", ConfigMapNamespace: "carve-system", ConfigMapName: "carve-profiles",
		Reconciler: h.r, Events: events, Logger: slog.New(slog.DiscardHandler),
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
	if n.Labels["pool"] != "inference" || n.Labels["carve.dev/profile"] != "balanced" {
		t.Fatalf("labels the agent does not own changed: %v", n.Labels)
	}
	if n.Labels["nvidia.com/mig-7g.80gb.count"] != "1" {
		t.Fatalf("a label carve did not write changed: %v", n.Labels)
	}
	if _, ok := n.Labels["nvidia.com/mig-4g.40gb.count"]; ok {
		t.Fatal("a stale label carve wrote before was not removed")
	}
	p, err := carvev1.DecodeNodeRecord(n.Annotations[carvev1.AnnotationRecord])
	if err != nil || p.Profile != "balanced" || len(p.GPUs) != 1 {
		t.Fatalf("annotation %+v, %v", p, err)
	}
	select {
	case e := <-events.Events:
		if !strings.Contains(e, carvev1.ReasonRepartitioned) {
			t.Fatalf("event %q, want %s", e, carvev1.ReasonRepartitioned)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
	}

	// Replicas change in the ConfigMap: followed without a MIG operation.
	h.m.ResetOpLog()
	cm.Data[ConfigKey] = strings.Replace(testProfiles, "replicas: {1g.10gb: 2}", "replicas: {1g.10gb: 4}", 1)
	if _, err := client.CoreV1().ConfigMaps("carve-system").Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNode(t, client, "1g.10gb replicas 4", func(n *corev1.Node) bool {
		return n.Labels["nvidia.com/mig-1g.10gb.replicas"] == "4"
	})
	if ops := h.m.OpLog(); len(ops) != 0 {
		t.Fatalf("replica change touched the GPUs: %v", ops)
	}

	// A broken file: failed, GPUs untouched, Warning event.
	cm.Data[ConfigKey] = "version: v1\nprofles: {}\n"
	if _, err := client.CoreV1().ConfigMaps("carve-system").Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNode(t, client, "state failed", func(n *corev1.Node) bool { return n.Labels[carvev1.LabelState] == carvev1.StateFailed })
	if ops := h.m.OpLog(); len(ops) != 0 {
		t.Fatalf("broken file touched the GPUs: %v", ops)
	}
	for {
		select {
		case e := <-events.Events:
			if strings.HasPrefix(e, "Warning "+carvev1.ReasonConfigRejected) {
				return
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no ConfigRejected warning")
		}
	}
}

// TestControllerEvict: each pod holding devices is evicted once, through the
// Eviction API; a refusal (a PodDisruptionBudget) is a Warning Event, an
// accepted eviction a Normal one.
func TestControllerEvict(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	client := fake.NewClientset(node)
	var evicted []string
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev, ok := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		if !ok {
			return true, nil, fmt.Errorf("eviction of %T", a.(k8stesting.CreateAction).GetObject())
		}
		key := ev.Namespace + "/" + ev.Name
		evicted = append(evicted, key)
		if ev.Name == "guarded" {
			return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10)
		}
		return true, nil, nil
	})
	events := record.NewFakeRecorder(10)
	c := &Controller{Client: clientset.Wrap(client), NodeName: "node-1", Events: events, Logger: slog.New(slog.DiscardHandler)}
	c.evict(context.Background(), node, []plugin.Assignment{
		{Namespace: "ml", Pod: "train", Container: "a", UUIDs: []string{"MIG-1"}},
		{Namespace: "ml", Pod: "train", Container: "b", UUIDs: []string{"MIG-2"}},
		{Namespace: "ml", Pod: "guarded", Container: "a", UUIDs: []string{"MIG-3"}},
	})
	if diff := cmp.Diff([]string{"ml/train", "ml/guarded"}, evicted); diff != "" {
		t.Errorf("evictions asked for (-want +got):\n%s", diff)
	}
	var got []string
	for range 2 {
		select {
		case e := <-events.Events:
			got = append(got, e)
		case <-time.After(5 * time.Second):
			t.Fatalf("events %q, want 2", got)
		}
	}
	want := []string{
		"Normal Evicted evicted pod ml/train through the Eviction API: it holds devices a change removes",
		"Warning Evicting evicting pod ml/guarded refused: Cannot evict pod as it would violate the pod's disruption budget.",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// TestControllerPatchState: while an apply runs, only carve.dev/state
// changes on the Node.
func TestControllerPatchState(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{
		carvev1.LabelState: carvev1.StateSuccess, carvev1.LabelApplied: "full", "pool": "a",
	}}}
	client := fake.NewClientset(node)
	c := &Controller{Client: clientset.Wrap(client), NodeName: "node-1", Logger: slog.New(slog.DiscardHandler)}
	c.RecordApplying(context.Background(), "balanced", nil)
	n, err := client.CoreV1().Nodes().Get(context.Background(), "node-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{carvev1.LabelState: carvev1.StateApplying, carvev1.LabelApplied: "full", "pool": "a"}
	if diff := cmp.Diff(want, n.Labels); diff != "" {
		t.Errorf("labels after RecordApplying (-want +got):\n%s", diff)
	}
	var patches int
	for _, a := range client.Actions() {
		if a.GetVerb() == "patch" {
			patches++
		}
	}
	if patches != 1 {
		t.Errorf("%d patches, want 1", patches)
	}
}

func TestInputLabelsChanged(t *testing.T) {
	tests := []struct {
		name     string
		old, cur map[string]string
		want     bool
	}{
		{"the agent's own state flip", map[string]string{"pool": "a", carvev1.LabelState: "applying"}, map[string]string{"pool": "a", carvev1.LabelState: "failed"}, false},
		{"state set the first time", map[string]string{"pool": "a"}, map[string]string{"pool": "a", carvev1.LabelState: "success"}, false},
		{"a pin", map[string]string{carvev1.LabelState: "success"}, map[string]string{carvev1.LabelState: "success", carvev1.LabelProfile: "small"}, true},
		{"another label", map[string]string{"pool": "a"}, map[string]string{"pool": "b"}, true},
		{"the applied profile", map[string]string{carvev1.LabelApplied: "full"}, map[string]string{carvev1.LabelApplied: "small"}, true},
	}
	for _, tt := range tests {
		if got := inputLabelsChanged(tt.old, tt.cur); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestControllerDiffsAgainstItsOwnWrites: a pass diffs its result against
// the newest Node the agent knows, the informer's copy or the Node its own
// latest write returned. Here the informer's copy stays behind the writes
// of the pass (the state applying, the record): the pass still sets the
// state back to success, and a second pass on the same old copy writes
// nothing. Diffing against the old copy alone leaves the node saying
// applying, and writes the record again.
func TestControllerDiffsAgainstItsOwnWrites(t *testing.T) {
	h := newHarness(t, "h100-80gb*1")
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "node-1-uid", Labels: map[string]string{
		"carve.dev/profile": "balanced", carvev1.LabelState: carvev1.StateSuccess,
	}}}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "carve-system", Name: "carve-profiles"},
		Data: map[string]string{ConfigKey: testProfiles}}
	client, _ := apitest.NewStrict(node, cm) // every write a new resourceVersion, as on the real server
	c := &Controller{
		Client: clientset.Wrap(client), NodeName: "node-1", ConfigMapNamespace: "carve-system", ConfigMapName: "carve-profiles",
		Reconciler: h.r, Logger: slog.New(slog.DiscardHandler),
	}
	h.r.Hooks.BeforeApply = c.RecordApplying
	stale, err := client.CoreV1().Nodes().Get(context.Background(), "node-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodes, cms := cache.NewStore(cache.MetaNamespaceKeyFunc), cache.NewStore(cache.MetaNamespaceKeyFunc)
	if err := nodes.Add(stale); err != nil { // the informer's copy, never updated
		t.Fatal(err)
	}
	if err := cms.Add(cm); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, _, err := c.sync(ctx, nodes, cms); err != nil {
		t.Fatal(err)
	}
	n, err := client.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Labels[carvev1.LabelState]; got != carvev1.StateSuccess || n.Labels[carvev1.LabelApplied] != "balanced" {
		t.Fatalf("after the pass that applied balanced: state %q, applied %q; want success, balanced", got, n.Labels[carvev1.LabelApplied])
	}
	client.ClearActions()
	if _, _, err := c.sync(ctx, nodes, cms); err != nil {
		t.Fatal(err)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() == "patch" {
			t.Errorf("a pass with nothing to do patched the Node again: %s", a.(k8stesting.PatchAction).GetPatch())
		}
	}
}
