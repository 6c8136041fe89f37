package agent

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/internal/apitest"
	"github.com/carve-dev/carve/rollout"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestLeaseRollout plays three agents over one fake API server: one slot
// at a time, handed on by release and by expiry, and the failure budget
// spent by one node and reset by its success or a new revision.
func TestLeaseRollout(t *testing.T) {
	cs, strict := apitest.NewStrict(nodes("gpu-a", "gpu-b", "gpu-c")...)
	clock := &fakeClock{t: time.Date(2026, 11, 24, 20, 0, 0, 0, time.UTC)}
	agent := func(node string) *LeaseRollout {
		return &LeaseRollout{Client: cs, Namespace: "carve-system", ConfigMap: "carve-profiles", Node: node,
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

// TestLeaseRolloutMembers: a percentage is of the agents' member Leases,
// which Run keeps and removes when it stops.
func TestLeaseRolloutMembers(t *testing.T) {
	cs, _ := apitest.NewStrict(nodes("gpu-a", "gpu-b", "gpu-c", "gpu-d", "gpu-e")...)
	clock := &fakeClock{t: time.Now()}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var agents []*LeaseRollout
	for _, n := range []string{"gpu-a", "gpu-b", "gpu-c", "gpu-d", "gpu-e"} {
		l := &LeaseRollout{Client: cs, Namespace: "carve-system", ConfigMap: "carve-profiles", Node: n, Clock: clock.Now, Logger: slog.New(slog.DiscardHandler)}
		agents = append(agents, l)
		wg.Go(func() { _ = l.Run(ctx) })
	}
	members := func() int {
		list, err := cs.CoordinationV1().Leases("carve-system").List(context.Background(), metav1.ListOptions{LabelSelector: carvev1.LeaseLabelKind + "=" + rollout.KindMember})
		if err != nil {
			t.Fatal(err)
		}
		return len(list.Items)
	}
	deadline := time.Now().Add(10 * time.Second)
	for members() < 5 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	forty := configs.Rollout{MaxUnavailable: configs.Bound{N: 40, Percent: true}, MaxFailures: 1}
	d, err := agents[0].Acquire(ctx, forty, "r")
	if err != nil || !d.Granted || d.Nodes != 5 || d.Bound != 2 {
		t.Fatalf("40%% of 5 members: %+v, %v; want granted, 5 nodes, bound 2", d, err)
	}
	if d2, _ := agents[1].Acquire(ctx, forty, "r"); !d2.Granted || d2.Slot == d.Slot {
		t.Fatalf("the second node: %+v, want the other slot than %s", d2, d.Slot)
	}
	if d, _ := agents[2].Acquire(ctx, forty, "r"); d.Granted {
		t.Fatalf("the third node with a bound of 2: %+v", d)
	}
	for _, l := range agents[:2] {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	wg.Wait()
	if n := members(); n != 0 {
		t.Errorf("%d member Leases after the agents stopped, want 0", n)
	}
}
