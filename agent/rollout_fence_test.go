package agent

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/internal/apitest"
	"github.com/carve-dev/carve/internal/testclock"
	"github.com/carve-dev/carve/kubeclient/clientset"
	"github.com/carve-dev/carve/rollout"
)

// The tests of this file run the Lease code against apitest's strict
// fake, which enforces resourceVersions and delete preconditions as the
// real API server does; client-go's plain fake enforces neither, so that
// an unconditional write would pass there.

const (
	fenceNS = "carve-system"
	fenceCM = "carve-profiles"
)

// nodes are Node objects with a UID each, for the slots' owner.
func nodes(names ...string) []runtime.Object {
	out := make([]runtime.Object, len(names))
	for i, n := range names {
		out[i] = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, UID: types.UID("uid-" + n)}}
	}
	return out
}

// fleet is agents' LeaseRollouts over one strict fake, with one wall
// clock and one monotonic clock the test moves.
type fleet struct {
	t      *testing.T
	cs     kubernetes.Interface
	strict *apitest.Strict
	wall   *testclock.Clock
	mono   *testclock.Clock
}

func newFleet(t *testing.T, names ...string) *fleet {
	t.Helper()
	cs, strict := apitest.NewStrict(nodes(names...)...)
	f := &fleet{t: t, cs: cs, strict: strict, wall: testclock.New(time.Date(2026, 11, 27, 20, 0, 0, 0, time.UTC)), mono: testclock.New(time.Unix(1000, 0))}
	t.Cleanup(func() {
		if u := strict.Unconditional(); len(u) > 0 {
			t.Errorf("writes without a resourceVersion: %v", u)
		}
	})
	return f
}

// agent is node's LeaseRollout; its renewer is stopped at cleanup.
func (f *fleet) agent(node string) *LeaseRollout {
	l := &LeaseRollout{Client: clientset.Wrap(f.cs), Namespace: fenceNS, ConfigMap: fenceCM, Node: node,
		SlotDuration: 15 * time.Second, Clock: f.wall.Now, Monotonic: f.mono.Now, Logger: slog.New(slog.DiscardHandler)}
	f.t.Cleanup(func() { l.pause() })
	return l
}

// pause stops l's renewer without releasing: an agent that died, or
// whose process stands still.
func (l *LeaseRollout) pause() {
	l.mu.Lock()
	l.stopLocked()
	l.mu.Unlock()
}

func (f *fleet) acquire(l *LeaseRollout) rollout.Decision {
	f.t.Helper()
	d, err := l.Acquire(context.Background(), configs.DefaultRollout, "r1")
	if err != nil {
		f.t.Fatalf("%s: Acquire: %v", l.Node, err)
	}
	return d
}

// holder is node's LeaseRollout, holding slot 0.
func (f *fleet) holder(node string) *LeaseRollout {
	f.t.Helper()
	l := f.agent(node)
	if d := f.acquire(l); !d.Granted {
		f.t.Fatalf("%s: %+v", node, d)
	}
	return l
}

// slot reads slot 0.
func (f *fleet) slot() *coordinationv1.Lease {
	f.t.Helper()
	l, err := f.cs.CoordinationV1().Leases(fenceNS).Get(context.Background(), rollout.SlotName(fenceCM, 0), metav1.GetOptions{})
	if err != nil {
		f.t.Fatalf("slot 0: %v", err)
	}
	return l
}

// markMidChange writes node's record with a change in progress, or
// without one.
func (f *fleet) markMidChange(node string, mid bool) {
	f.t.Helper()
	rec := carvev1.NodeRecord{State: carvev1.StateApplying}
	if mid {
		rec.Change = &carvev1.ChangeRecord{Since: f.wall.Now().Format(time.RFC3339), Profile: "small"}
	}
	f.writeRecord(node, rec)
}

// writeRecord makes rec the node record of node.
func (f *fleet) writeRecord(node string, rec carvev1.NodeRecord) {
	f.t.Helper()
	enc, err := rec.Encode()
	if err != nil {
		f.t.Fatal(err)
	}
	n, err := f.cs.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	n.Annotations = map[string]string{carvev1.AnnotationRecord: enc}
	if _, err := f.cs.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

// A holder whose slot expired and was taken over releases nothing when it
// finishes: its delete names the version it last wrote, and the taker's
// slot stands.
func TestReleaseAfterTakeoverLeavesTheNewHolder(t *testing.T) {
	f := newFleet(t, "gpu-a", "gpu-b")
	a, b := f.agent("gpu-a"), f.agent("gpu-b")
	if d := f.acquire(a); !d.Granted {
		t.Fatalf("gpu-a: %+v", d)
	}
	a.pause()
	f.wall.Add(16 * time.Second)
	if d := f.acquire(b); !d.Granted {
		t.Fatalf("gpu-b after gpu-a's slot expired (no change in progress recorded): %+v", d)
	}
	if err := a.Release(context.Background()); err != nil {
		t.Fatalf("gpu-a's late release: %v", err)
	}
	if got := f.slot(); got.Spec.HolderIdentity == nil || *got.Spec.HolderIdentity != "gpu-b" {
		t.Fatalf("slot after gpu-a's late release: holder %v, want gpu-b's slot untouched", got.Spec.HolderIdentity)
	}
	if err := b.Fence(); err != nil {
		t.Errorf("gpu-b's fence after gpu-a's late release: %v", err)
	}
}

// A renewal that reached the API server but whose answer never came (cut
// short as the slot was released) leaves the holder with an older
// version than the stored one: the release reads the slot again and, as
// it still names this node, deletes it; no slot is left held after the
// change.
func TestReleaseAfterAnUnansweredRenewal(t *testing.T) {
	f := newFleet(t, "gpu-a")
	a := f.holder("gpu-a")
	renewed := f.slot()
	renewed.Spec.RenewTime = new(metav1.NewMicroTime(f.wall.Now().Add(time.Second)))
	if _, err := f.cs.CoordinationV1().Leases(fenceNS).Update(context.Background(), renewed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(context.Background()); err != nil {
		t.Fatalf("release: %v", err)
	}
	_, err := f.cs.CoordinationV1().Leases(fenceNS).Get(context.Background(), rollout.SlotName(fenceCM, 0), metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("the slot after its holder released it: %v, want it gone", err)
	}
}

// Two renewals of one slot (the renewer's and Confirm's) never overlap:
// here the first is held in flight long enough for a second to start
// beside it. Overlapping, both would name the same version, and one would
// get a Conflict and could lose the node its own slot; one after the
// other, both succeed.
func TestRenewalsDoNotOverlap(t *testing.T) {
	f := newFleet(t, "gpu-a")
	a := f.holder("gpu-a")
	a.pause()
	var once sync.Once
	first, second := make(chan struct{}), make(chan struct{})
	f.cs.(*fake.Clientset).PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		isFirst := false
		once.Do(func() { isFirst = true })
		if !isFirst {
			close(second)
			return false, nil, nil
		}
		close(first)
		select { // hold the first until a second starts, or 200 ms
		case <-second:
		case <-time.After(200 * time.Millisecond):
		}
		return false, nil, nil
	})
	errs := make(chan error, 2)
	go func() { errs <- a.renewOnce(context.Background()) }()
	<-first
	go func() { errs <- a.Confirm(context.Background()) }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("renewal: %v", err)
		}
	}
	if !a.Holding() || a.Fence() != nil {
		t.Errorf("after two renewals: holding %v, fence %v; want the slot held", a.Holding(), a.Fence())
	}
}

// A holder whose slot was taken over cannot renew it (its update names
// the version it read): it learns it lost the slot, and its fence closes.
func TestRenewAfterTakeoverLosesTheSlot(t *testing.T) {
	f := newFleet(t, "gpu-a", "gpu-b")
	a, b := f.agent("gpu-a"), f.agent("gpu-b")
	f.acquire(a)
	a.pause()
	f.wall.Add(16 * time.Second)
	f.acquire(b)
	err := a.renewOnce(context.Background())
	if !apierrors.IsConflict(err) {
		t.Fatalf("gpu-a's renewal after the takeover: %v, want a Conflict", err)
	}
	if a.Holding() || !errors.Is(a.Fence(), ErrFenced) || !strings.Contains(a.Fence().Error(), "taken over or released") {
		t.Errorf("gpu-a after losing its slot: holding %v, fence %v", a.Holding(), a.Fence())
	}
	if got := f.slot(); *got.Spec.HolderIdentity != "gpu-b" {
		t.Errorf("slot holder %s, want gpu-b", *got.Spec.HolderIdentity)
	}
}

// Two nodes that read the same expired slot both try to take it over;
// the update names the version read, so exactly one gets it.
func TestTakeoverRaceHasOneWinner(t *testing.T) {
	f := newFleet(t, "gpu-a", "gpu-b", "gpu-c")
	a, b, c := f.agent("gpu-a"), f.agent("gpu-b"), f.agent("gpu-c")
	f.acquire(a)
	a.pause()
	f.wall.Add(16 * time.Second)
	expired := f.slot()
	errB := b.take(context.Background(), expired.Name, expired, "r1", f.wall.Now())
	errC := c.take(context.Background(), expired.Name, expired, "r1", f.wall.Now())
	if errB != nil || !apierrors.IsConflict(errC) {
		t.Fatalf("takeovers from one read: gpu-b %v, gpu-c %v; want gpu-b alone to win", errB, errC)
	}
	if b.Holding() == c.Holding() || *f.slot().Spec.HolderIdentity != "gpu-b" {
		t.Errorf("holding: gpu-b %v, gpu-c %v, slot %s", b.Holding(), c.Holding(), *f.slot().Spec.HolderIdentity)
	}
}

// An expired slot whose holder's record still says it is mid-change is
// not taken over, and counts as held (Stuck); once the record shows no
// change, or the Node is gone, it is.
func TestStuckSlotIsNotTakenOver(t *testing.T) {
	f := newFleet(t, "gpu-a", "gpu-b", "gpu-c")
	a, b := f.agent("gpu-a"), f.agent("gpu-b")
	f.acquire(a)
	f.markMidChange("gpu-a", true)
	a.pause()
	f.wall.Add(time.Hour)
	d := f.acquire(b)
	if d.Granted || len(d.Stuck) != 1 || d.Stuck[0].Holder != "gpu-a" {
		t.Fatalf("gpu-b while gpu-a is silent and mid-change: %+v; want refused, one stuck slot of gpu-a", d)
	}
	if got := f.slot(); *got.Spec.HolderIdentity != "gpu-a" {
		t.Fatalf("the stuck slot was written: holder %s", *got.Spec.HolderIdentity)
	}
	f.markMidChange("gpu-a", false)
	if d := f.acquire(b); !d.Granted {
		t.Fatalf("gpu-b once gpu-a's record shows no change: %+v", d)
	}

	// The Node gone frees a stuck slot too.
	b.pause()
	f.markMidChange("gpu-b", true)
	c := f.agent("gpu-c")
	f.wall.Add(time.Hour)
	if d := f.acquire(c); d.Granted {
		t.Fatalf("gpu-c while gpu-b is mid-change: %+v", d)
	}
	if err := f.cs.CoreV1().Nodes().Delete(context.Background(), "gpu-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if d := f.acquire(c); !d.Granted {
		t.Fatalf("gpu-c once gpu-b's Node is gone: %+v", d)
	}
}

// The slot names its holder's Node as its owner, so that the garbage
// collector frees it with the Node.
func TestSlotOwnedByItsHoldersNode(t *testing.T) {
	f := newFleet(t, "gpu-a")
	f.acquire(f.agent("gpu-a"))
	refs := f.slot().OwnerReferences
	if len(refs) != 1 || refs[0].Kind != "Node" || refs[0].Name != "gpu-a" || refs[0].UID != "uid-gpu-a" {
		t.Errorf("owner references %+v, want gpu-a's Node", refs)
	}
}

// An agent that restarts finds its own slot, expired or not, keeps it
// (renewed, the same Lease) and may go on.
func TestRestartedAgentKeepsItsOwnSlot(t *testing.T) {
	f := newFleet(t, "gpu-a", "gpu-b")
	f.acquire(f.agent("gpu-a"))
	f.agent("gpu-a").pause()
	before := f.slot()
	f.markMidChange("gpu-a", true)
	f.wall.Add(time.Hour)
	again := f.agent("gpu-a")
	d := f.acquire(again)
	if !d.Granted || !d.Held {
		t.Fatalf("the restarted gpu-a: %+v, want its own slot kept", d)
	}
	after := f.slot()
	if after.Spec.RenewTime.Time.Before(f.wall.Now()) || !after.Spec.AcquireTime.Equal(before.Spec.AcquireTime) {
		t.Errorf("slot renewed %s acquired %s; want renewed now, acquired as before (%s)", after.Spec.RenewTime, after.Spec.AcquireTime, before.Spec.AcquireTime)
	}
	if err := again.Fence(); err != nil {
		t.Errorf("fence after the slot was kept: %v", err)
	}
}

// The fence closes once the last successful renewal is older than the
// slot's duration less the margin, by the monotonic clock, whatever the
// wall clock says; a renewal opens it again.
func TestFence(t *testing.T) {
	f := newFleet(t, "gpu-a")
	a := f.agent("gpu-a")
	if err := a.Fence(); !errors.Is(err, ErrFenced) {
		t.Fatalf("fence without a slot: %v", err)
	}
	f.acquire(a)
	a.pause()
	f.mono.Add(9 * time.Second)
	if err := a.Fence(); err != nil {
		t.Fatalf("fence 9 s after the renewal (valid for 15 s less 5 s): %v", err)
	}
	f.wall.Add(-time.Hour) // a wall clock step changes nothing
	f.mono.Add(time.Second)
	if err := a.Fence(); !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), "last renewed 10s ago") {
		t.Fatalf("fence 10 s after the renewal: %v", err)
	}
	f.wall.Add(time.Hour)
	if err := a.Confirm(context.Background()); err != nil {
		t.Fatalf("Confirm: %v", err)
	}
	if err := a.Fence(); err != nil {
		t.Errorf("fence after a renewal: %v", err)
	}
}
