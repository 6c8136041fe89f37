package packing

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/carve-dev/carve/partition"
)

// TestNVIDIAOrder: NVIDIA's layout has the counters first, then one
// slice per GPU whose devices carry NVIDIA's names sorted by name, and the
// slices sort by name in that order; carve's puts a 1g at slice 6 and a
// 3g at 4 first, NVIDIA's at 0.
func TestNVIDIAOrder(t *testing.T) {
	m, _ := partition.LookupModel("H100-80GB")
	off, carve, err := carveNode(m, 2)
	if err != nil {
		t.Fatal(err)
	}
	nv, err := nvidiaSlices(off)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range nv {
		names = append(names, s.Name)
	}
	if diff := cmp.Diff([]string{
		"00000-gpu.carve.dev-node-a-x7k2q", "00001-gpu.carve.dev-node-a-x7k2q", "00002-gpu.carve.dev-node-a-x7k2q",
	}, names); diff != "" {
		t.Errorf("slice names (-want +got):\n%s", diff)
	}
	if len(nv[0].Spec.SharedCounters) != 2 || len(nv[0].Spec.Devices) != 0 {
		t.Errorf("first slice: %d counter sets, %d devices; want 2 and none", len(nv[0].Spec.SharedCounters), len(nv[0].Spec.Devices))
	}
	first := func(devs []string, prefix string) string {
		for _, d := range devs {
			if len(d) >= len(prefix) && d[:len(prefix)] == prefix {
				return d
			}
		}
		return ""
	}
	var nvGPU1 []string
	for _, d := range nv[2].Spec.Devices {
		nvGPU1 = append(nvGPU1, d.Name)
	}
	var carveAll []string
	for _, s := range carve {
		for _, d := range s.Spec.Devices {
			carveAll = append(carveAll, d.Name)
		}
	}
	got := []string{
		first(nvGPU1, "gpu-1-mig-1g10gb-19-"), first(nvGPU1, "gpu-1-mig-3g40gb-9-"), first(nvGPU1, "gpu-1-mig-1g10gb-me-20-"),
		first(carveAll, "gpu-0-dyn-1g10gb-"), first(carveAll, "gpu-0-dyn-3g40gb-"),
	}
	want := []string{"gpu-1-mig-1g10gb-19-0", "gpu-1-mig-3g40gb-9-0", "gpu-1-mig-1g10gb-me-20-0", "gpu-0-dyn-1g10gb-6", "gpu-0-dyn-3g40gb-4"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("first device of a profile (-want +got):\n%s", diff)
	}
	if len(nvGPU1) != len(carveAll)/2 {
		t.Errorf("NVIDIA's slice of GPU 1 has %d devices, carve's node %d for 2 GPUs", len(nvGPU1), len(carveAll))
	}
	for i := 1; i < len(nvGPU1); i++ {
		if nvGPU1[i-1] >= nvGPU1[i] {
			t.Errorf("NVIDIA's devices not sorted by name: %s before %s", nvGPU1[i-1], nvGPU1[i])
		}
	}
}

// TestNVIDIAName: the names NVIDIA's driver gives its DynamicMIG devices.
func TestNVIDIAName(t *testing.T) {
	m, _ := partition.LookupModel("H100-80GB")
	var got []string
	for _, p := range []string{"1g.10gb", "1g.10gb+me", "7g.80gb"} {
		gi, _ := m.Profile(p)
		got = append(got, nvidiaName(3, gi, gi.Placements[len(gi.Placements)-1]))
	}
	if diff := cmp.Diff([]string{"gpu-3-mig-1g10gb-19-6", "gpu-3-mig-1g10gb-me-20-6", "gpu-3-mig-7g80gb-0-0"}, got); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
}

// TestA30Mirror: on the A30 carve's order of each profile of its mix is
// NVIDIA's reversed, as the table's note says.
func TestA30Mirror(t *testing.T) {
	m, _ := partition.LookupModel("A30-24GB")
	off, _, err := carveNode(m, 1)
	if err != nil {
		t.Fatal(err)
	}
	nv, err := nvidiaSlices(off)
	if err != nil {
		t.Fatal(err)
	}
	starts := func(names []string) map[string][]int {
		out := map[string][]int{}
		for _, n := range names {
			d := off.Dynamic[n]
			out[d.Profile.Name] = append(out[d.Profile.Name], d.At.Start)
		}
		return out
	}
	var carveNames, nvNames []string
	for _, d := range off.Devices {
		carveNames = append(carveNames, d.Name)
	}
	back := map[string]string{} // NVIDIA's name -> carve's
	for name, d := range off.Dynamic {
		back[nvidiaName(d.GPUIndex, d.Profile, d.At)] = name
	}
	for _, d := range nv[1].Spec.Devices {
		nvNames = append(nvNames, back[d.Name])
	}
	c, n := starts(carveNames), starts(nvNames)
	a30 := Cases(false)[3]
	if a30.Model != "A30-24GB" {
		t.Fatalf("case 3 is %s", a30.Name())
	}
	for _, s := range a30.Mix {
		rev := slices.Clone(n[s.Profile])
		slices.Reverse(rev)
		if len(rev) == 0 || !slices.Equal(c[s.Profile], rev) {
			t.Errorf("%s: carve's starts %v, NVIDIA's %v: not mirrored", s.Profile, c[s.Profile], n[s.Profile])
		}
	}
}
