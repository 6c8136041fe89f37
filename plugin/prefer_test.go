package plugin

import (
	"reflect"
	"slices"
	"sort"
	"testing"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/timeslice"
)

func TestBinomialAtMost(t *testing.T) {
	tests := []struct {
		n, k, limit int
		want        bool
	}{
		{8, 4, 70, true},
		{8, 4, 69, false},
		{20, 10, 184756, true},
		{20, 10, 184755, false},
		{24, 6, exactLimit, false},
		{16, 8, exactLimit, true},
		{5, 0, 1, true},
		{5, 5, 1, true},
	}
	for _, tt := range tests {
		if got := binomialAtMost(tt.n, tt.k, tt.limit); got != tt.want {
			t.Errorf("binomialAtMost(%d, %d, %d) = %v, want %v", tt.n, tt.k, tt.limit, got, tt.want)
		}
	}
}

// cliques is a topology of GPUs in groups of size; GPUs of group g have
// strength(g) NVLinks to each other, GPUs of different groups none.
func cliques(size int, strength func(g int) int) func(a, b int) int64 {
	top := newTopology(nil, discardLogger())
	score := func(a, b int) int64 {
		if a/size == b/size {
			return top.pairScoreOf(a, b, partition.Link{NVLinks: strength(a / size), PCIe: 50})
		}
		return top.pairScoreOf(a, b, partition.Link{PCIe: 50})
	}
	return score
}

func TestPickCloseLargeUsesGreedy(t *testing.T) {
	// 24 GPUs in 4 groups of 6; group 2 is the strongest. C(24,6) is
	// beyond the exact limit, so the greedy search runs.
	if binomialAtMost(24, 6, exactLimit) {
		t.Fatal("test needs a size beyond the exact search")
	}
	score := cliques(6, func(g int) int { return []int{4, 6, 18, 12}[g] })
	tests := []struct {
		name  string
		fixed []int
		need  int
		want  []int
	}{
		{"strongest group", nil, 6, []int{12, 13, 14, 15, 16, 17}},
		{"group of the must-include GPU", []int{19}, 5, []int{18, 20, 21, 22, 23}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cands, fixed []timeslice.Device
			for i := range 24 {
				if slices.Contains(tt.fixed, i) {
					fixed = append(fixed, wholeGPUs(i)...)
				} else {
					cands = append(cands, wholeGPUs(i)...)
				}
			}
			slices.SortFunc(cands, compareDevices)
			var got []int
			for _, d := range pickClose(fixed, cands, tt.need, score) {
				got = append(got, d.GPU)
			}
			sort.Ints(got)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got GPUs %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPickCloseBestTripleAvoidsBestPair(t *testing.T) {
	// The single best pair (0-1) is not part of the best triple
	// {2,3,4}: exact search must find the triple.
	links := map[[2]int]int{{0, 1}: 20, {2, 3}: 12, {2, 4}: 12, {3, 4}: 12, {0, 2}: 1, {1, 3}: 1}
	score := func(a, b int) int64 {
		if a > b {
			a, b = b, a
		}
		return int64(links[[2]int{a, b}]) * nvlinkWeight
	}
	var cands []timeslice.Device
	for i := range 5 {
		cands = append(cands, wholeGPUs(i)...)
	}
	var got []int
	for _, d := range pickClose(nil, cands, 3, score) {
		got = append(got, d.GPU)
	}
	if !reflect.DeepEqual(got, []int{2, 3, 4}) {
		t.Errorf("got %v, want [2 3 4]", got)
	}
}

func TestPreferMIGDevicesOnOneGPU(t *testing.T) {
	devs := append(migDevs(0, "1g.10gb", 1, 1), migDevs(1, "1g.10gb", 1, 1, 2)...)
	known := map[string]timeslice.Device{}
	var avail []string
	for _, d := range devs {
		known[d.ID] = d
		avail = append(avail, d.ID)
	}
	top := newTopology(topologyNVML(), discardLogger())
	got := prefer(known, avail, nil, 2, Spread, top.pairScore)
	sort.Strings(got)
	if want := []string{"MIG-1-1", "MIG-1-2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v (both on GPU 1)", got, want)
	}
}

func TestTopologyScoreOrder(t *testing.T) {
	f := newFakeNVML(4)
	f.link(0, 1, partition.Link{NVLinks: 1, PCIe: 50})
	f.link(0, 2, partition.Link{NVLinks: 0, PCIe: 10})
	f.link(0, 3, partition.Link{NVLinks: 0, PCIe: 40})
	top := newTopology(f, discardLogger())
	same, nv, sw, numa := top.pairScore(0, 0), top.pairScore(0, 1), top.pairScore(2, 0), top.pairScore(0, 3)
	if !(same > nv && nv > sw && sw > numa) {
		t.Errorf("scores same=%d nvlink=%d switch=%d numa=%d, want strictly decreasing", same, nv, sw, numa)
	}
	if none := newTopology(nil, discardLogger()).pairScore(0, 1); none >= numa {
		t.Errorf("unknown topology scores %d, want below a known NUMA link %d", none, numa)
	}
}
