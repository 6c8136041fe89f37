package plugin

import (
	"cmp"
	"context"
	"slices"
	"sort"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/carve-dev/carve/timeslice"
)

// exactLimit is the most candidate sets the topology search scores one by
// one; beyond it a greedy search is used.
const exactLimit = 20000

// GetPreferredAllocation picks, per container, AllocationSize devices from
// the available ones: every must-include ID, then replicas spread over (or
// packed onto) physical devices, or whole devices close in the topology.
func (s *server) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	known, _ := s.snapshot()
	resp := &pluginapi.PreferredAllocationResponse{
		ContainerResponses: make([]*pluginapi.ContainerPreferredAllocationResponse, 0, len(req.GetContainerRequests())),
	}
	for i, cr := range req.GetContainerRequests() {
		if cr.GetAllocationSize() < 0 {
			return nil, status.Errorf(codes.InvalidArgument, "%s: container request %d: negative allocation size %d", s.resource, i, cr.GetAllocationSize())
		}
		ids := prefer(known, cr.GetAvailableDeviceIDs(), cr.GetMustIncludeDeviceIDs(), int(cr.GetAllocationSize()), s.m.opts.ReplicaPolicy, s.m.topo.pairScore)
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

// prefer chooses size device IDs: all must-include IDs (even beyond size),
// then from the available IDs the resource advertises, then — only to
// reach size — available IDs it does not know (e.g. just withdrawn).
func prefer(known map[string]timeslice.Device, avail, must []string, size int, policy ReplicaPolicy, score func(a, b int) int64) []string {
	chosen := make([]string, 0, max(size, len(must)))
	taken := make(map[string]bool, len(must)+len(avail))
	var fixed []timeslice.Device
	for _, id := range must {
		if taken[id] {
			continue
		}
		taken[id] = true
		chosen = append(chosen, id)
		if d, ok := known[id]; ok {
			fixed = append(fixed, d)
		}
	}
	if len(chosen) >= size {
		return chosen
	}
	cands := make([]timeslice.Device, 0, len(avail))
	var unknown []string
	for _, id := range avail {
		if taken[id] {
			continue
		}
		taken[id] = true
		if d, ok := known[id]; ok {
			cands = append(cands, d)
		} else {
			unknown = append(unknown, id)
		}
	}
	slices.SortFunc(cands, compareDevices)
	need := min(size-len(chosen), len(cands))
	isReplica := func(d timeslice.Device) bool { return d.Replica >= 0 }
	replicas := slices.ContainsFunc(fixed, isReplica) || slices.ContainsFunc(cands, isReplica)
	var picked []timeslice.Device
	if replicas {
		picked = pickReplicas(fixed, cands, need, policy)
	} else {
		picked = pickClose(fixed, cands, need, score)
	}
	for _, d := range picked {
		chosen = append(chosen, d.ID)
	}
	for _, id := range unknown {
		if len(chosen) >= size {
			break
		}
		chosen = append(chosen, id)
	}
	return chosen
}

// compareDevices orders devices by GPU, physical device, replica and ID.
func compareDevices(a, b timeslice.Device) int {
	return cmp.Or(cmp.Compare(a.GPU, b.GPU), strings.Compare(a.UUID, b.UUID),
		cmp.Compare(a.Replica, b.Replica), strings.Compare(a.ID, b.ID))
}

// bucket holds the available replicas of one physical device: a part of
// the sorted candidates, which keeps a device's replicas together.
type bucket struct {
	uuid string
	gpu  int
	ids  []timeslice.Device
}

// pickReplicas picks need replicas from cands (sorted). Spread takes each
// next replica from the physical device, then the GPU, used least so far
// (must-include replicas count as used); Pack takes it from a device
// already used if possible, else from the device with the most replicas
// left.
func pickReplicas(fixed, cands []timeslice.Device, need int, policy ReplicaPolicy) []timeslice.Device {
	var buckets []*bucket
	for start := 0; start < len(cands); {
		end := start + 1
		for end < len(cands) && cands[end].UUID == cands[start].UUID {
			end++
		}
		buckets = append(buckets, &bucket{uuid: cands[start].UUID, gpu: cands[start].GPU, ids: cands[start:end:end]})
		start = end
	}
	usedDev, usedGPU := map[string]int{}, map[int]int{}
	for _, d := range fixed {
		usedDev[d.UUID]++
		usedGPU[d.GPU]++
	}
	better := func(a, b *bucket) bool { // is a better than b
		if policy == Pack {
			ua, ub := usedDev[a.uuid] > 0, usedDev[b.uuid] > 0
			if ua != ub {
				return ua
			}
			if len(a.ids) != len(b.ids) {
				return len(a.ids) > len(b.ids)
			}
			ga, gb := usedGPU[a.gpu] > 0, usedGPU[b.gpu] > 0
			if ga != gb {
				return ga
			}
			return false
		}
		if usedDev[a.uuid] != usedDev[b.uuid] {
			return usedDev[a.uuid] < usedDev[b.uuid]
		}
		if usedGPU[a.gpu] != usedGPU[b.gpu] {
			return usedGPU[a.gpu] < usedGPU[b.gpu]
		}
		return len(a.ids) > len(b.ids)
	}
	out := make([]timeslice.Device, 0, need)
	for len(out) < need {
		var best *bucket
		for _, b := range buckets {
			if len(b.ids) > 0 && (best == nil || better(b, best)) {
				best = b
			}
		}
		if best == nil {
			break
		}
		d := best.ids[0]
		best.ids = best.ids[1:]
		usedDev[d.UUID]++
		usedGPU[d.GPU]++
		out = append(out, d)
	}
	return out
}

// pickClose picks need devices from cands (sorted) that, with fixed, have
// the highest sum of pairwise scores: exactly when there are at most
// exactLimit candidate sets, else greedily (from fixed, or from each
// candidate in turn when nothing is fixed). Ties go to the set that comes
// first in device order.
func pickClose(fixed, cands []timeslice.Device, need int, score func(a, b int) int64) []timeslice.Device {
	if need <= 0 {
		return nil
	}
	if need >= len(cands) {
		return cands
	}
	n := len(cands)
	// gain0[i]: score of cands[i] with the fixed devices; pair[i][j]:
	// score of two candidates.
	gain0 := make([]int64, n)
	pair := make([][]int64, n)
	for i := range cands {
		for _, f := range fixed {
			gain0[i] += score(cands[i].GPU, f.GPU)
		}
		pair[i] = make([]int64, n)
	}
	for i := range n {
		for j := i + 1; j < n; j++ {
			p := score(cands[i].GPU, cands[j].GPU)
			pair[i][j], pair[j][i] = p, p
		}
	}
	var best []int
	if binomialAtMost(n, need, exactLimit) {
		best = exactClose(gain0, pair, need)
	} else {
		best = greedyClose(gain0, pair, need, len(fixed) > 0)
	}
	out := make([]timeslice.Device, len(best))
	for i, k := range best {
		out[i] = cands[k]
	}
	return out
}

// binomialAtMost reports whether n choose k is at most limit.
func binomialAtMost(n, k, limit int) bool {
	k = min(k, n-k)
	c := 1
	for i := 1; i <= k; i++ {
		c = c * (n - k + i) / i
		if c > limit {
			return false
		}
	}
	return true
}

// exactClose scores every set of need candidates.
func exactClose(gain0 []int64, pair [][]int64, need int) []int {
	n := len(gain0)
	cur := make([]int, 0, need)
	var best []int
	bestScore := int64(-1)
	var walk func(start int, sc int64)
	walk = func(start int, sc int64) {
		if len(cur) == need {
			if sc > bestScore {
				bestScore = sc
				best = append(best[:0], cur...)
			}
			return
		}
		for i := start; i <= n-(need-len(cur)); i++ {
			add := gain0[i]
			for _, j := range cur {
				add += pair[i][j]
			}
			cur = append(cur, i)
			walk(i+1, sc+add)
			cur = cur[:len(cur)-1]
		}
	}
	walk(0, 0)
	sort.Ints(best)
	return best
}

// greedyClose grows a set by the candidate that adds most to its score.
// Without fixed devices it tries each candidate as the seed.
func greedyClose(gain0 []int64, pair [][]int64, need int, hasFixed bool) []int {
	n := len(gain0)
	grow := func(seed int) ([]int, int64) {
		gain := append([]int64(nil), gain0...)
		in := make([]bool, n)
		set := make([]int, 0, need)
		var total int64
		add := func(k int) {
			in[k] = true
			set = append(set, k)
			total += gain[k]
			for i := range n {
				gain[i] += pair[i][k]
			}
		}
		if seed >= 0 {
			add(seed)
		}
		for len(set) < need {
			bestK := -1
			for i := range n {
				if !in[i] && (bestK < 0 || gain[i] > gain[bestK]) {
					bestK = i
				}
			}
			add(bestK)
		}
		sort.Ints(set)
		return set, total
	}
	if hasFixed {
		set, _ := grow(-1)
		return set
	}
	var best []int
	bestScore := int64(-1)
	for seed := range n {
		set, sc := grow(seed)
		if sc > bestScore {
			best, bestScore = set, sc
		}
	}
	return best
}
