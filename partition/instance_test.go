package partition_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/carve-dev/carve/partition"
)

// opKinds lists a plan's op kinds.
func opKinds(p partition.GPUPlan) []partition.OpKind {
	out := []partition.OpKind{}
	for _, op := range p.Ops {
		out = append(out, op.Kind)
	}
	return out
}

// TestInstancePlanResumes makes one 3g.40gb at 4:4 on an empty MIG GPU,
// stopping after each op as a crash would, and plans again from a fresh
// read each time: the instance is made once, whatever op the crash
// followed, and a plan for a made instance is empty. Removal resumes the
// same way.
func TestInstancePlanResumes(t *testing.T) {
	for stopAfter := range 3 {
		mach := newMachine(t, "h100-80gb*1")
		d, err := mach.Device(0)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.SetMIGMode(partition.MIGEnabled); err != nil {
			t.Fatal(err)
		}
		if err := d.Reset(); err != nil {
			t.Fatal(err)
		}
		g := readGPU(t, mach, 0)
		m := models(t, mach, []partition.GPU{g})[0]
		p, _ := m.Profile("3g.40gb")
		at := partition.Placement{Start: 4, Size: 4}

		plan, err := partition.InstancePlan(g, p, at)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]partition.OpKind{partition.OpCreateGI, partition.OpCreateCI}, opKinds(plan)); diff != "" {
			t.Fatalf("plan on an empty GPU (-want +got):\n%s", diff)
		}
		crash := errors.New("killed")
		a := &partition.Applier{Lib: mach, AfterOp: func(_, step int, _ partition.Op) error {
			if step == stopAfter {
				return crash
			}
			return nil
		}}
		if err := a.Apply(context.Background(), plan); stopAfter > 0 && !errors.Is(err, crash) {
			t.Fatalf("stop after op %d: %v", stopAfter, err)
		}
		g = readGPU(t, mach, 0)
		again, err := partition.InstancePlan(g, p, at)
		if err != nil {
			t.Fatal(err)
		}
		// Only a crash between the two creates leaves anything to do.
		if want := map[int]int{0: 0, 1: 1, 2: 0}[stopAfter]; len(again.Ops) != want {
			t.Errorf("after a stop after op %d the plan is %v, want %d ops", stopAfter, opKinds(again), want)
		}
		if err := (&partition.Applier{Lib: mach}).Apply(context.Background(), again); err != nil {
			t.Fatalf("resumed after op %d: %v", stopAfter, err)
		}
		g = readGPU(t, mach, 0)
		if len(g.Instances) != 1 || !g.Instances[0].Complete() || g.Instances[0].Placement != at {
			t.Fatalf("after the resume from op %d the GPU holds %+v, want one complete 3g.40gb at 4:4", stopAfter, g.Instances)
		}
		if done, err := partition.InstancePlan(g, p, at); err != nil || len(done.Ops) != 0 {
			t.Errorf("plan for a made instance: %v, %v; want no ops", opKinds(done), err)
		}

		rm, err := partition.RemovalPlan(g, p, at)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]partition.OpKind{partition.OpDestroyCI, partition.OpDestroyGI}, opKinds(rm)); diff != "" {
			t.Fatalf("removal (-want +got):\n%s", diff)
		}
		a.AfterOp = func(_, step int, _ partition.Op) error {
			if step == 1 {
				return crash
			}
			return nil
		}
		if err := a.Apply(context.Background(), rm); !errors.Is(err, crash) {
			t.Fatal(err)
		}
		g = readGPU(t, mach, 0)
		rest, err := partition.RemovalPlan(g, p, at)
		if err != nil {
			t.Fatal(err)
		}
		if err := (&partition.Applier{Lib: mach}).Apply(context.Background(), rest); err != nil {
			t.Fatal(err)
		}
		if g = readGPU(t, mach, 0); len(g.Instances) != 0 {
			t.Fatalf("after removal the GPU holds %+v", g.Instances)
		}
		if gone, err := partition.RemovalPlan(g, p, at); err != nil || len(gone.Ops) != 0 {
			t.Errorf("removal of a removed instance: %v, %v; want no ops", opKinds(gone), err)
		}
	}
}

// TestInstancePlanRefusesWhatIsInTheWay: an instance overlapping the
// placement, or another profile at it, or MIG off, is refused, not
// destroyed.
func TestInstancePlanRefusesWhatIsInTheWay(t *testing.T) {
	mach := newMachine(t, "h100-80gb*1")
	g := readGPU(t, mach, 0)
	m := models(t, mach, []partition.GPU{g})[0]
	p3, _ := m.Profile("3g.40gb")
	p1, _ := m.Profile("1g.10gb")
	if _, err := partition.InstancePlan(g, p1, partition.Placement{Start: 6, Size: 1}); !errors.Is(err, partition.ErrStateChanged) {
		t.Errorf("MIG off: %v, want ErrStateChanged", err)
	}
	d, err := mach.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetMIGMode(partition.MIGEnabled); err != nil {
		t.Fatal(err)
	}
	if err := d.Reset(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.CreateGPUInstance(p3.ID, partition.Placement{Start: 4, Size: 4}); err != nil {
		t.Fatal(err)
	}
	g = readGPU(t, mach, 0)
	for _, tc := range []struct {
		p  partition.GIProfile
		at partition.Placement
	}{{p1, partition.Placement{Start: 5, Size: 1}}, {p1, partition.Placement{Start: 4, Size: 1}}} {
		if _, err := partition.InstancePlan(g, tc.p, tc.at); !errors.Is(err, partition.ErrStateChanged) {
			t.Errorf("%s at %s beside a 3g at 4:4: %v, want ErrStateChanged", tc.p.Name, tc.at, err)
		}
		if _, err := partition.RemovalPlan(g, tc.p, tc.at); !errors.Is(err, partition.ErrStateChanged) {
			t.Errorf("removal of %s at %s where a 3g sits: %v, want ErrStateChanged", tc.p.Name, tc.at, err)
		}
	}
	if plan, err := partition.InstancePlan(g, p1, partition.Placement{Start: 0, Size: 1}); err != nil || len(plan.Ops) != 2 {
		t.Errorf("1g.10gb at 0:1 beside a 3g at 4:4: %v, %v; want create-gi, create-ci", opKinds(plan), err)
	}
}

func readGPU(t *testing.T, lib partition.NVML, index int) partition.GPU {
	t.Helper()
	d, err := lib.Device(index)
	if err != nil {
		t.Fatal(err)
	}
	g, err := partition.ReadGPU(d)
	if err != nil {
		t.Fatal(err)
	}
	return g
}
