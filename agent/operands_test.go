package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/kubeclient/clientset"
	"github.com/carve-dev/carve/partition"
)

const (
	exporterLabel = "nvidia.com/gpu.deploy.dcgm-exporter"
	dcgmLabel     = "nvidia.com/gpu.deploy.dcgm"
)

// fakeOperands records what it was asked, with the GPU ops done by then,
// and applies it to the harness's node labels as the API server would.
type fakeOperands struct {
	h     *harness
	calls []string
	fail  error
	// evicted is what Pause says it evicted.
	evicted []string
	// killed makes Restore fail, as an agent killed mid-change never
	// restores.
	killed bool
}

func (o *fakeOperands) Pause(_ context.Context, keys []string) ([]string, error) {
	o.calls = append(o.calls, "pause "+strings.Join(keys, ",")+" after "+itoa(len(o.h.mutations()))+" ops")
	if o.fail != nil {
		return nil, o.fail
	}
	for _, k := range keys {
		o.h.labels[k] = carvev1.OperandPaused
	}
	return o.evicted, nil
}

func (o *fakeOperands) Restore(_ context.Context, values map[string]string) error {
	o.calls = append(o.calls, "restore after "+itoa(len(o.h.mutations()))+" ops")
	if o.killed {
		return errCrash
	}
	maps.Copy(o.h.labels, values)
	return nil
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestOperandsToPause(t *testing.T) {
	names := []string{"dcgm-exporter", "dcgm", "nvsm"}
	tests := []struct {
		name   string
		labels map[string]string
		paused map[string]string
		want   map[string]string
	}{
		{"none on the node", map[string]string{"pool": "a"}, nil, nil},
		{"the node's values", map[string]string{exporterLabel: "true", dcgmLabel: "on"}, nil, map[string]string{exporterLabel: "true", dcgmLabel: "on"}},
		{"an operand off on the node stays off", map[string]string{exporterLabel: "true", dcgmLabel: "false"}, nil, map[string]string{exporterLabel: "true"}},
		{"paused by someone else: not carve's", map[string]string{exporterLabel: carvev1.OperandPaused}, nil, nil},
		{"paused by this agent before a crash: the recorded value wins", map[string]string{exporterLabel: carvev1.OperandPaused, dcgmLabel: "true"},
			map[string]string{exporterLabel: "true"}, map[string]string{exporterLabel: "true", dcgmLabel: "true"}},
		{"operands not named are left alone", map[string]string{"nvidia.com/gpu.deploy.driver": "true"}, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, operandsToPause(tt.labels, names, tt.paused)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// A disruptive change pauses the node's operands before its first op,
// with their values in the checkpoint, and restores them after its last; a
// change that destroys nothing pauses nothing; a failed pause applies
// nothing and restores at once.
func TestReconcilePausesOperands(t *testing.T) {
	h := newHarness(t, "h100-80gb*1")
	ops := &fakeOperands{h: h, evicted: []string{"serving/gpu-client"}}
	h.r.Operands, h.r.OperandNames = ops, []string{"dcgm-exporter", "dcgm"}
	h.labels[exporterLabel] = "true"
	f := h.parse(testProfiles)
	h.reconcile(f, nil, "full")
	if len(ops.calls) != 0 {
		t.Fatalf("from a fresh node to whole GPUs: %v, want no pause", ops.calls)
	}

	var inCheckpoint map[string]string
	h.r.Hooks.AfterOp = func(int, int, partition.Op) error {
		if cp, err := (&Checkpoints{Dir: h.dir}).Load(); err == nil && cp != nil && inCheckpoint == nil {
			inCheckpoint = cp.Paused
		}
		return nil
	}
	res := h.reconcile(f, nil, "balanced") // MIG mode on: disruptive
	if res.State != carvev1.StateSuccess {
		t.Fatalf("state %s: %v", res.State, res.Err)
	}
	want := []string{"pause " + exporterLabel + " after 0 ops", "restore after " + itoa(res.OpsApplied) + " ops"}
	if diff := cmp.Diff(want, ops.calls); diff != "" {
		t.Errorf("operand calls (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{exporterLabel: "true"}, inCheckpoint); diff != "" {
		t.Errorf("checkpoint's paused labels during the apply (-want +got):\n%s", diff)
	}
	wantMsg := "paused " + exporterLabel + " for a disruptive change; evicted pod serving/gpu-client through the Eviction API; their pods have left the node"
	if !slices.ContainsFunc(res.Events, func(e Event) bool { return e.Reason == carvev1.ReasonOperandsPaused && e.Message == wantMsg }) {
		t.Errorf("events %+v, want %s %q", res.Events, carvev1.ReasonOperandsPaused, wantMsg)
	}
	if h.labels[exporterLabel] != "true" || !hasEvent(res.Events, carvev1.ReasonOperandsPaused, false) || !hasEvent(res.Events, carvev1.ReasonOperandsRestored, false) {
		t.Errorf("label %q, events %v", h.labels[exporterLabel], reasons(res.Events))
	}

	ops.calls = nil
	if res := h.reconcile(f, nil, "balanced-3"); res.State != carvev1.StateSuccess || len(ops.calls) != 0 {
		t.Errorf("a replica change: state %s, operand calls %v; want none", res.State, ops.calls)
	}

	ops.calls, ops.fail = nil, errors.New("pods nvidia/dcgm-exporter-x still on the node after 5m0s")
	h.m.ResetOpLog()
	res = h.reconcile(f, nil, "small")
	if res.State != carvev1.StateFailed || len(h.mutations()) != 0 || h.labels[exporterLabel] != "true" {
		t.Errorf("pause failed: state %s, ops %v, label %q; want failed, no op, label restored", res.State, h.mutations(), h.labels[exporterLabel])
	}
	if !hasEvent(res.Events, carvev1.ReasonOperandsPaused, true) {
		t.Errorf("events %v, want a Warning %s", reasons(res.Events), carvev1.ReasonOperandsPaused)
	}
	// The failed apply leaves its checkpoint, without the labels it has
	// put back: a restart must not write them again.
	cp, err := (&Checkpoints{Dir: h.dir}).Load()
	if err != nil || cp == nil {
		t.Fatalf("checkpoint after the failed pause: %v, %v; want one", cp, err)
	}
	if len(cp.Paused) != 0 {
		t.Errorf("checkpoint still lists paused labels %v after restoring them", cp.Paused)
	}
}

// An agent killed mid-change leaves the operand labels paused; the
// restarted agent restores the values its checkpoint recorded, not the
// paused ones it finds on the node: the DCGM exporter alone, and the
// defaults of --advertise none on a node with NVIDIA's device plugin, GFD
// and a third-party GPU client.
func TestReconcileRestoresOperandsAfterACrash(t *testing.T) {
	for name, tc := range map[string]struct {
		names  []string
		labels map[string]string
	}{
		"dcgm-exporter": {[]string{"dcgm-exporter"}, map[string]string{exporterLabel: "true"}},
		"advertise none defaults": {DefaultPauseOperands(AdvertiseNone), map[string]string{
			"nvidia.com/gpu.deploy.device-plugin": "true", "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
			"nvidia.com/gpu.deploy.client": "true", exporterLabel: "on",
		}},
	} {
		t.Run(name, func(t *testing.T) { restoresAfterACrash(t, tc.names, tc.labels) })
	}
}

func restoresAfterACrash(t *testing.T, names []string, labels map[string]string) {
	t.Helper()
	h := newHarness(t, "h100-80gb*1")
	maps.Copy(h.labels, labels)
	f := h.parse(testProfiles)
	h.reconcile(f, nil, "balanced")
	ops := &fakeOperands{h: h, killed: true}
	h.r.Operands, h.r.OperandNames = ops, names
	n := 0
	h.r.Hooks.AfterOp = func(int, int, partition.Op) error {
		if n++; n == 2 {
			return errCrash
		}
		return nil
	}
	h.labels[carvev1.LabelProfile] = "small"
	if _, err := h.r.Reconcile(context.Background(), Input{Config: f, Labels: h.labels, Now: h.now, Previous: h.prev}); err != nil {
		t.Fatal(err)
	}
	// The crash: the killed agent restored nothing.
	for k := range labels {
		if h.labels[k] != carvev1.OperandPaused {
			t.Fatalf("after the kill %s is %q, want it paused", k, h.labels[k])
		}
	}

	h.r = h.newReconciler()
	restarted := &fakeOperands{h: h}
	h.r.Operands, h.r.OperandNames = restarted, names
	res := h.reconcile(f, nil, "small")
	if res.State != carvev1.StateSuccess {
		t.Fatalf("state %s after restart: %v", res.State, res.Err)
	}
	got := maps.Clone(labels)
	for k := range got {
		got[k] = h.labels[k]
	}
	if diff := cmp.Diff(labels, got); diff != "" {
		t.Errorf("labels after the restart, want the values before the first pause (-want +got):\n%s", diff)
	}
	if intent, _ := (&Checkpoints{Dir: h.dir}).Load(); intent != nil {
		t.Errorf("checkpoint left after converging: %+v", intent)
	}
	if len(restarted.calls) == 0 || !strings.HasPrefix(restarted.calls[len(restarted.calls)-1], "restore") {
		t.Errorf("restarted agent's operand calls %v, want a restore last", restarted.calls)
	}
}

// filterPodsByNode makes the fake's pod lists honour a field selector on
// spec.nodeName as the API server does; the fake ignores field selectors.
// A selector on any other field, or one that does not parse, is refused
// (the API server evaluates more fields, but the agent uses none of them).
func filterPodsByNode(client *fake.Clientset) {
	client.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		la, ok := a.(k8stesting.ListActionImpl)
		if !ok {
			return true, nil, fmt.Errorf("list pods: unexpected action %T", a)
		}
		sel, err := fields.ParseSelector(la.ListOptions.FieldSelector)
		if err != nil {
			return true, nil, apierrors.NewBadRequest(fmt.Sprintf("field selector %q: %v", la.ListOptions.FieldSelector, err))
		}
		for _, r := range sel.Requirements() {
			if r.Field != "spec.nodeName" {
				return true, nil, apierrors.NewBadRequest(fmt.Sprintf("field label not supported by the test's fake: %s", r.Field))
			}
		}
		obj, err := client.Tracker().List(la.GetResource(), la.GetKind(), la.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		list := obj.(*corev1.PodList)
		list.Items = slices.DeleteFunc(list.Items, func(p corev1.Pod) bool {
			return !sel.Matches(fields.Set{"spec.nodeName": p.Spec.NodeName})
		})
		return true, list, nil
	})
}

// TestNodeOperands: Pause sets the operand's label to paused and waits
// until the operand's pods have left the node, not counting other pods of
// the node nor the operand's pods on other nodes; Restore puts the label
// back.
func TestNodeOperands(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{exporterLabel: "true", "pool": "a"}}}
	yes := true
	dsOwner := []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "nvidia-dcgm-exporter", UID: "ds", Controller: &yes}}
	exporter := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "gpu-operator", Name: "nvidia-dcgm-exporter-x", OwnerReferences: dsOwner},
		Spec: corev1.PodSpec{NodeName: "node-1", NodeSelector: map[string]string{exporterLabel: "true"}}}
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "train"}, Spec: corev1.PodSpec{NodeName: "node-1"}}
	// The exporter of another node stays: it must not hold up node-1's pause.
	elsewhere := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "gpu-operator", Name: "nvidia-dcgm-exporter-y"},
		Spec: corev1.PodSpec{NodeName: "node-2", NodeSelector: map[string]string{exporterLabel: "true"}}}
	client := fake.NewClientset(node, exporter, other, elsewhere)
	filterPodsByNode(client)
	o := &nodeOperands{client: clientset.Wrap(client), node: "node-1", timeout: 300 * time.Millisecond, every: 20 * time.Millisecond}
	ctx := context.Background()

	_, err := o.Pause(ctx, []string{exporterLabel})
	if err == nil || !strings.Contains(err.Error(), "pods gpu-operator/nvidia-dcgm-exporter-x still on the node") {
		t.Fatalf("Pause with the exporter still there: %v", err)
	}
	n, _ := client.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
	if n.Labels[exporterLabel] != carvev1.OperandPaused || n.Labels["pool"] != "a" {
		t.Fatalf("labels after Pause: %v", n.Labels)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		_ = client.CoreV1().Pods("gpu-operator").Delete(ctx, exporter.Name, metav1.DeleteOptions{})
	}()
	o.timeout = 10 * time.Second
	if evicted, err := o.Pause(ctx, []string{exporterLabel}); err != nil || len(evicted) != 0 {
		t.Fatalf("Pause once the exporter left: evicted %v, %v; want none evicted", evicted, err)
	}
	if err := o.Restore(ctx, map[string]string{exporterLabel: "true"}); err != nil {
		t.Fatal(err)
	}
	n, _ = client.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
	if diff := cmp.Diff(map[string]string{exporterLabel: "true", "pool": "a"}, n.Labels); diff != "" {
		t.Errorf("labels after Restore (-want +got):\n%s", diff)
	}
}

// evictThroughFake makes the fake answer evictions as the API server does:
// refused with 429 while blocked says so (a PodDisruptionBudget), else the
// pod is deleted. It records the pods it was asked to evict.
func evictThroughFake(client *fake.Clientset, blocked func() bool, asked *[]string) {
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		*asked = append(*asked, ev.Namespace+"/"+ev.Name)
		if blocked() {
			return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		}
		return true, nil, client.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), ev.Namespace, ev.Name)
	})
}

// TestNodeOperandsEvicts: of the pods a paused label selects (by
// nodeSelector or required node affinity), Pause evicts those no DaemonSet
// owns, through the Eviction API, and waits for a DaemonSet's; a refused
// eviction (a PodDisruptionBudget) holds the pause until it times out,
// saying why, and is asked again each round until it is allowed.
func TestNodeOperandsEvicts(t *testing.T) {
	const clientLabel, pluginLabel = "nvidia.com/gpu.deploy.client", "nvidia.com/gpu.deploy.device-plugin"
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{clientLabel: "true", pluginLabel: "true"}}}
	yes := true
	dsOwner := []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "nvidia-device-plugin", UID: "ds", Controller: &yes}}
	affinity := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: pluginLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{"true"}}}}},
	}}}
	plugin := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "gpu-operator", Name: "nvidia-device-plugin-x", OwnerReferences: dsOwner},
		Spec: corev1.PodSpec{NodeName: "node-1", Affinity: affinity}}
	inference := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "serving", Name: "gpu-client"},
		Spec: corev1.PodSpec{NodeName: "node-1", NodeSelector: map[string]string{clientLabel: "true"}}}
	unrelated := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "train"}, Spec: corev1.PodSpec{NodeName: "node-1"}}
	client := fake.NewClientset(node, plugin, inference, unrelated)
	filterPodsByNode(client)
	var asked []string
	var pdb sync.Mutex
	blocking := true
	evictThroughFake(client, func() bool { pdb.Lock(); defer pdb.Unlock(); return blocking }, &asked)
	o := &nodeOperands{client: clientset.Wrap(client), node: "node-1", timeout: 200 * time.Millisecond, every: 20 * time.Millisecond}
	ctx := context.Background()
	keys := []string{clientLabel, pluginLabel}

	_, err := o.Pause(ctx, keys)
	want := "pods gpu-operator/nvidia-device-plugin-x, serving/gpu-client still on the node after 200ms; the last eviction refused: pod serving/gpu-client: Cannot evict pod"
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("Pause with a disruption budget blocking:\n got %v\nwant %s...", err, want)
	}
	if len(asked) < 2 || slices.ContainsFunc(asked, func(p string) bool { return p != "serving/gpu-client" }) {
		t.Errorf("evictions asked %v, want serving/gpu-client again each round and no other", asked)
	}

	pdb.Lock()
	blocking = false
	pdb.Unlock()
	go func() {
		time.Sleep(50 * time.Millisecond)
		_ = client.CoreV1().Pods("gpu-operator").Delete(ctx, plugin.Name, metav1.DeleteOptions{}) // the DaemonSet controller
	}()
	o.timeout = 10 * time.Second
	evicted, err := o.Pause(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"serving/gpu-client"}, evicted); diff != "" {
		t.Errorf("evicted (-want +got):\n%s", diff)
	}
	if _, err := client.CoreV1().Pods("default").Get(ctx, "train", metav1.GetOptions{}); err != nil {
		t.Errorf("a pod no paused label selects: %v", err)
	}
}

// The defaults by --advertise: NVIDIA's device plugin only where it
// advertises (none), GFD and the GPU handle holders always.
func TestDefaultPauseOperands(t *testing.T) {
	always := []string{"gpu-feature-discovery", "dcgm-exporter", "dcgm", "nvsm", "client"}
	for advertise, want := range map[string][]string{
		AdvertiseDevicePlugin: always,
		AdvertiseDRA:          always,
		AdvertiseNone:         append([]string{"device-plugin"}, always...),
	} {
		if diff := cmp.Diff(want, DefaultPauseOperands(advertise)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", advertise, diff)
		}
	}
}
