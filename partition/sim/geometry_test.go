package sim_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/carve-dev/carve/partition"
)

// oracleProfile is one row of a table in docs/hardware.md, written
// out independently of the catalogue.
type oracleProfile struct {
	name   string
	starts []int
	size   int
	max    int
}

// roles name the rows of the 8-slice table in the doc's order.
func roles() []string { return []string{"1g", "1g+me", "1g2", "2g", "3g", "4g", "7g"} }

// eightSliceModels are the 8-slice models with their profile names in the
// order of roles(), as the doc's table lists them.
func eightSliceModels() []struct {
	spec  string
	names []string
} {
	return []struct {
		spec  string
		names []string
	}{
		{"a100-40gb", []string{"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"}},
		{"a100-80gb", []string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}},
		{"h100-80gb", []string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}},
		{"h200-141gb", []string{"1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"}},
	}
}

// eightSliceOracle is the doc's table for one 8-slice model.
func eightSliceOracle(names []string) []oracleProfile {
	return []oracleProfile{
		{names[0], []int{0, 1, 2, 3, 4, 5, 6}, 1, 7},
		{names[1], []int{0, 1, 2, 3, 4, 5, 6}, 1, 1},
		{names[2], []int{0, 2, 4, 6}, 2, 4},
		{names[3], []int{0, 2, 4}, 2, 3},
		{names[4], []int{0, 4}, 4, 2},
		{names[5], []int{0}, 4, 1},
		{names[6], []int{0}, 8, 1},
	}
}

// a30Oracle is the doc's A30 table.
func a30Oracle() []oracleProfile {
	return []oracleProfile{
		{"1g.6gb", []int{0, 1, 2, 3}, 1, 4},
		{"1g.6gb+me", []int{0, 1, 2, 3}, 1, 1},
		{"2g.12gb", []int{0, 2}, 2, 2},
		{"2g.12gb+me", []int{0, 2}, 2, 1},
		{"4g.24gb", []int{0}, 4, 1},
	}
}

// migDevice returns GPU 0 of a one-GPU machine of that model, MIG enabled.
func migDevice(t *testing.T, spec string) partition.Device {
	t.Helper()
	d := device(t, open(t, spec), 0)
	enableMIG(t, d)
	return d
}

func TestProfilesMatchGeometryTables(t *testing.T) {
	cases := []struct {
		spec   string
		oracle []oracleProfile
	}{{"a30-24gb", a30Oracle()}}
	for _, m := range eightSliceModels() {
		cases = append(cases, struct {
			spec   string
			oracle []oracleProfile
		}{m.spec, eightSliceOracle(m.names)})
	}
	for _, tc := range cases {
		t.Run(tc.spec, func(t *testing.T) {
			got := profileIDs(t, migDevice(t, tc.spec))
			if len(got) != len(tc.oracle) {
				t.Errorf("%d profiles, want %d", len(got), len(tc.oracle))
			}
			for _, o := range tc.oracle {
				p, ok := got[o.name]
				if !ok {
					t.Errorf("profile %s missing", o.name)
					continue
				}
				var want []partition.Placement
				for _, s := range o.starts {
					want = append(want, partition.Placement{Start: s, Size: o.size})
				}
				if !slices.Equal(p.Placements, want) {
					t.Errorf("%s placements %v, want %v", o.name, p.Placements, want)
				}
				if p.MaxCount != o.max || p.MemorySlices != o.size {
					t.Errorf("%s max %d size %d, want %d %d", o.name, p.MaxCount, p.MemorySlices, o.max, o.size)
				}
				if me := strings.HasSuffix(o.name, "+me"); p.MediaExtensions != me {
					t.Errorf("%s media extensions %v, want %v", o.name, p.MediaExtensions, me)
				}
				if g := int(o.name[0] - '0'); p.ComputeSlices != g {
					t.Errorf("%s compute slices %d, want %d", o.name, p.ComputeSlices, g)
				}
			}
		})
	}
}

// step creates one GPU instance and expects an outcome.
type step struct {
	profile string
	start   int
	want    error
}

// createAt creates a GPU instance of a named profile at start, with the
// profile's size.
func createAt(d partition.Device, ps map[string]partition.GIProfile, name string, start int) (partition.GPUInstance, error) {
	p, ok := ps[name]
	if !ok {
		return partition.GPUInstance{}, fmt.Errorf("no profile %s", name)
	}
	return d.CreateGPUInstance(p.ID, partition.Placement{Start: start, Size: p.MemorySlices})
}

// checkNothingFits asserts that every placement of every profile fails with
// ErrInsufficientResources and leaves the GPU unchanged.
func checkNothingFits(t *testing.T, d partition.Device, ps map[string]partition.GIProfile) {
	t.Helper()
	before, _ := d.GPUInstances()
	for _, p := range ps {
		for _, at := range p.Placements {
			_, err := d.CreateGPUInstance(p.ID, at)
			wantErr(t, fmt.Sprintf("then %s at %d", p.Name, at.Start), err, partition.ErrInsufficientResources)
		}
	}
	if after, _ := d.GPUInstances(); !slices.Equal(before, after) {
		t.Errorf("failed creations changed the GPU: %v -> %v", before, after)
	}
}

func TestGeometryConsequencesEightSlice(t *testing.T) {
	fits := func(role string, start int) step { return step{role, start, nil} }
	full := func(role string, start int) step { return step{role, start, partition.ErrInsufficientResources} }
	bad := func(role string, start int) step { return step{role, start, partition.ErrInvalidArgument} }
	cases := []struct {
		name        string
		steps       []step
		thenNothing bool
	}{
		{"4g+3g fits, 4g at 0 and 3g at 4", []step{fits("4g", 0), fits("3g", 4)}, true},
		{"4g+4g does not fit", []step{fits("4g", 0), full("4g", 0), bad("4g", 4)}, false},
		{"3g x2 covers all memory: 3g+3g+1g impossible", []step{fits("3g", 0), fits("3g", 4)}, true},
		{"3g at 4 + 1g x4 fits, a fifth 1g does not", []step{fits("3g", 4), fits("1g", 0), fits("1g", 1), fits("1g", 2), fits("1g", 3), full("1g", 4), full("1g", 5), full("1g", 6)}, false},
		{"3g at 0 leaves room for only three 1g", []step{fits("3g", 0), fits("1g", 4), fits("1g", 5), fits("1g", 6), full("1g", 0), full("1g", 3)}, false},
		{"2g x3 + 1g fits", []step{fits("2g", 0), fits("2g", 2), fits("2g", 4), fits("1g", 6)}, true},
		{"4g + 2g + 1g fits", []step{fits("4g", 0), fits("2g", 4), fits("1g", 6)}, false},
		{"one +me instance per GPU", []step{fits("1g+me", 3), full("1g+me", 0), full("1g+me", 6), fits("1g", 0)}, false},
		{"small first blocks a large one", []step{fits("1g", 0), full("4g", 0), full("7g", 0), full("3g", 0), fits("3g", 4)}, false},
		{"1g x7 reaches the max", []step{fits("1g", 0), fits("1g", 1), fits("1g", 2), fits("1g", 3), fits("1g", 4), fits("1g", 5), fits("1g", 6)}, true},
		{"1g +me with six 1g", []step{fits("1g", 0), fits("1g", 1), fits("1g", 2), fits("1g", 3), fits("1g", 4), fits("1g", 5), fits("1g+me", 6)}, true},
		{"1g two-slice x4", []step{fits("1g2", 0), fits("1g2", 2), fits("1g2", 4), fits("1g2", 6)}, true},
		{"7g fills the GPU", []step{fits("7g", 0)}, true},
		{"2g + 1g two-slice + 3g", []step{fits("2g", 0), fits("1g2", 2), fits("3g", 4)}, true},
		{"invalid placements", []step{bad("3g", 2), bad("2g", 6), bad("1g", 7), bad("7g", 1), bad("4g", 4), bad("1g2", 1)}, false},
	}
	for _, model := range eightSliceModels() {
		for _, tc := range cases {
			t.Run(model.spec+"/"+tc.name, func(t *testing.T) {
				d := migDevice(t, model.spec)
				ps := profileIDs(t, d)
				role := map[string]string{}
				for i, r := range roles() {
					role[r] = model.names[i]
				}
				for _, s := range tc.steps {
					_, err := createAt(d, ps, role[s.profile], s.start)
					wantErr(t, fmt.Sprintf("%s at %d", role[s.profile], s.start), err, s.want)
				}
				if tc.thenNothing {
					checkNothingFits(t, d, ps)
				}
			})
		}
	}
}

func TestGeometryConsequencesA30(t *testing.T) {
	fits := func(p string, start int) step { return step{p, start, nil} }
	full := func(p string, start int) step { return step{p, start, partition.ErrInsufficientResources} }
	bad := func(p string, start int) step { return step{p, start, partition.ErrInvalidArgument} }
	cases := []struct {
		name        string
		steps       []step
		thenNothing bool
	}{
		{"4g fills the GPU", []step{fits("4g.24gb", 0)}, true},
		{"2g x2", []step{fits("2g.12gb", 0), fits("2g.12gb", 2)}, true},
		{"2g + 1g x2", []step{fits("2g.12gb", 2), fits("1g.6gb", 0), fits("1g.6gb", 1)}, true},
		{"1g x4", []step{fits("1g.6gb", 0), fits("1g.6gb", 1), fits("1g.6gb", 2), fits("1g.6gb", 3)}, true},
		{"one +me instance in all", []step{fits("1g.6gb+me", 0), full("2g.12gb+me", 2), full("1g.6gb+me", 1), fits("2g.12gb", 2)}, false},
		{"2g +me with plain instances", []step{fits("2g.12gb+me", 0), fits("1g.6gb", 2), fits("1g.6gb", 3)}, true},
		{"overlap", []step{fits("1g.6gb", 1), full("2g.12gb", 0), full("4g.24gb", 0), fits("2g.12gb", 2)}, false},
		{"invalid placements", []step{bad("2g.12gb", 1), bad("4g.24gb", 2), bad("1g.6gb", 4), bad("2g.12gb+me", 3)}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := migDevice(t, "a30-24gb")
			ps := profileIDs(t, d)
			for _, s := range tc.steps {
				_, err := createAt(d, ps, s.profile, s.start)
				wantErr(t, fmt.Sprintf("%s at %d", s.profile, s.start), err, s.want)
			}
			if tc.thenNothing {
				checkNothingFits(t, d, ps)
			}
		})
	}
}

func TestUnknownProfileAndPlacementShape(t *testing.T) {
	cases := []struct {
		spec      string
		profileID int
		at        partition.Placement
		want      error
	}{
		{"h100-80gb", 99, partition.Placement{Start: 0, Size: 1}, partition.ErrInvalidArgument},
		{"h100-80gb", 5, partition.Placement{Start: 0, Size: 1}, partition.ErrInvalidArgument},
		{"h100-80gb", -1, partition.Placement{Start: 0, Size: 1}, partition.ErrInvalidArgument},
		{"a30-24gb", 9, partition.Placement{Start: 0, Size: 2}, partition.ErrInvalidArgument},  // no 1g two-slice on A30
		{"a30-24gb", 4, partition.Placement{Start: 0, Size: 4}, partition.ErrInvalidArgument},  // no 7g on A30
		{"h100-80gb", 2, partition.Placement{Start: 0, Size: 2}, partition.ErrInvalidArgument}, // 3g with the wrong size
		{"h200-141gb", 4, partition.Placement{Start: 0, Size: 7}, partition.ErrInvalidArgument},
		{"h100-80gb", 2, partition.Placement{Start: 4, Size: 4}, nil},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/%d@%d:%d", tc.spec, tc.profileID, tc.at.Start, tc.at.Size), func(t *testing.T) {
			d := migDevice(t, tc.spec)
			_, err := d.CreateGPUInstance(tc.profileID, tc.at)
			wantErr(t, "create", err, tc.want)
		})
	}
}

// fitsSomehow searches, through the simulator, for placements that hold
// all the profiles at once; it leaves the GPU as it found it.
func fitsSomehow(t *testing.T, d partition.Device, ps []partition.GIProfile) bool {
	t.Helper()
	if len(ps) == 0 {
		return true
	}
	p, rest := ps[0], ps[1:]
	for _, at := range p.Placements {
		gi, err := d.CreateGPUInstance(p.ID, at)
		if err != nil {
			if !errors.Is(err, partition.ErrInsufficientResources) {
				t.Fatalf("create %s at %d: %v", p.Name, at.Start, err)
			}
			continue
		}
		// Identical profiles are tried in increasing placement order only.
		next := rest
		if len(rest) > 0 && rest[0].ID == p.ID {
			q := rest[0]
			q.Placements = slices.DeleteFunc(slices.Clone(q.Placements), func(x partition.Placement) bool { return x.Start <= at.Start })
			next = append([]partition.GIProfile{q}, rest[1:]...)
		}
		ok := fitsSomehow(t, d, next)
		if err := d.DestroyGPUInstance(gi.ID); err != nil {
			t.Fatalf("destroy %d: %v", gi.ID, err)
		}
		if ok {
			return true
		}
	}
	return false
}

func TestGeometrySets(t *testing.T) {
	cases := []struct {
		set  []string // roles, or A30 names
		want bool
	}{
		{[]string{"4g", "3g"}, true},
		{[]string{"4g", "4g"}, false},
		{[]string{"3g", "3g"}, true},
		{[]string{"3g", "3g", "1g"}, false},
		{[]string{"1g", "1g", "1g", "1g", "3g"}, true}, // only with the 3g at 4
		{[]string{"1g", "1g", "1g", "1g", "1g", "3g"}, false},
		{[]string{"2g", "2g", "2g", "1g"}, true},
		{[]string{"4g", "2g", "1g"}, true},
		{[]string{"1g+me", "1g+me"}, false},
		{[]string{"1g", "1g", "1g", "1g", "1g", "1g", "1g"}, true},
		{[]string{"1g", "1g", "1g", "1g", "1g", "1g", "1g", "1g"}, false},
		{[]string{"1g2", "1g2", "1g2", "1g2"}, true},
		{[]string{"1g2", "1g2", "1g2", "1g2", "1g"}, false},
		{[]string{"7g", "1g"}, false},
		{[]string{"2g", "2g", "2g", "1g2"}, true},
		{[]string{"4g", "1g2", "1g2"}, true},
	}
	for _, model := range eightSliceModels() {
		for _, tc := range cases {
			t.Run(model.spec+"/"+strings.Join(tc.set, "+"), func(t *testing.T) {
				d := migDevice(t, model.spec)
				byName := profileIDs(t, d)
				var ps []partition.GIProfile
				for _, r := range tc.set {
					ps = append(ps, byName[model.names[slices.Index(roles(), r)]])
				}
				if got := fitsSomehow(t, d, ps); got != tc.want {
					t.Errorf("fits = %v, want %v", got, tc.want)
				}
				if gis, _ := d.GPUInstances(); len(gis) != 0 {
					t.Errorf("search left %v", gis)
				}
			})
		}
	}
	a30 := []struct {
		set  []string
		want bool
	}{
		{[]string{"2g.12gb", "2g.12gb"}, true},
		{[]string{"2g.12gb", "2g.12gb", "1g.6gb"}, false},
		{[]string{"4g.24gb", "1g.6gb"}, false},
		{[]string{"1g.6gb+me", "2g.12gb+me"}, false},
		{[]string{"1g.6gb", "1g.6gb", "1g.6gb", "1g.6gb"}, true},
		{[]string{"2g.12gb+me", "1g.6gb", "1g.6gb"}, true},
	}
	for _, tc := range a30 {
		t.Run("a30-24gb/"+strings.Join(tc.set, "+"), func(t *testing.T) {
			d := migDevice(t, "a30-24gb")
			byName := profileIDs(t, d)
			var ps []partition.GIProfile
			for _, n := range tc.set {
				ps = append(ps, byName[n])
			}
			if got := fitsSomehow(t, d, ps); got != tc.want {
				t.Errorf("fits = %v, want %v", got, tc.want)
			}
		})
	}
}
