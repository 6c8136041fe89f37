package configs

import (
	"fmt"
	"sort"
	"strings"
)

// fakeProfile is one MIG profile of a fake model: where its instances may
// start, how many memory slices each covers, and how many fit at most.
type fakeProfile struct {
	name   string
	starts []int
	size   int
	max    int
}

// fakeGeometry is a small Geometry for tests, after shared/mig-geometry.md,
// with an exhaustive placement search.
type fakeGeometry struct {
	models []GPUModel
	shapes map[string][]fakeProfile
}

func eightSlice(gb [6]int) []fakeProfile {
	n := func(c, g int) string { return fmt.Sprintf("%dg.%dgb", c, g) }
	return []fakeProfile{
		{n(1, gb[0]), []int{0, 1, 2, 3, 4, 5, 6}, 1, 7},
		{n(1, gb[0]) + "+me", []int{0, 1, 2, 3, 4, 5, 6}, 1, 1},
		{n(1, gb[1]), []int{0, 2, 4, 6}, 2, 4},
		{n(2, gb[2]), []int{0, 2, 4}, 2, 3},
		{n(3, gb[3]), []int{0, 4}, 4, 2},
		{n(4, gb[4]), []int{0}, 4, 1},
		{n(7, gb[5]), []int{0}, 8, 1},
	}
}

func newFakeGeometry() *fakeGeometry {
	g := &fakeGeometry{shapes: map[string][]fakeProfile{
		"A100-40GB":  eightSlice([6]int{5, 10, 10, 20, 20, 40}),
		"H100-80GB":  eightSlice([6]int{10, 20, 20, 40, 40, 80}),
		"H200-141GB": eightSlice([6]int{18, 35, 35, 71, 71, 141}),
		"A30-24GB": {
			{"1g.6gb", []int{0, 1, 2, 3}, 1, 4},
			{"1g.6gb+me", []int{0, 1, 2, 3}, 1, 1},
			{"2g.12gb", []int{0, 2}, 2, 2},
			{"2g.12gb+me", []int{0, 2}, 2, 1},
			{"4g.24gb", []int{0}, 4, 1},
		},
	}}
	products := map[string]string{
		"A100-40GB":  "NVIDIA A100-SXM4-40GB",
		"H100-80GB":  "NVIDIA H100 80GB HBM3",
		"H200-141GB": "NVIDIA H200",
		"A30-24GB":   "NVIDIA A30",
	}
	for _, key := range []string{"A100-40GB", "H100-80GB", "H200-141GB", "A30-24GB"} {
		m := GPUModel{Key: key, Product: products[key]}
		for _, p := range g.shapes[key] {
			m.Profiles = append(m.Profiles, p.name)
		}
		g.models = append(g.models, m)
	}
	return g
}

func (g *fakeGeometry) Models() []GPUModel { return g.models }

func (g *fakeGeometry) Fit(model string, counts map[string]int) error {
	shapes, ok := g.shapes[model]
	if !ok {
		return fmt.Errorf("unknown model %s", model)
	}
	var want []fakeProfile
	me := 0
	for _, name := range sortedKeys(counts) {
		var p *fakeProfile
		for i := range shapes {
			if shapes[i].name == name {
				p = &shapes[i]
			}
		}
		if p == nil {
			return fmt.Errorf("%s has no profile %s", model, name)
		}
		if counts[name] > p.max {
			return fmt.Errorf("at most %d %s per GPU", p.max, name)
		}
		if strings.HasSuffix(name, "+me") {
			me += counts[name]
		}
		for range counts[name] {
			want = append(want, *p)
		}
	}
	if me > 1 {
		return fmt.Errorf("at most one +me instance per GPU")
	}
	sort.Slice(want, func(i, j int) bool { return want[i].size > want[j].size })
	used := make([]bool, 8)
	var place func(k int) bool
	place = func(k int) bool {
		if k == len(want) {
			return true
		}
		for _, s := range want[k].starts {
			free := true
			for x := s; x < s+want[k].size; x++ {
				free = free && !used[x]
			}
			if !free {
				continue
			}
			for x := s; x < s+want[k].size; x++ {
				used[x] = true
			}
			if place(k + 1) {
				return true
			}
			for x := s; x < s+want[k].size; x++ {
				used[x] = false
			}
		}
		return false
	}
	if !place(0) {
		return fmt.Errorf("no placement holds them all")
	}
	return nil
}
