package sim_test

import (
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
		{"dgx-b200", "dgx-a100-80"},
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
