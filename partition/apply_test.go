package partition_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
)

func newMachine(t testing.TB, spec string) *sim.Machine {
	t.Helper()
	m, err := sim.New(spec)
	if err != nil {
		t.Fatalf("sim.New(%q): %v", spec, err)
	}
	if err := m.Init(); err != nil {
		t.Fatalf("Init: %v", err)
	}
	return m
}

// models resolves the model of every MIG-capable GPU of the machine.
func models(t testing.TB, lib partition.NVML, gpus []partition.GPU) map[int]partition.Model {
	t.Helper()
	out := map[int]partition.Model{}
	for _, g := range gpus {
		if !g.MIGCapable {
			continue
		}
		d, err := lib.Device(g.Index)
		if err != nil {
			t.Fatal(err)
		}
		m, err := partition.ResolveModel(d, g)
		if err != nil {
			t.Fatalf("ResolveModel: %v", err)
		}
		out[g.Index] = m
	}
	return out
}

// planNode reads the machine and plans the targets.
func planNode(t testing.TB, mach *sim.Machine, targets map[int]partition.Target, inUse map[string]bool) ([]partition.GPU, partition.NodePlan) {
	t.Helper()
	gpus, err := partition.ReadInventory(mach)
	if err != nil {
		t.Fatalf("ReadInventory: %v", err)
	}
	plan, err := partition.PlanNode(gpus, models(t, mach, gpus), targets, inUse)
	if err != nil {
		t.Fatalf("PlanNode: %v", err)
	}
	return gpus, plan
}

// applyAll applies every GPU's plan that is not blocked.
func applyAll(t testing.TB, mach *sim.Machine, plan partition.NodePlan) {
	t.Helper()
	a := partition.Applier{Lib: mach}
	for _, p := range plan.GPUs {
		if p.IsBlocked() {
			continue
		}
		if err := a.Apply(context.Background(), p); err != nil {
			t.Fatalf("Apply: %v\nplan: %s", err, opsText(p.Ops))
		}
	}
}

// assertAt checks that a GPU is exactly at its target: MIG mode, and
// complete instances with exactly the wanted counts.
func assertAt(t testing.TB, g partition.GPU, target partition.Target) {
	t.Helper()
	if !target.MIGEnabled() {
		if g.MIGCapable && (g.MIGMode != partition.MIGDisabled || g.PendingMIGMode != partition.MIGDisabled) || len(g.Instances) > 0 {
			t.Fatalf("GPU %d: want whole, have mode %s/%s and %d instances", g.Index, g.MIGMode, g.PendingMIGMode, len(g.Instances))
		}
		return
	}
	if g.MIGMode != partition.MIGEnabled || g.PendingMIGMode != partition.MIGEnabled {
		t.Fatalf("GPU %d: want MIG, have mode %s/%s", g.Index, g.MIGMode, g.PendingMIGMode)
	}
	got := map[string]int{}
	for _, in := range g.Instances {
		if !in.Complete() {
			t.Fatalf("GPU %d: instance %s at %+v is incomplete", g.Index, in.Profile, in.Placement)
		}
		got[in.Profile]++
	}
	want := map[string]int{}
	for k, v := range target.MIG {
		if v > 0 {
			want[k] = v
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("GPU %d: instances per profile (-want +got):\n%s", g.Index, diff)
	}
}

// opsOn returns the machine's logged mutations on one GPU.
func opsOn(mach *sim.Machine, gpu int) []sim.Op {
	var out []sim.Op
	for _, o := range mach.OpLog() {
		if o.GPU == gpu {
			out = append(out, o)
		}
	}
	return out
}

// randomTarget picks a target: mostly a feasible MIG set, sometimes MIG
// off or MIG on with nothing.
func randomTarget(rng *rand.Rand, sets []map[string]int) partition.Target {
	switch rng.IntN(10) {
	case 0:
		return partition.Target{}
	case 1:
		return partition.Target{MIG: map[string]int{}}
	}
	return partition.Target{MIG: sets[rng.IntN(len(sets))]}
}

// TestAssertThenApply runs seeded random transitions on every simulated
// machine: plan, apply, read the GPUs again, plan again. The second plan
// must be a no-op, kept instances must keep their GI IDs and UUIDs, the
// applier must make exactly the planned NVML calls, and busy instances
// must block their GPU without a single call on it.
func TestAssertThenApply(t *testing.T) {
	for _, spec := range []string{"dgx-a100", "dgx-a100-80", "dgx-h100", "hgx-h200", "a30x4"} {
		t.Run(spec, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(42, uint64(len(spec))))
			mach := newMachine(t, spec)
			gpus, err := partition.ReadInventory(mach)
			if err != nil {
				t.Fatal(err)
			}
			m, ok := partition.ModelForProduct(gpus[0].Product, gpus[0].MemoryMiB)
			if !ok {
				t.Fatalf("no catalogue model for %s", gpus[0].Product)
			}
			sets := feasibleSets(m)
			steps, blockedSeen, keptSeen := 60, 0, 0
			for step := range steps {
				targets := map[int]partition.Target{}
				for i := range gpus {
					targets[i] = randomTarget(rng, sets)
				}
				// Now and then, pods hold one existing MIG device.
				inUse := map[string]bool{}
				before, err := partition.ReadInventory(mach)
				if err != nil {
					t.Fatal(err)
				}
				if step%3 == 2 {
					var all []string
					for _, g := range before {
						for _, in := range g.Instances {
							if u := in.UUID(); u != "" {
								all = append(all, u)
							}
						}
					}
					if len(all) > 0 {
						u := all[rng.IntN(len(all))]
						inUse[u] = true
						if err := mach.SetBusy(u, true); err != nil {
							t.Fatal(err)
						}
					}
				}
				_, plan := planNode(t, mach, targets, inUse)
				mach.ResetOpLog()
				applyAll(t, mach, plan)

				after, err := partition.ReadInventory(mach)
				if err != nil {
					t.Fatal(err)
				}
				for i, p := range plan.GPUs {
					logged := opsOn(mach, i)
					if p.IsBlocked() {
						blockedSeen++
						if len(logged) != 0 {
							t.Fatalf("step %d GPU %d: blocked plan made calls: %v", step, i, logged)
						}
						continue
					}
					if len(logged) != len(p.Ops) {
						t.Fatalf("step %d GPU %d: %d NVML calls for %d ops: %v", step, i, len(logged), len(p.Ops), logged)
					}
					assertAt(t, after[i], targets[i])
					// Kept instances are the very same GI/CI.
					for _, x := range p.Instances {
						if x.Status != partition.StatusKept {
							continue
						}
						keptSeen++
						found := false
						for _, in := range after[i].Instances {
							if in.Placement == x.Placement {
								found = in.GIID == x.GIID && in.UUID() == x.UUID
							}
						}
						if !found {
							t.Fatalf("step %d GPU %d: kept %s at %+v (GI %d, %s) changed", step, i, x.Profile, x.Placement, x.GIID, x.UUID)
						}
					}
				}
				// Plan again from the real state: nothing left to do
				// except on the blocked GPUs.
				_, again := planNode(t, mach, targets, inUse)
				for i, p := range again.GPUs {
					if !p.NoOp() && !plan.GPUs[i].IsBlocked() {
						t.Fatalf("step %d GPU %d: second plan not a no-op: %s", step, i, opsText(p.Ops))
					}
				}
				for u := range inUse {
					if err := mach.SetBusy(u, false); err != nil {
						t.Fatal(err)
					}
				}
			}
			if blockedSeen == 0 || keptSeen == 0 {
				t.Errorf("the random walk saw %d blocked plans and %d kept instances; both paths must be exercised", blockedSeen, keptSeen)
			}
		})
	}
}

// transition is a GPU change to interrupt at every step.
type transition struct {
	name     string
	spec     string
	from, to partition.Target
}

func setUp(t *testing.T, spec string, target partition.Target) *sim.Machine {
	t.Helper()
	mach := newMachine(t, spec)
	_, plan := planNode(t, mach, map[int]partition.Target{0: target}, nil)
	applyAll(t, mach, plan)
	gpus, err := partition.ReadInventory(mach)
	if err != nil {
		t.Fatal(err)
	}
	assertAt(t, gpus[0], target)
	mach.ResetOpLog()
	return mach
}

// TestApplyInterrupted stops the applier after op k for every k, then plans
// again from the real state and applies: the GPU must reach the target with
// no extra instances, and the second plan must repair half-made instances
// rather than re-make them.
func TestApplyInterrupted(t *testing.T) {
	mig := func(kv ...any) partition.Target {
		m := map[string]int{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1].(int)
		}
		return partition.Target{MIG: m}
	}
	tests := []transition{
		{name: "3g x2 to 3g + 1g x4", spec: "dgx-h100", from: mig("3g.40gb", 2), to: mig("3g.40gb", 1, "1g.10gb", 4)},
		{name: "1g x7 to 4g + 2g + 1g", spec: "dgx-a100", from: mig("1g.5gb", 7), to: mig("4g.20gb", 1, "2g.10gb", 1, "1g.5gb", 1)},
		{name: "whole to MIG", spec: "hgx-h200", from: partition.Target{}, to: mig("3g.71gb", 1, "2g.35gb", 1, "1g.18gb", 2)},
		{name: "MIG to whole", spec: "dgx-a100-80", from: mig("2g.20gb", 3, "1g.10gb", 1), to: partition.Target{}},
		{name: "A30 2g x2 to 1g x4", spec: "a30x4", from: mig("2g.12gb", 2), to: mig("1g.6gb", 4)},
	}
	hookErr := errors.New("agent stopped")
	for _, tc := range tests {
		mach := setUp(t, tc.spec, tc.from)
		_, plan := planNode(t, mach, map[int]partition.Target{0: tc.to}, nil)
		n := len(plan.GPUs[0].Ops)
		if n < 2 {
			t.Fatalf("%s: only %d ops", tc.name, n)
		}
		for k := 1; k <= n; k++ {
			t.Run(fmt.Sprintf("%s/stop after %d of %d", tc.name, k, n), func(t *testing.T) {
				mach := setUp(t, tc.spec, tc.from)
				_, plan := planNode(t, mach, map[int]partition.Target{0: tc.to}, nil)
				var steps []int
				a := partition.Applier{Lib: mach, AfterOp: func(gpu, step int, op partition.Op) error {
					steps = append(steps, step)
					if gpu != 0 || op != plan.GPUs[0].Ops[step-1] {
						t.Errorf("hook got GPU %d op %s, want GPU 0 op %s", gpu, op, plan.GPUs[0].Ops[step-1])
					}
					if step == k {
						return hookErr
					}
					return nil
				}}
				err := a.Apply(context.Background(), plan.GPUs[0])
				var oe *partition.OpError
				if !errors.As(err, &oe) || !errors.Is(err, hookErr) || oe.Step != k || oe.Total != n {
					t.Fatalf("Apply error %v, want an OpError at step %d/%d wrapping the hook's", err, k, n)
				}
				if len(steps) != k || len(mach.OpLog()) != k {
					t.Fatalf("hook saw steps %v and the device %d calls, want %d", steps, len(mach.OpLog()), k)
				}
				gpus, plan2 := planNode(t, mach, map[int]partition.Target{0: tc.to}, nil)
				// A GI created but not its CI is repaired, not re-made.
				for _, in := range gpus[0].Instances {
					if len(in.CIs) > 0 {
						continue
					}
					for _, x := range plan2.GPUs[0].Instances {
						if x.Placement == in.Placement && x.Status != partition.StatusRepair {
							t.Errorf("half-made GI at %+v is %s, want repair", in.Placement, x.Status)
						}
					}
				}
				if len(plan2.GPUs[0].Ops) > n-k+1 {
					t.Errorf("re-plan has %d ops, more than the %d left (+1 for a mode op): %s", len(plan2.GPUs[0].Ops), n-k, opsText(plan2.GPUs[0].Ops))
				}
				applyAll(t, mach, plan2)
				gpus, plan3 := planNode(t, mach, map[int]partition.Target{0: tc.to}, nil)
				assertAt(t, gpus[0], tc.to)
				if !plan3.NoOp() {
					t.Errorf("not converged: %s", opsText(plan3.GPUs[0].Ops))
				}
			})
		}
	}
}

// TestApplyPartialComputeInstance: a GI whose CI uses only part of it (as
// after a crash or a hand-made layout) is fixed in place.
func TestApplyPartialComputeInstance(t *testing.T) {
	to := partition.Target{MIG: map[string]int{"3g.40gb": 2}}
	mach := newMachine(t, "dgx-h100")
	d, _ := mach.Device(0)
	if err := d.SetMIGMode(partition.MIGEnabled); err != nil {
		t.Fatal(err)
	}
	if err := d.Reset(); err != nil {
		t.Fatal(err)
	}
	gi, err := d.CreateGPUInstance(2, partition.Placement{Start: 4, Size: 4})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mach.CreateComputeInstanceSlices(0, gi.ID, 1); err != nil {
		t.Fatal(err)
	}
	gpus, plan := planNode(t, mach, map[int]partition.Target{0: to}, nil)
	want := fmt.Sprintf("destroy-ci 3g.40gb at 4:4 (GI %d, CI %d); create-gi 3g.40gb at 0:4; create-ci 3g.40gb at 0:4; create-ci 3g.40gb at 4:4 (GI %d)",
		gi.ID, gpus[0].Instances[0].CIs[0].ID, gi.ID)
	if got := opsText(plan.GPUs[0].Ops); got != want {
		t.Fatalf("ops\n got %s\nwant %s", got, want)
	}
	applyAll(t, mach, plan)
	gpus, again := planNode(t, mach, map[int]partition.Target{0: to}, nil)
	assertAt(t, gpus[0], to)
	if !again.NoOp() || gpus[0].Instances[1].GIID != gi.ID {
		t.Errorf("not converged in place: %+v", gpus[0].Instances)
	}
}

// TestApplyBusy checks that busy devices are never destroyed: the plan
// blocks when the planner knows, and the device refuses (and the error
// says which op) when it does not.
func TestApplyBusy(t *testing.T) {
	from := partition.Target{MIG: map[string]int{"3g.40gb": 2}}
	to := partition.Target{MIG: map[string]int{"7g.80gb": 1}}

	t.Run("known busy: blocked, nothing touched", func(t *testing.T) {
		mach := setUp(t, "dgx-h100", from)
		gpus, _ := planNode(t, mach, nil, nil)
		busy := gpus[0].Instances[1].UUID()
		if err := mach.SetBusy(busy, true); err != nil {
			t.Fatal(err)
		}
		_, plan := planNode(t, mach, map[int]partition.Target{0: to}, uuids(busy))
		p := plan.GPUs[0]
		if !p.IsBlocked() || len(p.Ops) != 0 || len(p.WouldDo) == 0 || p.Blocked[0].UUID != busy {
			t.Fatalf("plan not blocked on %s: %+v", busy, p)
		}
		err := (&partition.Applier{Lib: mach}).Apply(context.Background(), p)
		if !errors.Is(err, partition.ErrBlocked) || !strings.Contains(err.Error(), busy) {
			t.Errorf("Apply error %v, want ErrBlocked naming %s", err, busy)
		}
		if len(mach.OpLog()) != 0 {
			t.Errorf("blocked apply touched the GPU: %v", mach.OpLog())
		}
	})

	t.Run("unknown busy: the device refuses, the error names the op", func(t *testing.T) {
		mach := setUp(t, "dgx-h100", from)
		gpus, _ := planNode(t, mach, nil, nil)
		busy := gpus[0].Instances[1].UUID()
		if err := mach.SetBusy(busy, true); err != nil {
			t.Fatal(err)
		}
		_, plan := planNode(t, mach, map[int]partition.Target{0: to}, nil)
		err := (&partition.Applier{Lib: mach}).Apply(context.Background(), plan.GPUs[0])
		want := fmt.Sprintf("GPU 0: op 2/6 destroy-ci 3g.40gb at 4:4 (GI %d, CI 0): ", gpus[0].Instances[1].GIID)
		if !errors.Is(err, partition.ErrInUse) || !strings.HasPrefix(err.Error(), want) {
			t.Fatalf("Apply error %q, want ErrInUse starting %q", err, want)
		}
		if partition.RebootRequired(err) {
			t.Errorf("a busy CI is not a reboot case")
		}
		after, _ := planNode(t, mach, nil, nil)
		if after[0].Instances[1].UUID() != busy {
			t.Errorf("busy instance gone")
		}
	})

	t.Run("busy whole GPU: reset refused, reboot required", func(t *testing.T) {
		mach := newMachine(t, "dgx-h100")
		gpus, _ := planNode(t, mach, nil, nil)
		if err := mach.SetBusy(gpus[0].UUID, true); err != nil {
			t.Fatal(err)
		}
		_, plan := planNode(t, mach, map[int]partition.Target{0: to}, uuids(gpus[0].UUID))
		if p := plan.GPUs[0]; !p.IsBlocked() || p.Blocked[0].UUID != gpus[0].UUID || !p.NeedsReset {
			t.Fatalf("plan not blocked on the GPU: %+v", p)
		}
		// Without the in-use knowledge the reset itself fails.
		_, plan = planNode(t, mach, map[int]partition.Target{0: to}, nil)
		err := (&partition.Applier{Lib: mach}).Apply(context.Background(), plan.GPUs[0])
		var oe *partition.OpError
		if !errors.As(err, &oe) || oe.Op.Kind != partition.OpResetGPU || !errors.Is(err, partition.ErrInUse) || !partition.RebootRequired(err) {
			t.Fatalf("Apply error %v, want a reset-gpu OpError wrapping ErrInUse", err)
		}
		// The pending mode stays set; after a reboot only the creates remain.
		if err := mach.Reboot(); err != nil {
			t.Fatal(err)
		}
		_, plan = planNode(t, mach, map[int]partition.Target{0: to}, nil)
		if got := opsText(plan.GPUs[0].Ops); got != "create-gi 7g.80gb at 0:8; create-ci 7g.80gb at 0:8" {
			t.Errorf("after reboot: %s", got)
		}
	})

	t.Run("reboot-only platform", func(t *testing.T) {
		mach := newMachine(t, "dgx-h100")
		if err := mach.SetRebootOnly(0, true); err != nil {
			t.Fatal(err)
		}
		_, plan := planNode(t, mach, map[int]partition.Target{0: to}, nil)
		err := (&partition.Applier{Lib: mach}).Apply(context.Background(), plan.GPUs[0])
		if !errors.Is(err, partition.ErrNotSupported) || !partition.RebootRequired(err) || !strings.HasPrefix(err.Error(), "GPU 0: op 2/4 reset-gpu: ") {
			t.Fatalf("Apply error %v, want reset-gpu failing with ErrNotSupported", err)
		}
	})
}

// TestApplyErrors checks the applier's failure paths: device errors name
// the op, the context stops it, and stale plans fail instead of touching
// the wrong instance.
func TestApplyErrors(t *testing.T) {
	to := partition.Target{MIG: map[string]int{"3g.40gb": 1, "4g.40gb": 1}}

	t.Run("device error names the op", func(t *testing.T) {
		mach := newMachine(t, "dgx-h100")
		if err := mach.InjectFault(sim.Fault{Call: "CreateGPUInstance", GPU: 2, Err: partition.ErrInsufficientResources, Times: 1}); err != nil {
			t.Fatal(err)
		}
		_, plan := planNode(t, mach, map[int]partition.Target{2: to}, nil)
		err := (&partition.Applier{Lib: mach}).Apply(context.Background(), plan.GPUs[2])
		if !errors.Is(err, partition.ErrInsufficientResources) || !strings.HasPrefix(err.Error(), "GPU 2: op 3/6 create-gi 4g.40gb at 0:4: ") ||
			!strings.HasSuffix(err.Error(), "insufficient resources") {
			t.Fatalf("Apply error %q", err)
		}
		// Retry from the real state finishes the job.
		_, plan = planNode(t, mach, map[int]partition.Target{2: to}, nil)
		applyAll(t, mach, plan)
		gpus, _ := planNode(t, mach, nil, nil)
		assertAt(t, gpus[2], to)
	})

	t.Run("cancelled context runs nothing", func(t *testing.T) {
		mach := newMachine(t, "dgx-h100")
		_, plan := planNode(t, mach, map[int]partition.Target{0: to}, nil)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := (&partition.Applier{Lib: mach}).Apply(ctx, plan.GPUs[0])
		if !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), "GPU 0: op 1/6 enable-mig: not started") || len(mach.OpLog()) != 0 {
			t.Fatalf("Apply error %v, log %v", err, mach.OpLog())
		}
	})

	t.Run("context cancelled between ops", func(t *testing.T) {
		mach := newMachine(t, "dgx-h100")
		_, plan := planNode(t, mach, map[int]partition.Target{0: to}, nil)
		ctx, cancel := context.WithCancel(context.Background())
		a := partition.Applier{Lib: mach, AfterOp: func(_, step int, _ partition.Op) error {
			if step == 2 {
				cancel()
			}
			return nil
		}}
		err := a.Apply(ctx, plan.GPUs[0])
		var oe *partition.OpError
		if !errors.As(err, &oe) || oe.Step != 3 || !errors.Is(err, context.Canceled) || len(mach.OpLog()) != 2 {
			t.Fatalf("Apply error %v after %d calls", err, len(mach.OpLog()))
		}
	})

	t.Run("refused before an op", func(t *testing.T) {
		mach := newMachine(t, "dgx-h100")
		_, plan := planNode(t, mach, map[int]partition.Target{0: to}, nil)
		fenced := errors.New("fenced")
		var before []int
		a := partition.Applier{Lib: mach, BeforeOp: func(_, step int, _ partition.Op) error {
			before = append(before, step)
			if step == 3 {
				return fenced
			}
			return nil
		}}
		err := a.Apply(context.Background(), plan.GPUs[0])
		var oe *partition.OpError
		if !errors.As(err, &oe) || oe.Step != 3 || !errors.Is(err, fenced) || !strings.Contains(err.Error(), "not started") || len(mach.OpLog()) != 2 {
			t.Fatalf("Apply error %v after %d calls", err, len(mach.OpLog()))
		}
		if diff := cmp.Diff([]int{1, 2, 3}, before); diff != "" {
			t.Errorf("BeforeOp steps (-want +got):\n%s", diff)
		}
	})

	t.Run("stale plan: instance moved", func(t *testing.T) {
		mach := setUp(t, "dgx-h100", partition.Target{MIG: map[string]int{"3g.40gb": 2}})
		_, plan := planNode(t, mach, map[int]partition.Target{0: {MIG: map[string]int{"7g.80gb": 1}}}, nil)
		// Someone re-makes the GI at 0:4 as a 1g before the apply.
		d, _ := mach.Device(0)
		gis, _ := d.GPUInstances()
		sort.Slice(gis, func(i, j int) bool { return gis[i].Placement.Start < gis[j].Placement.Start })
		if err := d.DestroyComputeInstance(gis[0].ID, 0); err != nil {
			t.Fatal(err)
		}
		if err := d.DestroyGPUInstance(gis[0].ID); err != nil {
			t.Fatal(err)
		}
		if _, err := d.CreateGPUInstance(0, partition.Placement{Start: 0, Size: 1}); err != nil {
			t.Fatal(err)
		}
		mach.ResetOpLog()
		err := (&partition.Applier{Lib: mach}).Apply(context.Background(), plan.GPUs[0])
		if !errors.Is(err, partition.ErrStateChanged) || !strings.Contains(err.Error(), "op 1/") {
			t.Fatalf("Apply error %v, want ErrStateChanged at op 1", err)
		}
		if len(mach.OpLog()) != 0 {
			t.Errorf("stale apply touched the GPU: %v", mach.OpLog())
		}
	})

	t.Run("plan for another GPU", func(t *testing.T) {
		mach := newMachine(t, "dgx-h100")
		_, plan := planNode(t, mach, map[int]partition.Target{0: to}, nil)
		p := plan.GPUs[0]
		p.Index = 1
		err := (&partition.Applier{Lib: mach}).Apply(context.Background(), p)
		if !errors.Is(err, partition.ErrStateChanged) || len(mach.OpLog()) != 0 {
			t.Fatalf("Apply error %v", err)
		}
	})
}

func TestResolveModel(t *testing.T) {
	mach := newMachine(t, "h100-80gb*1,l4-24gb*1")
	gpus, err := partition.ReadInventory(mach)
	if err != nil {
		t.Fatal(err)
	}
	d0, _ := mach.Device(0)
	d1, _ := mach.Device(1)

	// MIG off: the catalogue model.
	m, err := partition.ResolveModel(d0, gpus[0])
	if err != nil || m.Key != "H100-80GB" || len(m.Profiles) != 7 {
		t.Fatalf("MIG off: %+v, %v", m.Key, err)
	}
	// MIG on: read from the device, same geometry.
	_, plan := planNode(t, mach, map[int]partition.Target{0: {MIG: map[string]int{}}}, nil)
	applyAll(t, mach, plan)
	gpus, _ = partition.ReadInventory(mach)
	dm, err := partition.ResolveModel(d0, gpus[0])
	if err != nil {
		t.Fatalf("MIG on: %v", err)
	}
	// The key and the profiles; product and sizes are not compared.
	if diff := cmp.Diff(m, dm, cmpopts.IgnoreFields(partition.Model{}, "Product", "OtherProducts", "PCIDeviceIDs", "MemoryMiB", "MemorySlices", "ComputeSlices")); diff != "" {
		t.Fatalf("MIG on: model read from the device (-catalogue +device):\n%s", diff)
	}
	if len(dm.PCIDeviceIDs) != 1 || dm.PCIDeviceIDs[0] != m.PCIDeviceIDs[0] {
		t.Errorf("MIG on: PCI device IDs %v, want the device's %#x", dm.PCIDeviceIDs, m.PCIDeviceIDs[0])
	}
	// No MIG at all.
	if _, err := partition.ResolveModel(d1, gpus[1]); !errors.Is(err, partition.ErrNotSupported) {
		t.Errorf("L4: %v, want ErrNotSupported", err)
	}
	// MIG-capable, MIG off, unknown to the catalogue.
	odd := partition.GPU{Index: 5, Product: "NVIDIA X300", MemoryMiB: 184320, MIGCapable: true}
	if _, err := partition.ResolveModel(nil, odd); !errors.Is(err, partition.ErrUnknownModel) || !strings.Contains(err.Error(), "enable MIG") {
		t.Errorf("unknown model: %v", err)
	}
}
