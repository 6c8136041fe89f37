package reconfig

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/go-cmp/cmp"

	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/desired"
	"github.com/carve-dev/carve/internal/transitions"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
)

// result is one transition measured: carve's plan and the wipe beside it.
type result struct {
	tr          transitions.Transition
	carve, wipe tally
}

// measure runs one transition on two simulated machines, both first
// brought to tr.From by carve as the agent does: on the first carve's plan
// to tr.To, on the second the wipe-and-recreate steps. Each must converge
// to the target; carve must destroy nothing its end geometry holds again.
func measure(ctx context.Context, tr transitions.Transition, lat sim.Latency) (result, error) {
	f, err := configs.Parse([]byte(transitions.Profiles(tr.Model)))
	if err != nil {
		return result{}, fmt.Errorf("profiles of %s: %w", tr.Model, err)
	}
	carveM, err := machineAt(ctx, tr.Machine, f, tr.From)
	if err != nil {
		return result{}, err
	}
	wipeM, err := machineAt(ctx, tr.Machine, f, tr.From)
	if err != nil {
		return result{}, err
	}
	before, err := partition.ReadNode(carveM)
	if err != nil {
		return result{}, fmt.Errorf("read %s: %w", tr.Machine, err)
	}
	st, err := desired.For(f, tr.To, before)
	if err != nil {
		return result{}, fmt.Errorf("profile %s on %s: %w", tr.To, tr.Machine, err)
	}
	plan, err := partition.PlanNode(before.GPUs, before.Models, st.Targets, nil)
	if err != nil {
		return result{}, fmt.Errorf("plan %s: %w", tr.To, err)
	}
	wipe, err := Wipe(before, st.Targets)
	if err != nil {
		return result{}, err
	}
	r := result{tr: tr}
	if r.carve, err = run(ctx, carveM, before, planSteps(plan), st.Targets, lat); err != nil {
		return result{}, fmt.Errorf("carve's plan: %w", err)
	}
	if r.wipe, err = run(ctx, wipeM, before, wipe, st.Targets, lat); err != nil {
		return result{}, fmt.Errorf("wipe and recreate: %w", err)
	}
	if r.carve.destroyedWanted > 0 {
		return result{}, fmt.Errorf("carve's plan destroyed %d instances that %s holds again: %v",
			r.carve.destroyedWanted, tr.To, r.carve.wanted)
	}
	return r, nil
}

// machineAt returns a simulated machine brought from its factory state to
// a profile the way the agent does it: targets from the profile file,
// partition.PlanNode, partition.Applier; checked to have converged.
func machineAt(ctx context.Context, spec string, f *configs.File, profile string) (*sim.Machine, error) {
	m, err := sim.New(spec)
	if err != nil {
		return nil, fmt.Errorf("machine %s: %w", spec, err)
	}
	if err := m.Init(); err != nil {
		return nil, fmt.Errorf("machine %s: init: %w", spec, err)
	}
	node, err := partition.ReadNode(m)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", spec, err)
	}
	st, err := desired.For(f, profile, node)
	if err != nil {
		return nil, fmt.Errorf("profile %s on %s: %w", profile, spec, err)
	}
	plan, err := partition.PlanNode(node.GPUs, node.Models, st.Targets, nil)
	if err != nil {
		return nil, fmt.Errorf("plan %s on %s: %w", profile, spec, err)
	}
	if err := apply(ctx, m, planSteps(plan)); err != nil {
		return nil, fmt.Errorf("apply %s on %s: %w", profile, spec, err)
	}
	if err := converged(m, st.Targets); err != nil {
		return nil, fmt.Errorf("%s on %s: %w", profile, spec, err)
	}
	return m, nil
}

// planSteps lists a node plan's ops in the order the agent runs them: GPU
// after GPU, each plan's ops in order.
func planSteps(p partition.NodePlan) []Step {
	var steps []Step
	for _, g := range p.GPUs {
		for _, op := range g.Ops {
			steps = append(steps, Step{GPU: g.Index, Op: op})
		}
	}
	return steps
}

// run applies steps to m, which is in the state before describes, checks
// that the machine made exactly these calls and reached the targets, and
// tallies the work.
func run(ctx context.Context, m *sim.Machine, before partition.Node, steps []Step,
	targets map[int]partition.Target, lat sim.Latency,
) (tally, error) {
	now, err := partition.ReadInventory(m)
	if err != nil {
		return tally{}, fmt.Errorf("read the GPUs: %w", err)
	}
	if diff := cmp.Diff(before.GPUs, now); diff != "" {
		return tally{}, fmt.Errorf("the machine is not in the state planned from (-planned +machine):\n%s", diff)
	}
	m.ResetOpLog()
	if err := apply(ctx, m, steps); err != nil {
		return tally{}, err
	}
	if n := len(m.OpLog()); n != len(steps) {
		return tally{}, fmt.Errorf("%d steps made %d mutating NVML calls", len(steps), n)
	}
	if err := converged(m, targets); err != nil {
		return tally{}, err
	}
	after, err := partition.ReadInventory(m)
	if err != nil {
		return tally{}, fmt.Errorf("read the GPUs: %w", err)
	}
	return count(before.GPUs, steps, after, lat)
}

// apply runs steps one at a time through partition.Applier, as one-op
// plans on their GPUs.
func apply(ctx context.Context, m *sim.Machine, steps []Step) error {
	a := partition.Applier{Lib: m}
	for i, s := range steps {
		if err := a.Apply(ctx, partition.GPUPlan{Index: s.GPU, Ops: []partition.Op{s.Op}}); err != nil {
			return fmt.Errorf("step %d of %d: %w", i+1, len(steps), err)
		}
	}
	return nil
}

// converged checks that m's GPUs are as the targets say: carve's planner
// has nothing left to do, and each GPU's MIG mode and complete instances
// by profile are the target's.
func converged(m *sim.Machine, targets map[int]partition.Target) error {
	node, err := partition.ReadNode(m)
	if err != nil {
		return fmt.Errorf("read the GPUs: %w", err)
	}
	again, err := partition.PlanNode(node.GPUs, node.Models, targets, nil)
	if err != nil {
		return fmt.Errorf("plan again: %w", err)
	}
	var errs []error
	if !again.NoOp() {
		errs = append(errs, fmt.Errorf("not converged: %d ops left", len(planSteps(again))))
	}
	for _, g := range node.GPUs {
		t := targets[g.Index]
		if g.MIGCapable && (g.MIGMode == partition.MIGEnabled) != t.MIGEnabled() {
			errs = append(errs, fmt.Errorf("GPU %d: MIG %s, want MIG enabled %t", g.Index, g.MIGMode, t.MIGEnabled()))
		}
		if got := completeCounts(g.Instances); !sameCounts(got, t.MIG) {
			errs = append(errs, fmt.Errorf("GPU %d: instances %v, want %v", g.Index, got, t.MIG))
		}
	}
	return errors.Join(errs...)
}

// completeCounts counts a GPU's complete instances by profile.
func completeCounts(instances []partition.Instance) map[string]int {
	out := map[string]int{}
	for _, in := range instances {
		if in.Complete() {
			out[in.Profile]++
		}
	}
	return out
}
