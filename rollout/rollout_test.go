package rollout

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/carve-dev/carve/configs"
)

var t0 = time.Date(2026, 11, 24, 20, 0, 0, 0, time.UTC)

const cm = "carve-profiles"

func slot(i int, holder string, renewed time.Time) Lease {
	return Lease{Name: SlotName(cm, i), Kind: KindSlot, Holder: holder, Acquired: renewed, Renewed: renewed, Duration: 15 * time.Second}
}

func member(node string, renewed time.Time) Lease {
	return Lease{Name: MemberName(cm, node), Kind: KindMember, Holder: node, Renewed: renewed, Duration: 30 * time.Minute}
}

// stuck marks a slot as one whose holder is mid-change.
func stuck(l Lease) Lease {
	l.Stuck = true
	return l
}

func failure(node, rev string) Lease {
	return Lease{Name: FailureName(cm, node), Kind: KindFailure, Holder: node, Revision: rev, Renewed: t0.Add(-time.Hour)}
}

// members returns n live member Leases, node-0 to node-(n-1).
func members(n int) []Lease {
	out := make([]Lease, n)
	for i := range out {
		out[i] = member(fmt.Sprintf("node-%d", i), t0.Add(-time.Minute))
	}
	return out
}

func policy(bound string, failures int) configs.Rollout {
	num, percent := strings.CutSuffix(bound, "%")
	n, err := strconv.Atoi(num)
	if err != nil {
		panic(err)
	}
	return configs.Rollout{MaxUnavailable: configs.Bound{N: n, Percent: percent}, MaxFailures: failures}
}

func TestDecide(t *testing.T) {
	slotName := func(i int) string { return SlotName(cm, i) }
	tests := []struct {
		name   string
		leases []Lease
		node   string
		policy configs.Rollout
		now    time.Time
		want   Decision
	}{
		{"alone: the first slot", nil, "node-0", policy("1", 1), t0,
			Decision{Granted: true, Slot: slotName(0), Nodes: 1, Bound: 1}},
		{"the one slot is held", append(members(3), slot(0, "node-1", t0)), "node-0", policy("1", 1), t0,
			Decision{Nodes: 3, Bound: 1, Holders: []string{"node-1"}}},
		{"a held slot is kept", append(members(3), slot(0, "node-0", t0)), "node-0", policy("1", 1), t0,
			Decision{Granted: true, Held: true, Slot: slotName(0), Nodes: 3, Bound: 1, Holders: []string{"node-0"}}},
		{"a count of 2: the next free slot", append(members(5), slot(0, "node-1", t0)), "node-0", policy("2", 1), t0,
			Decision{Granted: true, Slot: slotName(1), Nodes: 5, Bound: 2, Holders: []string{"node-1"}}},
		{"a lower slot freed first is taken first", append(members(5), slot(1, "node-1", t0)), "node-0", policy("2", 1), t0,
			Decision{Granted: true, Slot: slotName(0), Nodes: 5, Bound: 2, Holders: []string{"node-1"}}},
		{"10% of 20 nodes is 2, both held", append(members(20), slot(0, "node-1", t0), slot(1, "node-2", t0)), "node-0", policy("10%", 1), t0,
			Decision{Nodes: 20, Bound: 2, Holders: []string{"node-1", "node-2"}}},
		{"10% of 21 nodes rounds up to 3", append(members(21), slot(0, "node-1", t0), slot(1, "node-2", t0)), "node-0", policy("10%", 1), t0,
			Decision{Granted: true, Slot: slotName(2), Nodes: 21, Bound: 3, Holders: []string{"node-1", "node-2"}}},
		{"10% of 5 nodes is still 1", members(5), "node-0", policy("10%", 1), t0,
			Decision{Granted: true, Slot: slotName(0), Nodes: 5, Bound: 1}},
		{"a node without a member Lease yet counts itself", members(19), "node-new", policy("10%", 1), t0,
			Decision{Granted: true, Slot: slotName(0), Nodes: 20, Bound: 2}},
		{"a node that left (member expired) no longer counts", append(members(20)[:19], member("node-19", t0.Add(-31*time.Minute)), slot(0, "node-1", t0)), "node-0", policy("10%", 1), t0,
			Decision{Nodes: 19, Bound: 2, Granted: true, Slot: slotName(1), Holders: []string{"node-1"}}},
		{"a slot whose holder stopped renewing is free after its duration", append(members(3), slot(0, "node-1", t0.Add(-15*time.Second))), "node-0", policy("1", 1), t0,
			Decision{Granted: true, Slot: slotName(0), Nodes: 3, Bound: 1}},
		{"a slot renewed within its duration is not", append(members(3), slot(0, "node-1", t0.Add(-14*time.Second))), "node-0", policy("1", 1), t0,
			Decision{Nodes: 3, Bound: 1, Holders: []string{"node-1"}}},
		{"a released slot is free", append(members(3), slot(0, "", t0)), "node-0", policy("1", 1), t0,
			Decision{Granted: true, Slot: slotName(0), Nodes: 3, Bound: 1}},
		{"after the bound shrank, the slots above it still count", append(members(10), slot(2, "node-1", t0), slot(3, "node-2", t0)), "node-0", policy("2", 1), t0,
			Decision{Nodes: 10, Bound: 2, Holders: []string{"node-1", "node-2"}}},
		{"one failure halts a budget of 1", append(members(3), failure("node-2", "rev-b")), "node-0", policy("1", 1), t0,
			Decision{Halted: true, Nodes: 3, Bound: 1, Failed: []string{"node-2"}}},
		{"the failed node itself may try again", append(members(3), failure("node-2", "rev-b")), "node-2", policy("1", 1), t0,
			Decision{Granted: true, Slot: slotName(0), Nodes: 3, Bound: 1, Failed: []string{"node-2"}}},
		{"a holder goes on when halted", append(members(3), failure("node-2", "rev-b"), slot(0, "node-0", t0)), "node-0", policy("2", 1), t0,
			Decision{Granted: true, Held: true, Halted: true, Slot: slotName(0), Nodes: 3, Bound: 2, Holders: []string{"node-0"}, Failed: []string{"node-2"}}},
		{"below a budget of 2", append(members(3), failure("node-2", "rev-b")), "node-0", policy("1", 2), t0,
			Decision{Granted: true, Slot: slotName(0), Nodes: 3, Bound: 1, Failed: []string{"node-2"}}},
		{"an expired slot of the node's own is kept (an agent back from a restart)", append(members(3), slot(0, "node-0", t0.Add(-time.Hour))), "node-0", policy("1", 1), t0,
			Decision{Granted: true, Held: true, Slot: slotName(0), Nodes: 3, Bound: 1, Holders: []string{"node-0"}}},
		{"an expired slot whose holder is mid-change is not taken over and counts", append(members(3), stuck(slot(0, "node-1", t0.Add(-time.Hour)))), "node-0", policy("2", 1), t0,
			Decision{Granted: true, Slot: slotName(1), Nodes: 3, Bound: 2, Holders: []string{"node-1"}, Stuck: []Lease{stuck(slot(0, "node-1", t0.Add(-time.Hour)))}}},
		{"stuck slots fill the bound", append(members(3), stuck(slot(0, "node-1", t0.Add(-time.Hour))), slot(1, "node-2", t0)), "node-0", policy("2", 1), t0,
			Decision{Nodes: 3, Bound: 2, Holders: []string{"node-1", "node-2"}, Stuck: []Lease{stuck(slot(0, "node-1", t0.Add(-time.Hour)))}}},
		{"a live slot marked stuck is simply held", append(members(3), stuck(slot(0, "node-1", t0))), "node-0", policy("1", 1), t0,
			Decision{Nodes: 3, Bound: 1, Holders: []string{"node-1"}}},
		{"failures on another revision do not count", append(members(3), failure("node-1", "rev-a"), failure("node-2", "rev-a")), "node-0", policy("1", 1), t0,
			Decision{Granted: true, Slot: slotName(0), Nodes: 3, Bound: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Decide(tt.leases, Request{Node: tt.node, Policy: tt.policy, Revision: "rev-b", Now: tt.now}, slotName)
			// A new slot is any free one below the bound: which one
			// depends on the node's name.
			if tt.want.Granted && !tt.want.Held {
				free := tt.want.Slot
				tt.want.Slot = got.Slot
				if !isFree(tt.leases, got.Slot, tt.want.Bound, tt.now) {
					t.Errorf("slot %q is not a free slot below the bound %d (like %s)", got.Slot, tt.want.Bound, free)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Decide (-want +got):\n%s", diff)
			}
			if (got.Reason(tt.policy) == "") != got.Granted {
				t.Errorf("reason %q for granted=%v", got.Reason(tt.policy), got.Granted)
			}
		})
	}
}

// TestDecideNeverExceedsTheBound plays a fleet over a fake clock: nodes
// ask in turn, hold their slot for a while, and some die holding it; at no
// instant are more live slots held than the bound, and every node gets
// its turn.
// isFree reports whether name is one of the first bound slots and no live
// Lease holds it.
func isFree(leases []Lease, name string, bound int, now time.Time) bool {
	below := false
	for i := range bound {
		below = below || SlotName(cm, i) == name
	}
	for _, l := range leases {
		if l.Name == name && l.Kind == KindSlot && l.Live(now) {
			return false
		}
	}
	return below
}

// TestDecideSpreads: nodes asking at once for 50 free slots mostly want
// different ones, so that few lose a race for the same slot.
func TestDecideSpreads(t *testing.T) {
	want := map[string]int{}
	for i := range 50 {
		d := Decide(members(50), Request{Node: fmt.Sprintf("node-%d", i), Policy: policy("100%", 1), Revision: "r", Now: t0}, func(i int) string { return SlotName(cm, i) })
		want[d.Slot]++
	}
	if len(want) < 25 {
		t.Errorf("50 nodes want only %d distinct slots of 50", len(want))
	}
}

func TestDecideNeverExceedsTheBound(t *testing.T) {
	for _, pol := range []configs.Rollout{policy("1", 1), policy("3", 1), policy("10%", 1), policy("25%", 1)} {
		t.Run(pol.MaxUnavailable.String(), func(t *testing.T) {
			const nodes = 40
			leases := members(nodes)
			done := map[string]bool{}
			slotName := func(i int) string { return SlotName(cm, i) }
			held := map[string]int{} // node -> index in leases of its slot
			now := t0
			for step := 0; len(done) < nodes && step < 10000; step++ {
				now = now.Add(time.Second)
				for i := range nodes {
					n := fmt.Sprintf("node-%d", i)
					if done[n] {
						continue
					}
					if k, ok := held[n]; ok {
						// A change lasts 5 s; node-7 dies holding its slot.
						if n == "node-7" && leases[k].Acquired.Add(5*time.Second).Before(now) {
							done[n] = true
							continue
						}
						if leases[k].Acquired.Add(5 * time.Second).Before(now) {
							leases[k].Holder = ""
							delete(held, n)
							done[n] = true
							continue
						}
						leases[k].Renewed = now
						continue
					}
					d := Decide(leases, Request{Node: n, Policy: pol, Revision: "r", Now: now}, slotName)
					if !d.Granted {
						continue
					}
					l := Lease{Name: d.Slot, Kind: KindSlot, Holder: n, Acquired: now, Renewed: now, Duration: 15 * time.Second}
					k := -1
					for j := range leases {
						if leases[j].Name == d.Slot {
							k = j
						}
					}
					if k >= 0 {
						if leases[k].Live(now) {
							t.Fatalf("%s granted %s, which %s holds", n, d.Slot, leases[k].Holder)
						}
						leases[k] = l
					} else {
						leases = append(leases, l)
						k = len(leases) - 1
					}
					held[n] = k
				}
				live := 0
				for _, l := range leases {
					if l.Kind == KindSlot && l.Live(now) {
						live++
					}
				}
				if bound := pol.MaxUnavailable.Of(nodes); live > bound {
					t.Fatalf("%s: %d slots held, bound %d", now.Sub(t0), live, bound)
				}
			}
			if len(done) < nodes {
				t.Fatalf("%d of %d nodes had their turn", len(done), nodes)
			}
		})
	}
}

func TestNames(t *testing.T) {
	long := strings.Repeat("n", 250)
	tests := []struct{ got, want string }{
		{SlotName(cm, 3), "carve-rollout-carve-profiles-3"},
		{MemberName(cm, "gpu-1"), "carve-member-carve-profiles-gpu-1"},
		{FailureName(cm, "gpu-1"), "carve-failure-carve-profiles-gpu-1"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("name %q, want %q", tt.got, tt.want)
		}
	}
	a, b := MemberName(cm, long+"a"), MemberName(cm, long+"b")
	if len(a) > 253 || len(b) > 253 || a == b {
		t.Errorf("long names %q (%d) and %q (%d): want distinct names of at most 253 characters", a, len(a), b, len(b))
	}
	if a, b := "x: 1\n", "x: 1\n"; Revision("a: 1\n") == Revision("a: 2\n") || Revision(a) != Revision(b) {
		t.Error("Revision must follow the content")
	}
}

func TestDecisionReason(t *testing.T) {
	tests := []struct {
		d    Decision
		p    configs.Rollout
		want string
	}{
		{Decision{Granted: true}, policy("1", 1), ""},
		{Decision{Bound: 3, Nodes: 1}, policy("3", 1), "all 3 rollout slots are held (maxUnavailable 3)"},
		{Decision{Bound: 2, Nodes: 20}, policy("10%", 1), "all 2 rollout slots are held (maxUnavailable 10% of 20 nodes)"},
		{Decision{Halted: true, Failed: []string{"a", "b"}}, policy("1", 2),
			"the rollout is halted: 2 of at most 2 nodes failed on this revision of the profile file (a, b); fix or revert the file to resume"},
	}
	for _, tt := range tests {
		if got := tt.d.Reason(tt.p); got != tt.want {
			t.Errorf("Reason = %q, want %q", got, tt.want)
		}
	}
}
