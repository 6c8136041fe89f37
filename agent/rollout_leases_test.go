package agent

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/internal/apitest"
	"github.com/carve-dev/carve/internal/testclock"
	"github.com/carve-dev/carve/kubeclient/clientset"
	"github.com/carve-dev/carve/rollout"
)

// TestLeaseRollout plays three agents over one fake API server: one slot
// at a time, handed on by release and by expiry, and the failure budget
// spent by one node and reset by its success or a new revision.
func TestLeaseRollout(t *testing.T) {
	cs, strict := apitest.NewStrict(nodes("gpu-a", "gpu-b", "gpu-c")...)
	clock := testclock.New(time.Date(2026, 11, 24, 20, 0, 0, 0, time.UTC))
	agent := func(node string) *LeaseRollout {
		return &LeaseRollout{Client: clientset.Wrap(cs), Namespace: "carve-system", ConfigMap: "carve-profiles", Node: node,
			SlotDuration: 15 * time.Second, Clock: clock.Now, Logger: slog.New(slog.DiscardHandler)}
	}
	t.Cleanup(func() {
		if u := strict.Unconditional(); len(u) > 0 {
			t.Errorf("Lease writes without a resourceVersion: %v", u)
		}
	})
	a, b, c := agent("gpu-a"), agent("gpu-b"), agent("gpu-c")
	ctx := context.Background()
	one := configs.DefaultRollout
	acquire := func(l *LeaseRollout, rev string) rollout.Decision {
		t.Helper()
		d, err := l.Acquire(ctx, one, rev)
		if err != nil {
			t.Fatalf("%s: Acquire: %v", l.Node, err)
		}
		return d
	}

	if d := acquire(a, "r1"); !d.Granted || d.Held || d.Slot != rollout.SlotName("carve-profiles", 0) || !a.Holding() {
		t.Fatalf("gpu-a first: %+v, holding %v", d, a.Holding())
	}
	if d := acquire(b, "r1"); d.Granted || b.Holding() {
		t.Fatalf("gpu-b while gpu-a holds the one slot: %+v", d)
	}
	if d := acquire(a, "r1"); !d.Granted || !d.Held {
		t.Fatalf("gpu-a again: %+v, want its slot kept", d)
	}
	if err := a.Release(ctx); err != nil || a.Holding() {
		t.Fatalf("Release: %v, holding %v", err, a.Holding())
	}
	if d := acquire(b, "r1"); !d.Granted {
		t.Fatalf("gpu-b after gpu-a released: %+v", d)
	}
	// gpu-b dies holding its slot: nobody renews it.
	b.mu.Lock()
	b.stopLocked()
	b.mu.Unlock()
	if d := acquire(c, "r1"); d.Granted {
		t.Fatalf("gpu-c while gpu-b's slot is live: %+v", d)
	}
	clock.Add(16 * time.Second)
	if d := acquire(c, "r1"); !d.Granted {
		t.Fatalf("gpu-c after gpu-b's slot expired: %+v", d)
	}
	lease, err := cs.CoordinationV1().Leases("carve-system").Get(ctx, rollout.SlotName("carve-profiles", 0), metav1.GetOptions{})
	if err != nil || *lease.Spec.HolderIdentity != "gpu-c" || lease.Labels[carvev1.LeaseLabelKind] != rollout.KindSlot {
		t.Fatalf("slot Lease %+v, %v; want held by gpu-c", lease, err)
	}

	// gpu-c fails: the budget of 1 is spent for r1.
	halted, err := c.Report(ctx, one, "r1", true)
	if err != nil || !halted {
		t.Fatalf("Report failed: halted %v, %v; want halted", halted, err)
	}
	if err := c.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if d := acquire(a, "r1"); d.Granted || !d.Halted || !cmp.Equal(d.Failed, []string{"gpu-c"}) {
		t.Fatalf("gpu-a on a halted revision: %+v", d)
	}
	if d := acquire(c, "r1"); !d.Granted {
		t.Fatalf("gpu-c, failed itself, trying again: %+v", d)
	}
	if d := acquire(a, "r2"); d.Granted || d.Halted {
		t.Fatalf("gpu-a on a new revision while gpu-c holds the slot: %+v; want queued, not halted", d)
	}
	if _, err := c.Report(ctx, one, "r1", false); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if d := acquire(a, "r1"); !d.Granted {
		t.Fatalf("gpu-a after gpu-c succeeded: %+v", d)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// memberNode is a Node whose agent recorded that it reads file
// ("namespace/name"); "" gives a Node without a record.
func memberNode(t *testing.T, name, file string) *corev1.Node {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}}
	if file == "" {
		return n
	}
	raw, err := carvev1.NodeRecord{State: carvev1.StateSuccess, ConfigMap: file}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	n.Labels = map[string]string{carvev1.LabelState: carvev1.StateSuccess}
	n.Annotations = map[string]string{carvev1.AnnotationRecord: raw}
	return n
}

// TestLeaseRolloutMembers: a percentage is of the Nodes whose records name
// the file, counted as a DaemonSet counts: a node joins with its first
// record, leaves when its Node is deleted or its record names another
// file, and a node whose agent died still counts. The agents write
// nothing for it.
func TestLeaseRolloutMembers(t *testing.T) {
	const file = "carve-system/carve-profiles"
	objs := []runtime.Object{
		memberNode(t, "gpu-a", file), memberNode(t, "gpu-b", file), memberNode(t, "gpu-c", file),
		memberNode(t, "gpu-d", file), memberNode(t, "gpu-e", file),
		memberNode(t, "other-file", "carve-system/other-profiles"), memberNode(t, "no-record", ""),
	}
	cs, _ := apitest.NewStrict(objs...)
	clock := testclock.New(time.Now())
	ctx := t.Context()
	agents := map[string]*LeaseRollout{}
	for _, n := range []string{"gpu-a", "gpu-b", "gpu-c", "gpu-d", "gpu-e"} {
		agents[n] = &LeaseRollout{Client: clientset.Wrap(cs), Namespace: "carve-system", ConfigMap: "carve-profiles", Node: n, Clock: clock.Now, Logger: slog.New(slog.DiscardHandler)}
	}
	forty := configs.Rollout{MaxUnavailable: configs.Bound{N: 40, Percent: true}, MaxFailures: 1}
	nodesSeen := func(l *LeaseRollout) int {
		t.Helper()
		clock.Add(memberCacheFor)
		d, err := l.Acquire(ctx, forty, "r")
		if err != nil {
			t.Fatal(err)
		}
		if d.Granted {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return d.Nodes
	}
	d, err := agents["gpu-a"].Acquire(ctx, forty, "r")
	if err != nil || !d.Granted || d.Nodes != 5 || d.Bound != 2 {
		t.Fatalf("40%% of 5 members: %+v, %v; want granted, 5 nodes, bound 2", d, err)
	}
	if d2, _ := agents["gpu-b"].Acquire(ctx, forty, "r"); !d2.Granted || d2.Slot == d.Slot {
		t.Fatalf("the second node: %+v, want the other slot than %s", d2, d.Slot)
	}
	if d, _ := agents["gpu-c"].Acquire(ctx, forty, "r"); d.Granted {
		t.Fatalf("the third node with a bound of 2: %+v", d)
	}
	for _, n := range []string{"gpu-a", "gpu-b"} {
		if err := agents[n].Release(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// A node joins: its agent's first record names the file.
	if _, err := cs.CoreV1().Nodes().Create(ctx, memberNode(t, "gpu-f", file), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := nodesSeen(agents["gpu-c"]); n != 6 {
		t.Errorf("after gpu-f joined: %d nodes, want 6", n)
	}
	// A node leaves: its Node is deleted.
	if err := cs.CoreV1().Nodes().Delete(ctx, "gpu-f", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := nodesSeen(agents["gpu-c"]); n != 5 {
		t.Errorf("after gpu-f's Node was deleted: %d nodes, want 5", n)
	}
	// A node's agent moves to another file.
	moved := memberNode(t, "gpu-e", "carve-system/other-profiles")
	if _, err := cs.CoreV1().Nodes().Update(ctx, moved, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := nodesSeen(agents["gpu-c"]); n != 4 {
		t.Errorf("after gpu-e's agent moved to another file: %d nodes, want 4", n)
	}
	// A node dies: its agent is gone, its Node and record stay, and it
	// still counts, as a DaemonSet counts a NotReady node.
	delete(agents, "gpu-d")
	if n := nodesSeen(agents["gpu-c"]); n != 4 {
		t.Errorf("with gpu-d's agent dead: %d nodes, want 4", n)
	}
}

// TestLeaseRolloutWritesNothingAtRest: Run removes the member Lease an
// earlier version left, and then writes nothing, however long it runs.
func TestLeaseRolloutWritesNothingAtRest(t *testing.T) {
	old := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: rollout.MemberName("carve-profiles", "gpu-a"), Namespace: "carve-system",
		Labels: map[string]string{carvev1.LeaseLabelConfigMap: "carve-profiles", carvev1.LeaseLabelKind: rollout.KindMember}}}
	cs, _ := apitest.NewStrict(memberNode(t, "gpu-a", "carve-system/carve-profiles"), old)
	l := &LeaseRollout{Client: clientset.Wrap(cs), Namespace: "carve-system", ConfigMap: "carve-profiles", Node: "gpu-a", Logger: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		list, err := cs.CoordinationV1().Leases("carve-system").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the old member Lease is still there")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var writes []string
	for _, a := range cs.Actions() {
		switch a.GetVerb() {
		case "create", "update", "patch", "delete":
			writes = append(writes, a.GetVerb()+" "+a.GetResource().Resource)
		}
	}
	if diff := cmp.Diff([]string{"delete leases"}, writes); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
}
