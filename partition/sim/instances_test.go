package sim_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
)

func TestGPUInstanceIDsLowestFree(t *testing.T) {
	d := migDevice(t, "h100-80gb")
	ps := profileIDs(t, d)
	var ids []int
	for _, start := range []int{0, 1, 2} {
		gi, err := createAt(d, ps, "1g.10gb", start)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, gi.ID)
	}
	if ids[0] != 1 || ids[1] != 2 || ids[2] != 3 {
		t.Fatalf("IDs %v, want [1 2 3]", ids)
	}
	if err := d.DestroyGPUInstance(2); err != nil {
		t.Fatal(err)
	}
	gi, err := createAt(d, ps, "1g.10gb", 5)
	if err != nil {
		t.Fatal(err)
	}
	if gi.ID != 2 {
		t.Errorf("re-used ID %d, want 2", gi.ID)
	}
	gis, _ := d.GPUInstances()
	for i, want := range []int{1, 2, 3} {
		if gis[i].ID != want {
			t.Errorf("GPUInstances not in ID order: %v", gis)
		}
	}
	if gis[1].Placement != (partition.Placement{Start: 5, Size: 1}) || gis[1].ProfileID != ps["1g.10gb"].ID {
		t.Errorf("GI 2 = %+v", gis[1])
	}
}

func TestComputeInstanceFillsGI(t *testing.T) {
	d := migDevice(t, "a100-40gb")
	gi, ci := mustCreate(t, d, "3g.20gb", 4)
	if ci.ID != 0 || ci.GIID != gi.ID || ci.ComputeSlices != 3 || !strings.HasPrefix(ci.UUID, "MIG-") {
		t.Errorf("CI = %+v", ci)
	}
	_, err := d.CreateComputeInstance(gi.ID)
	wantErr(t, "second CI", err, partition.ErrInsufficientResources)
	_, err = d.CreateComputeInstance(9)
	wantErr(t, "CI in unknown GI", err, partition.ErrNotFound)
	cis, err := d.ComputeInstances(gi.ID)
	if err != nil || len(cis) != 1 || cis[0] != ci {
		t.Errorf("ComputeInstances = %v, %v; want [%v]", cis, err, ci)
	}
	_, err = d.ComputeInstances(9)
	wantErr(t, "CIs of unknown GI", err, partition.ErrNotFound)
}

func TestDestroyOrdering(t *testing.T) {
	cases := []struct {
		name string
		run  func(d partition.Device, gi partition.GPUInstance, ci partition.ComputeInstance) error
		want error
	}{
		{"GI with its CI", func(d partition.Device, gi partition.GPUInstance, _ partition.ComputeInstance) error {
			return d.DestroyGPUInstance(gi.ID)
		}, partition.ErrInUse},
		{"unknown GI", func(d partition.Device, _ partition.GPUInstance, _ partition.ComputeInstance) error {
			return d.DestroyGPUInstance(5)
		}, partition.ErrNotFound},
		{"unknown CI", func(d partition.Device, gi partition.GPUInstance, _ partition.ComputeInstance) error {
			return d.DestroyComputeInstance(gi.ID, 3)
		}, partition.ErrNotFound},
		{"CI of unknown GI", func(d partition.Device, _ partition.GPUInstance, _ partition.ComputeInstance) error {
			return d.DestroyComputeInstance(5, 0)
		}, partition.ErrNotFound},
		{"CI then GI", func(d partition.Device, gi partition.GPUInstance, ci partition.ComputeInstance) error {
			if err := d.DestroyComputeInstance(gi.ID, ci.ID); err != nil {
				return err
			}
			return d.DestroyGPUInstance(gi.ID)
		}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := migDevice(t, "h200-141gb")
			gi, ci := mustCreate(t, d, "4g.71gb", 0)
			wantErr(t, tc.name, tc.run(d, gi, ci), tc.want)
			gis, _ := d.GPUInstances()
			if gone := tc.want == nil; gone != (len(gis) == 0) {
				t.Errorf("GPU instances after %s: %v", tc.name, gis)
			}
		})
	}
}

func TestBusyMIGDeviceRefusesDestroy(t *testing.T) {
	m := open(t, "dgx-a100-80")
	d := device(t, m, 6)
	enableMIG(t, d)
	gi, ci := mustCreate(t, d, "2g.20gb", 2)
	other, otherCI := mustCreate(t, d, "2g.20gb", 4)
	if err := m.SetBusy(ci.UUID, true); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "destroy busy CI", d.DestroyComputeInstance(gi.ID, ci.ID), partition.ErrInUse)
	wantErr(t, "destroy GI of busy CI", d.DestroyGPUInstance(gi.ID), partition.ErrInUse)
	// The neighbour is free to go.
	wantErr(t, "destroy free CI", d.DestroyComputeInstance(other.ID, otherCI.ID), nil)
	wantErr(t, "destroy free GI", d.DestroyGPUInstance(other.ID), nil)
	if err := m.SetBusy(ci.UUID, false); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "destroy freed CI", d.DestroyComputeInstance(gi.ID, ci.ID), nil)
	wantErr(t, "destroy freed GI", d.DestroyGPUInstance(gi.ID), nil)
	wantErr(t, "SetBusy gone device", m.SetBusy(ci.UUID, true), partition.ErrNotFound)
	wantErr(t, "SetBusy unknown", m.SetBusy("GPU-nope", true), partition.ErrNotFound)
}

func TestPartialComputeInstances(t *testing.T) {
	m := open(t, "dgx-h100")
	d := device(t, m, 4)
	enableMIG(t, d)
	ps := profileIDs(t, d)
	gi, err := createAt(d, ps, "7g.80gb", 0)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		gpu, gi, slices int
		want            error
		wantID          int
	}{
		{4, gi.ID, 3, nil, 0},
		{4, gi.ID, 4, nil, 1},
		{4, gi.ID, 1, partition.ErrInsufficientResources, 0},
		{4, gi.ID, 0, partition.ErrInvalidArgument, 0},
		{4, gi.ID, 8, partition.ErrInvalidArgument, 0},
		{4, 7, 1, partition.ErrNotFound, 0},
		{3, 1, 1, partition.ErrNotSupported, 0}, // GPU 3 is not in MIG mode
		{8, 1, 1, partition.ErrInvalidArgument, 0},
	}
	var uuids []string
	for _, tc := range cases {
		ci, err := m.CreateComputeInstanceSlices(tc.gpu, tc.gi, tc.slices)
		wantErr(t, "partial CI", err, tc.want)
		if err == nil {
			if ci.ID != tc.wantID || ci.ComputeSlices != tc.slices || ci.GIID != gi.ID {
				t.Errorf("CI = %+v, want ID %d with %d slices", ci, tc.wantID, tc.slices)
			}
			uuids = append(uuids, ci.UUID)
		}
	}
	_, err = d.CreateComputeInstance(gi.ID)
	wantErr(t, "filling CI in a GI with CIs", err, partition.ErrInsufficientResources)
	if len(uuids) != 2 || uuids[0] == uuids[1] {
		t.Errorf("partial CI UUIDs %v, want two distinct", uuids)
	}
	gpus, err := partition.ReadInventory(m)
	if err != nil {
		t.Fatal(err)
	}
	in := gpus[4].Instances[0]
	if len(in.CIs) != 2 || in.Complete() || in.UUID() != "" {
		t.Errorf("inventory of partial GI = %+v", in)
	}
	// A filling CI made after the partial ones are gone has the regular UUID.
	for _, ci := range in.CIs {
		if err := d.DestroyComputeInstance(gi.ID, ci.ID); err != nil {
			t.Fatal(err)
		}
	}
	full, err := m.CreateComputeInstanceSlices(4, gi.ID, 7)
	if err != nil {
		t.Fatal(err)
	}
	_ = d.DestroyComputeInstance(gi.ID, full.ID)
	regular, err := d.CreateComputeInstance(gi.ID)
	if err != nil {
		t.Fatal(err)
	}
	if full.UUID != regular.UUID {
		t.Errorf("filling CI UUIDs differ: %s vs %s", full.UUID, regular.UUID)
	}
}

// uuidRE is the shape of real GPU and MIG UUIDs.
func uuidRE(prefix string) *regexp.Regexp {
	return regexp.MustCompile(`^` + prefix + `-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
}

func TestUUIDStability(t *testing.T) {
	m := open(t, "dgx-h100")
	d0, d1 := device(t, m, 0), device(t, m, 1)
	enableMIG(t, d0)
	enableMIG(t, d1)
	gi, ci := mustCreate(t, d0, "3g.40gb", 4)
	if !uuidRE("MIG").MatchString(ci.UUID) {
		t.Errorf("MIG UUID %q malformed", ci.UUID)
	}
	_ = d0.DestroyComputeInstance(gi.ID, ci.ID)
	_ = d0.DestroyGPUInstance(gi.ID)
	_, again := mustCreate(t, d0, "1g.10gb", 0) // takes GI ID 1 this time
	_, ci2 := mustCreate(t, d0, "3g.40gb", 4)
	if ci2.UUID != ci.UUID {
		t.Errorf("re-created 3g.40gb at 4: UUID %s, was %s", ci2.UUID, ci.UUID)
	}
	_, other := mustCreate(t, d1, "3g.40gb", 4)
	_, elsewhere := mustCreate(t, d1, "3g.40gb", 0)
	seen := map[string]bool{}
	for _, u := range []string{ci.UUID, again.UUID, other.UUID, elsewhere.UUID} {
		if seen[u] {
			t.Errorf("UUID %s given twice", u)
		}
		seen[u] = true
	}
	// The same instance on another machine spec has another UUID.
	m2 := open(t, "h100-80gb*8")
	d2 := device(t, m2, 0)
	enableMIG(t, d2)
	if _, c := mustCreate(t, d2, "3g.40gb", 4); c.UUID == ci.UUID {
		t.Errorf("machines dgx-h100 and h100-80gb*8 share MIG UUID %s", c.UUID)
	}
	// The same spec gives the same UUIDs in a new Machine.
	m3 := open(t, "sim:DGX-H100")
	d3 := device(t, m3, 0)
	enableMIG(t, d3)
	if _, c := mustCreate(t, d3, "3g.40gb", 4); c.UUID != ci.UUID {
		t.Errorf("second dgx-h100 gives %s, want %s", c.UUID, ci.UUID)
	}
	if uuidOf(t, d3) != uuidOf(t, d0) {
		t.Errorf("GPU UUIDs differ between machines of one spec")
	}
}

func TestGPUIdentity(t *testing.T) {
	for _, spec := range append(sim.MachineNames(), "h100-80gb*2,a100-40gb,l4-24gb") {
		t.Run(spec, func(t *testing.T) {
			m := open(t, spec)
			n, err := m.DeviceCount()
			if err != nil {
				t.Fatal(err)
			}
			uuids, buses := map[string]bool{}, map[string]bool{}
			for i := range n {
				d := device(t, m, i)
				if d.Index() != i {
					t.Errorf("Index %d, want %d", d.Index(), i)
				}
				u := uuidOf(t, d)
				if !uuidRE("GPU").MatchString(u) || uuids[u] {
					t.Errorf("GPU %d UUID %q malformed or repeated", i, u)
				}
				uuids[u] = true
				b, err := d.PCIBusID()
				if err != nil || !regexp.MustCompile(`^00000000:[0-9A-F]{2}:00\.0$`).MatchString(b) || buses[b] {
					t.Errorf("GPU %d bus ID %q, %v: malformed or repeated", i, b, err)
				}
				buses[b] = true
			}
		})
	}
}

func TestOpLog(t *testing.T) {
	m := open(t, "a30x4")
	var journal strings.Builder
	m.SetOpJournal(&journal)
	d := device(t, m, 2)
	if ops := m.OpLog(); len(ops) != 0 {
		t.Fatalf("fresh machine logged %v", ops)
	}
	// Reads are not logged.
	_, _ = d.UUID()
	_, _, _ = d.MIGMode()
	_, _ = partition.ReadInventory(m)
	if ops := m.OpLog(); len(ops) != 0 {
		t.Fatalf("reads logged %v", ops)
	}
	enableMIG(t, d)
	gi, ci := mustCreate(t, d, "2g.12gb", 2)
	_, failed := d.CreateGPUInstance(4, partition.Placement{Size: 4}) // no 7g on A30
	_ = d.DestroyComputeInstance(gi.ID, ci.ID)
	_ = d.DestroyGPUInstance(gi.ID)
	want := []struct {
		call, args string
		failed     bool
	}{
		{"SetMIGMode", "enabled", false},
		{"Reset", "", false},
		{"CreateGPUInstance", "2g.12gb (profile 1) at 2:2", false},
		{"CreateComputeInstance", "gi 1", false},
		{"CreateGPUInstance", "profile 4 at 0:4", true},
		{"DestroyComputeInstance", "gi 1 ci 0", false},
		{"DestroyGPUInstance", "gi 1", false},
	}
	ops := m.OpLog()
	if len(ops) != len(want) {
		t.Fatalf("op log %v, want %d ops", ops, len(want))
	}
	for i, w := range want {
		o := ops[i]
		if o.GPU != 2 || o.Call != w.call || o.Args != w.args || (o.Err != nil) != w.failed {
			t.Errorf("op %d = %v, want %s(%s) failed=%v", i, o, w.call, w.args, w.failed)
		}
	}
	if ops[4].Err == nil || ops[4].Err.Error() != failed.Error() {
		t.Errorf("logged error %v, returned %v", ops[4].Err, failed)
	}
	if ops[2].Result != "gi 1 (2g.12gb)" || !strings.Contains(ops[3].String(), ci.UUID) {
		t.Errorf("results: %q, %q", ops[2].Result, ops[3])
	}
	var lines []string
	for _, o := range ops {
		lines = append(lines, o.String()+"\n")
	}
	if diff := cmp.Diff(strings.Join(lines, ""), journal.String()); diff != "" {
		t.Errorf("journal differs from the op log (-log +journal):\n%s", diff)
	}
	m.SetOpJournal(nil)
	_ = d.DestroyGPUInstance(gi.ID)
	if got := strings.Count(journal.String(), "\n"); got != len(ops) {
		t.Errorf("journal has %d lines after SetOpJournal(nil) and another op, want %d", got, len(ops))
	}
	m.ResetOpLog()
	if ops := m.OpLog(); len(ops) != 0 {
		t.Errorf("after ResetOpLog: %v", ops)
	}
}
