package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/dra"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/test/cluster"
	"github.com/carve-dev/carve/test/harness"
)

// migManagerLayout writes the simulator's state file at path for machine
// spec as NVIDIA's MIG manager leaves a node labelled
// nvidia.com/mig.config=all-3g.40gb: every GPU in MIG mode with two
// 3g.40gb GPU instances (memory slices 0-3 and 4-7), each with one compute
// instance filling it. No carve profile has this layout.
func migManagerLayout(t *testing.T, path, spec string) {
	t.Helper()
	m, err := sim.Open(spec, path)
	m = initSim(t, m, err)
	defer func() { _ = m.Shutdown() }()
	n, err := m.DeviceCount()
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		d, err := m.Device(i)
		if err != nil {
			t.Fatal(err)
		}
		if err := migOn(d); err != nil {
			t.Fatalf("GPU %d: %v", i, err)
		}
		id, err := giProfileID(d, "3g.40gb")
		if err != nil {
			t.Fatalf("GPU %d: %v", i, err)
		}
		for _, start := range []int{0, 4} {
			gi, err := d.CreateGPUInstance(id, partition.Placement{Start: start, Size: 4})
			if err == nil {
				_, err = d.CreateComputeInstance(gi.ID)
			}
			if err != nil {
				t.Fatalf("GPU %d: 3g.40gb at %d: %v", i, start, err)
			}
		}
	}
}

// migOn turns MIG mode on, resetting the GPU where the mode stays pending.
func migOn(d partition.Device) error {
	if err := d.SetMIGMode(partition.MIGEnabled); err != nil {
		return err
	}
	if cur, _, err := d.MIGMode(); err != nil || cur == partition.MIGEnabled {
		return err
	}
	return d.Reset()
}

// giProfileID is the NVML ID of the GPU instance profile named name.
func giProfileID(d partition.Device, name string) (int, error) {
	profiles, err := d.GPUInstanceProfiles()
	if err != nil {
		return 0, err
	}
	for _, p := range profiles {
		if p.Name == name {
			return p.ID, nil
		}
	}
	return 0, os.ErrNotExist
}

// fileIdentity is what a write to a file changes: its content and, since
// the simulator replaces its state file on every change, its inode.
type fileIdentity struct {
	data  string
	inode uint64
}

// readIdentity reads path's fileIdentity.
func readIdentity(t *testing.T, path string) fileIdentity {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		t.Fatalf("%s: no inode", path)
	}
	return fileIdentity{data: string(data), inode: st.Ino}
}

// checkAdopted waits until the node is adopted (state and profile.source
// adopted) with want advertised, and checks from outside the agent that
// no GPU was changed: the simulator's state file, which every successful
// MIG operation replaces, is the one written before the agent started.
func checkAdopted(ctx context.Context, t *testing.T, c *cluster.Cluster, simState string, before fileIdentity, want map[string]int64) {
	t.Helper()
	n := waitState(ctx, t, c, carvev1.StateAdopted, "")
	waitAllocatable(ctx, t, c.Clientset(), c.NodeName(), want)
	if got := n.Labels[carvev1.LabelSource]; got != carvev1.SourceAdopted {
		t.Errorf("%s = %q, want %q", carvev1.LabelSource, got, carvev1.SourceAdopted)
	}
	if got, ok := n.Labels[carvev1.LabelApplied]; ok {
		t.Errorf("%s = %q on a node carve never partitioned", carvev1.LabelApplied, got)
	}
	rec, err := harness.RecordOf(n)
	if err != nil || rec.State != carvev1.StateAdopted || rec.Selected != nil {
		t.Errorf("record state %q, selected %+v (%v); want adopted, none", rec.State, rec.Selected, err)
	}
	if after := readIdentity(t, simState); after != before {
		t.Errorf("the simulated GPUs were changed (state file inode %d -> %d, content equal %v): adopting must not touch them",
			before.inode, after.inode, after.data == before.data)
	}
}

// TestDRAAdoptsTheMIGManagersLayout: carve as a DRA driver, with the
// profile file carve installs by default, on a node that NVIDIA's MIG
// manager partitioned: the node is adopted, its ResourceSlice lists
// exactly the MIG devices it has, and no NVML call changed the GPUs (the
// simulator's own operation log and its state file say so).
func TestDRAAdoptsTheMIGManagersLayout(t *testing.T) {
	c := suite.Cluster(t)
	freshNode(t, c)
	simState := filepath.Join(t.TempDir(), "sim.json")
	migManagerLayout(t, simState, "h100-80gb*2")
	before := readIdentity(t, simState)
	m, err := sim.Open("h100-80gb*2", simState)
	e := &draEnv{t: t, ctx: testCtx(t, 10*time.Minute), c: c, cs: c.Clientset(), m: initSim(t, m, err), state: t.TempDir()}
	e.create(anySlice(draClasses())...)
	e.agent = e.agentClient()
	installed, err := os.ReadFile(installedProfiles)
	if err != nil {
		t.Fatal(err)
	}
	if err := harness.ApplyProfiles(e.ctx, e.cs, deployNS, profilesCM, string(installed)); err != nil {
		t.Fatal(err)
	}
	e.startAgent()
	s := e.waitSlice(0)
	checkAdopted(e.ctx, t, c, simState, before, map[string]int64{})
	var profiles []string
	for _, d := range s.Spec.Devices {
		if p := d.Attributes[dra.AttrProfile].StringValue; p != nil {
			profiles = append(profiles, *p)
		}
	}
	if want := []string{"3g.40gb", "3g.40gb", "3g.40gb", "3g.40gb"}; !slices.Equal(profiles, want) {
		t.Errorf("slice devices of profiles %v, want %v", profiles, want)
	}
	if ops := e.m.OpLog(); len(ops) != 0 {
		t.Errorf("adopting the node made NVML changes: %v", ops)
	}
}
