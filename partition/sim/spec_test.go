package sim_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
)

func TestParse(t *testing.T) {
	cases := []struct {
		spec     string
		name     string
		count    int
		products []string // product of each GPU, or of all when one is given
		memMiB   uint64
	}{
		{"dgx-a100", "dgx-a100", 8, []string{"NVIDIA A100-SXM4-40GB"}, 40960},
		{"sim:dgx-a100-80", "dgx-a100-80", 8, []string{"NVIDIA A100-SXM4-80GB"}, 81920},
		{" DGX-H100 ", "dgx-h100", 8, []string{"NVIDIA H100 80GB HBM3"}, 81559},
		{"hgx-h200", "hgx-h200", 8, []string{"NVIDIA H200"}, 143771},
		{"a30x4", "a30x4", 4, []string{"NVIDIA A30"}, 24576},
		{"sim:dgx-b200", "dgx-b200", 8, []string{"NVIDIA B200"}, 183359},
		{"gb200-nvl4", "gb200-nvl4", 4, []string{"NVIDIA GB200"}, 189471},
		{"h100-nvl-x2", "h100-nvl-x2", 2, []string{"NVIDIA H100 NVL"}, 95830},
		{"RTX-PRO-6000-X4", "rtx-pro-6000-x4", 4, []string{"NVIDIA RTX PRO 6000 Blackwell Server Edition"}, 97887},
		{"h100-94gb*2,h100-96gb,gh200-144gb", "h100-94gb*2,h100-96gb,gh200-144gb", 4, []string{"NVIDIA H100 NVL", "NVIDIA H100 NVL", "NVIDIA GH200 480GB", "NVIDIA GH200 144G HBM3e"}, 0},
		{"b300-288gb,gb300-288gb,rtx-pro-6000-96gb*2", "b300-288gb,gb300-288gb,rtx-pro-6000-96gb*2", 4, []string{"NVIDIA B300 SXM6 AC", "NVIDIA GB300", "NVIDIA RTX PRO 6000 Blackwell Server Edition", "NVIDIA RTX PRO 6000 Blackwell Server Edition"}, 0},
		{"l4-24gb", "l4-24gb", 1, []string{"NVIDIA L4"}, 23034},
		{"sim:H100-80GB*2, a100-40gb*1", "h100-80gb*2,a100-40gb", 3, []string{"NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"}, 0},
		{"a30-24gb,l4-24gb*2", "a30-24gb,l4-24gb*2", 3, []string{"NVIDIA A30", "NVIDIA L4", "NVIDIA L4"}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.spec, func(t *testing.T) {
			s, err := sim.Parse(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			if s.Name != tc.name || len(s.GPUs) != tc.count || s.String() != "sim:"+tc.name {
				t.Fatalf("Parse = %s with %d GPUs, want %s with %d", s.Name, len(s.GPUs), tc.name, tc.count)
			}
			for i, g := range s.GPUs {
				want := tc.products[0]
				if len(tc.products) > 1 {
					want = tc.products[i]
				}
				if g.Product != want {
					t.Errorf("GPU %d product %q, want %q", i, g.Product, want)
				}
				if tc.memMiB != 0 && g.MemoryMiB != tc.memMiB {
					t.Errorf("GPU %d memory %d, want %d", i, g.MemoryMiB, tc.memMiB)
				}
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct{ spec, mention string }{
		{"", "dgx-h100"},
		{"sim:", "dgx-h100"},
		{"dgx-b300", "dgx-a100-80"},
		{"dgx-b300", "rtx-pro-6000-x4"},
		{"rtx-pro-6000", "rtx-pro-6000-96gb"},
		{"h100-80gb*0", "bad count"},
		{"h100-80gb*x", "bad count"},
		{"h100-80gb*-1", "bad count"},
		{"h100-80gb,,a30-24gb", "h100-80gb*2"},
		{"dgx-h100,a30-24gb", "l4-24gb"},
		{"h100-80gb*65", "more than 64"},
		{"a30-24gb,a30-24gb*9223372036854775807", "more than 64"},
	}
	for _, tc := range cases {
		t.Run(tc.spec, func(t *testing.T) {
			_, err := sim.Parse(tc.spec)
			wantErr(t, "Parse", err, partition.ErrInvalidArgument)
			if err != nil && !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("error %q does not mention %q", err, tc.mention)
			}
			if _, err := sim.New(tc.spec); err == nil {
				t.Errorf("New accepted %q", tc.spec)
			}
		})
	}
}

func TestTopology(t *testing.T) {
	cases := []struct {
		spec string
		a, b int
		want partition.Link
	}{
		{"dgx-a100", 0, 0, partition.Link{}},
		{"dgx-a100", 0, 1, partition.Link{NVLinks: 12, PCIe: 10}},
		{"dgx-a100", 2, 3, partition.Link{NVLinks: 12, PCIe: 10}},
		{"dgx-a100", 1, 2, partition.Link{NVLinks: 12, PCIe: 40}},
		{"dgx-a100", 3, 4, partition.Link{NVLinks: 12, PCIe: 50}},
		{"dgx-a100-80", 7, 0, partition.Link{NVLinks: 12, PCIe: 50}},
		{"dgx-h100", 4, 5, partition.Link{NVLinks: 18, PCIe: 10}},
		{"dgx-h100", 4, 7, partition.Link{NVLinks: 18, PCIe: 40}},
		{"hgx-h200", 6, 1, partition.Link{NVLinks: 18, PCIe: 50}},
		{"hgx-h200", 6, 6, partition.Link{}},
		{"a30x4", 0, 1, partition.Link{NVLinks: 4, PCIe: 10}},
		{"a30x4", 3, 2, partition.Link{NVLinks: 4, PCIe: 10}},
		{"a30x4", 1, 2, partition.Link{PCIe: 40}},
		{"dgx-b200", 0, 7, partition.Link{NVLinks: 18, PCIe: 50}},
		{"gb200-nvl4", 0, 3, partition.Link{NVLinks: 6, PCIe: 40}},
		{"h100-nvl-x2", 0, 1, partition.Link{NVLinks: 12, PCIe: 10}},
		{"rtx-pro-6000-x4", 1, 2, partition.Link{PCIe: 40}},
		{"rtx-pro-6000-x4", 2, 3, partition.Link{PCIe: 10}},
		{"h100-80gb*2,a100-40gb*4", 0, 1, partition.Link{PCIe: 10}},
		{"h100-80gb*2,a100-40gb*4", 1, 3, partition.Link{PCIe: 40}},
		{"h100-80gb*2,a100-40gb*4", 0, 5, partition.Link{PCIe: 50}},
	}
	for _, tc := range cases {
		t.Run(tc.spec, func(t *testing.T) {
			m := open(t, tc.spec)
			got, err := m.Topology(tc.a, tc.b)
			if err != nil || got != tc.want {
				t.Errorf("Topology(%d, %d) = %+v, %v; want %+v", tc.a, tc.b, got, err, tc.want)
			}
			if back, _ := m.Topology(tc.b, tc.a); back != got {
				t.Errorf("Topology not symmetric: %+v vs %+v", got, back)
			}
		})
	}
	m := open(t, "a30x4")
	_, err := m.Topology(0, 4)
	wantErr(t, "Topology out of range", err, partition.ErrInvalidArgument)
}

func TestSpecCopies(t *testing.T) {
	m := open(t, "dgx-h100")
	s := m.Spec()
	s.GPUs[0].Profiles[0].Placements[0].Start = 5
	s.GPUs[0].Product = "changed"
	d := device(t, m, 0)
	enableMIG(t, d)
	if p := profileIDs(t, d)["1g.10gb"]; p.Placements[0].Start != 0 {
		t.Errorf("changing Spec() changed the machine: %v", p.Placements)
	}
	if name, _ := d.Name(); name != "NVIDIA H100 80GB HBM3" {
		t.Errorf("name %q", name)
	}
	// Profiles handed out are copies too.
	ps, _ := d.GPUInstanceProfiles()
	ps[0].Placements[0].Start = 3
	if p := profileIDs(t, d)["1g.10gb"]; p.Placements[0].Start != 0 {
		t.Errorf("changing GPUInstanceProfiles() changed the machine")
	}
}

// TestEveryCatalogueModel checks that the list form takes every model of
// the catalogue by its lowercase key, and that each simulated GPU reports
// the model's product, memory and first PCI device ID, by which the
// inventory names it with the catalogue's key (a GH200 480GB is the
// H100-96GB, as NVIDIA's configurations group it).
func TestEveryCatalogueModel(t *testing.T) {
	keys := sim.ModelKeys()
	for _, cm := range partition.Catalogue() {
		key := strings.ToLower(cm.Key)
		t.Run(key, func(t *testing.T) {
			if !slices.Contains(keys, key) {
				t.Errorf("ModelKeys() %v lacks %s", keys, key)
			}
			d := device(t, open(t, key+"*2"), 1)
			id, err := d.PCIDeviceID()
			if err != nil || id != cm.PCIDeviceIDs[0] {
				t.Errorf("PCIDeviceID() = %s, %v; want %s", partition.FormatPCIDeviceID(id), err, partition.FormatPCIDeviceID(cm.PCIDeviceIDs[0]))
			}
			g, err := partition.ReadGPU(d)
			if err != nil {
				t.Fatal(err)
			}
			if g.Model != cm.Key || g.Product != cm.Product || g.MemoryMiB != cm.MemoryMiB || !g.MIGCapable {
				t.Errorf("ReadGPU = %s %q %d MiB MIG %v; want %s %q %d MiB", g.Model, g.Product, g.MemoryMiB, g.MIGCapable, cm.Key, cm.Product, cm.MemoryMiB)
			}
			// With MIG on, the geometry read from the device is the
			// catalogue's.
			enableMIG(t, d)
			m, err := partition.ModelFromDevice(d)
			if err != nil {
				t.Fatal(err)
			}
			if m.Key != cm.Key || m.MemorySlices != cm.MemorySlices || m.ComputeSlices != cm.ComputeSlices ||
				!slices.EqualFunc(m.Profiles, cm.Profiles, func(a, b partition.GIProfile) bool { return fmt.Sprint(a) == fmt.Sprint(b) }) {
				t.Errorf("ModelFromDevice = %s %v on %d/%d slices, want the catalogue's %v", m.Key, m.ProfileNames(), m.MemorySlices, m.ComputeSlices, cm.ProfileNames())
			}
		})
	}
	if id, err := device(t, open(t, "l4-24gb"), 0).PCIDeviceID(); err != nil || id != 0x27B810DE {
		t.Errorf("L4 PCIDeviceID() = %#x, %v", id, err)
	}
}

// smallSets lists the multisets of m's profiles with at most three
// instances, and each profile alone up to one past its maximum.
func smallSets(m partition.Model) []map[string]int {
	var out []map[string]int
	ps := m.Profiles
	for i := range ps {
		for j := i; j < len(ps); j++ {
			for k := j; k < len(ps); k++ {
				out = append(out, map[string]int{ps[i].Name: 1}, counts(ps[i].Name, ps[j].Name), counts(ps[i].Name, ps[j].Name, ps[k].Name))
			}
		}
		for n := 2; n <= ps[i].MaxCount+1; n++ {
			out = append(out, map[string]int{ps[i].Name: n})
		}
	}
	return out
}

func counts(names ...string) map[string]int {
	c := map[string]int{}
	for _, n := range names {
		c[n]++
	}
	return c
}

// TestSimulatorMatchesPlace checks, on every catalogue model, that the
// simulated hardware accepts a set of instances exactly when the planner's
// exact search (partition.Place) finds room for it: placements, overlaps,
// per-profile limits and the one instance with media extensions are the
// same on both sides. It also checks that no profile can be created at a
// placement it lacks.
func TestSimulatorMatchesPlace(t *testing.T) {
	for _, cm := range partition.Catalogue() {
		t.Run(cm.Key, func(t *testing.T) {
			d := migDevice(t, strings.ToLower(cm.Key))
			byName := profileIDs(t, d)
			seen, verdicts := map[string]bool{}, map[bool]int{}
			for _, set := range smallSets(cm) {
				k := fmt.Sprint(set)
				if seen[k] {
					continue
				}
				seen[k] = true
				var ps []partition.GIProfile
				for _, p := range cm.Profiles { // in the catalogue's order, identical profiles together
					for range set[p.Name] {
						ps = append(ps, byName[p.Name])
					}
				}
				_, err := partition.Place(cm, set)
				got := fitsSomehow(t, d, ps)
				if got != (err == nil) {
					t.Errorf("%v: the simulator says fits=%v, Place says %v", set, got, err)
				}
				verdicts[got]++
			}
			if verdicts[true] == 0 || verdicts[false] == 0 {
				t.Errorf("sets that fit: %d, that do not: %d; both verdicts must be exercised", verdicts[true], verdicts[false])
			}
			for _, p := range cm.Profiles {
				valid := map[int]bool{}
				for _, pl := range p.Placements {
					valid[pl.Start] = true
				}
				for start := range cm.MemorySlices {
					if valid[start] {
						continue
					}
					_, err := d.CreateGPUInstance(p.ID, partition.Placement{Start: start, Size: p.MemorySlices})
					wantErr(t, fmt.Sprintf("%s at %d", p.Name, start), err, partition.ErrInvalidArgument)
				}
			}
			if gis, _ := d.GPUInstances(); len(gis) != 0 {
				t.Errorf("tests left %v", gis)
			}
		})
	}
}
