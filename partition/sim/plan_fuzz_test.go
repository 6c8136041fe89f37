package sim_test

import (
	"context"
	"errors"
	"testing"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
)

// fuzzModels are the simulated GPUs FuzzPlanApply plans on.
func fuzzModels() []string {
	return []string{"h100-80gb", "a100-40gb", "a30-24gb", "h200-141gb", "rtx-pro-6000-96gb", "b200-180gb"}
}

// fuzzTarget reads a target from bytes: none (MIG off), 0xff alone (MIG on,
// no instances), else up to eight profiles of the model by index, each
// byte one instance.
func fuzzTarget(b []byte, m partition.Model) partition.Target {
	if len(b) == 0 {
		return partition.Target{}
	}
	mig := map[string]int{}
	if len(b) == 1 && b[0] == 0xff {
		return partition.Target{MIG: mig}
	}
	for _, x := range b[:min(len(b), 8)] {
		mig[m.Profiles[int(x)%len(m.Profiles)].Name]++
	}
	return partition.Target{MIG: mig}
}

// The plan/apply loop on the simulator, from a random state to a random
// target with random devices in use: either the planner says clearly why
// it cannot (an error wrapping a sentinel, or blockers naming busy
// devices), or its plan runs on the simulator, which enforces the
// hardware's rules, and converges (a second plan has nothing to do); an
// instance in use is never destroyed.
func FuzzPlanApply(f *testing.F) {
	f.Add(uint8(0), []byte{0, 0, 0}, []byte{3}, uint8(1))
	f.Add(uint8(0), []byte{}, []byte{0xff}, uint8(0))
	f.Add(uint8(1), []byte{2, 2}, []byte{}, uint8(3))
	f.Add(uint8(2), []byte{0, 0, 0, 0}, []byte{4, 4}, uint8(0xff))
	f.Add(uint8(4), []byte{1, 0}, []byte{1, 1, 0}, uint8(2))
	f.Fuzz(func(t *testing.T, model uint8, first, second []byte, busy uint8) {
		m := open(t, fuzzModels()[int(model)%len(fuzzModels())])
		g, mod := readGPU(t, m)
		if _, err := realise(t, m, g, mod, fuzzTarget(first, mod), nil); err != nil {
			return // an impossible first target: nothing to start from
		}
		g, _ = readGPU(t, m)
		inUse := map[string]bool{}
		for k, in := range g.Instances {
			if busy&(1<<(k%8)) != 0 && len(in.CIs) > 0 {
				inUse[in.CIs[0].UUID] = true
			}
		}
		want := fuzzTarget(second, mod)
		plan, err := realise(t, m, g, mod, want, inUse)
		if err != nil {
			if !errors.Is(err, partition.ErrCannotPlace) && !errors.Is(err, partition.ErrInvalidArgument) && !errors.Is(err, partition.ErrNotSupported) {
				t.Fatalf("plan to %v: an error without a known cause: %v", want.MIG, err)
			}
			return
		}
		after, _ := readGPU(t, m)
		for uuid := range inUse {
			if !hasDevice(after, uuid) {
				t.Fatalf("plan %v destroyed %s, which was in use", plan.Ops, uuid)
			}
		}
		if plan.IsBlocked() {
			return
		}
		again, err := partition.PlanGPU(after, mod, want, inUse)
		if err != nil || !again.NoOp() {
			t.Fatalf("after applying %v: plan again = %v ops, %v blocked, err %v; want nothing to do", plan.Ops, again.Ops, again.Blocked, err)
		}
	})
}

// realise plans g to the target and applies the plan unless it is blocked;
// the simulator must accept every operation.
func realise(t *testing.T, m *sim.Machine, g partition.GPU, mod partition.Model, want partition.Target, inUse map[string]bool) (partition.GPUPlan, error) {
	t.Helper()
	plan, err := partition.PlanGPU(g, mod, want, inUse)
	if err != nil {
		if err.Error() == "" {
			t.Fatal("an empty error")
		}
		return plan, err
	}
	if plan.IsBlocked() {
		if len(plan.Blocked) == 0 || plan.Blocked[0].Reason == "" {
			t.Fatalf("blocked without a reason: %+v", plan.Blocked)
		}
		return plan, nil
	}
	ap := partition.Applier{Lib: m}
	if err := ap.Apply(context.Background(), plan); err != nil {
		t.Fatalf("the simulator refused the plan %v to %v: %v", plan.Ops, want.MIG, err)
	}
	return plan, nil
}

func readGPU(t *testing.T, m *sim.Machine) (partition.GPU, partition.Model) {
	t.Helper()
	node, err := partition.ReadNode(m)
	if err != nil {
		t.Fatal(err)
	}
	return node.GPUs[0], node.Models[0]
}

func hasDevice(g partition.GPU, uuid string) bool {
	for _, in := range g.Instances {
		for _, ci := range in.CIs {
			if ci.UUID == uuid {
				return true
			}
		}
	}
	return false
}
