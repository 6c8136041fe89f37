package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/carve-dev/carve/agent"
	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/internal/chaos"
	"github.com/carve-dev/carve/internal/transitions"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/test/cluster"
	"github.com/carve-dev/carve/test/harness"
)

const (
	scenarioStateDirRoot = "State directory unusable (carve-agent on the local cluster, as root)"
	checkedStateDirRoot  = "The agent (set up as carve-agent sets it up) is stopped in the middle of an apply of " +
		"H100-80GB:balanced->halves, its state directory holding the checkpoint; then the directory is made unusable in " +
		"ways that stop root too (chmod does not): remounted read-only (a bind mount), or a 64 KiB tmpfs filled up. " +
		"Restarted, the agent must report the interrupted apply, end in state failed with a Warning ApplyFailed Event " +
		"and a last error naming the directory, make no NVML call and never record the state applying (no apply starts), " +
		"and leave the checkpoint byte for byte as it was. Once the directory is writable again, its retries (with " +
		"backoff) must finish the change with exactly the NVML calls an uninterrupted apply has left and its layout, " +
		"remove the checkpoint, and leave no failure Lease in the rollout."
)

// stateDirMount is a way to make a state directory unusable as root.
type stateDirMount struct {
	name string
	// mount sets the directory up before the agent first writes to it.
	mount func(dir string) error
	// breakDir makes it unusable; repair usable again.
	breakDir, repair func(dir string) error
}

// runCmd runs a command, its output in the error.
func runCmd(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

func stateDirMounts() []stateDirMount {
	filler := func(dir string) string { return filepath.Join(dir, "filler") }
	return []stateDirMount{
		{
			name:     "read-only bind mount",
			mount:    func(dir string) error { return runCmd("mount", "--bind", dir, dir) },
			breakDir: func(dir string) error { return runCmd("mount", "-o", "remount,bind,ro", dir) },
			repair:   func(dir string) error { return runCmd("mount", "-o", "remount,bind,rw", dir) },
		},
		{
			name: "full tmpfs (64 KiB)",
			mount: func(dir string) error {
				return runCmd("mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", dir)
			},
			breakDir: func(dir string) error {
				f, err := os.Create(filler(dir))
				if err != nil {
					return err
				}
				defer f.Close()
				block := make([]byte, 4096)
				for {
					if _, err := f.Write(block); err != nil {
						if errors.Is(err, syscall.ENOSPC) {
							return nil
						}
						return err
					}
				}
			},
			repair: func(dir string) error { return os.Remove(filler(dir)) },
		},
	}
}

// TestChaosStateDirUnusableAsRoot: see checkedStateDirRoot.
func TestChaosStateDirUnusableAsRoot(t *testing.T) {
	c := suite.Cluster(t)
	rec := chaos.NewRecorder("e2e-3-statedir")
	if err := rec.Describe(scenarioStateDirRoot, checkedStateDirRoot); err != nil {
		t.Fatal(err)
	}
	var tr transitions.Transition
	for _, x := range transitions.Suite() {
		if x.Name() == "H100-80GB:balanced->halves" {
			tr = x
		}
	}
	interruptAt := []int{4}
	if chaos.Full() {
		interruptAt = []int{1, 4, 9, 15}
	}
	for _, sm := range stateDirMounts() {
		for _, k := range interruptAt {
			t.Run(fmt.Sprintf("%s/after-op-%d", sm.name, k), func(t *testing.T) {
				ctx := testCtx(t, 5*time.Minute)
				freshNode(t, c)
				deleteFailureLease(ctx, t, c) // chaos_cluster_test.go
				cc := &chaosCase{t: t}
				stateDirCase(ctx, t, c, tr, sm, k, cc)
				cc.record(rec, chaos.Record{Scenario: scenarioStateDirRoot, Case: fmt.Sprintf("%s, interrupted after op %d", tr.Name(), k), Fault: sm.name})
			})
		}
	}
}

// stateDirCase is one case of TestChaosStateDirUnusableAsRoot.
func stateDirCase(ctx context.Context, t *testing.T, c *cluster.Cluster, tr transitions.Transition, sm stateDirMount, k int, cc *chaosCase) {
	t.Helper()
	before, want, wantOps := transitionStates(t, tr, t.TempDir())
	m, err := sim.NewFromState(before)
	m = initSim(t, m, err)
	dir := t.TempDir()
	if err := sm.mount(dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := runCmd("umount", dir); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	applyProfiles(ctx, t, c, transitions.Profiles(tr.Model))
	setProfileLabel(ctx, t, c, tr.From)
	checkpoint := interruptApply(ctx, t, c, m, dir, tr, k)

	if err := sm.breakDir(dir); err != nil {
		t.Fatal(err)
	}
	m.ResetOpLog()
	since := time.Now()
	states := watchStates(ctx, c)
	startAgent(t, c, m, func(cfg *agent.Config) { cfg.StateDir = dir })
	waitEvent(ctx, t, c, carvev1.ReasonResumingApply, "was interrupted", since)
	ev := waitEvent(ctx, t, c, carvev1.ReasonApplyFailed, "state directory "+dir, since)
	n, err := harness.WaitNode(ctx, c.Clientset(), c.NodeName(), time.Minute, "state failed", func(n *corev1.Node) bool {
		return n.Labels[carvev1.LabelState] == carvev1.StateFailed
	})
	if err != nil {
		cc.fail("%v", err)
	} else if r, err := harness.RecordOf(n); err != nil || !strings.Contains(r.LastError, dir) {
		cc.fail("node record's last error %q (%v), want it to name %s", r.LastError, err, dir)
	}
	// A few retries with the directory unusable.
	time.Sleep(3 * time.Second)
	if ops := m.OpLog(); len(ops) != 0 {
		cc.fail("NVML calls with the state directory unusable: %v", ops)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "intent.json")); err != nil || !bytes.Equal(got, checkpoint) {
		cc.lose("the checkpoint changed (err %v):\n%s\nwas\n%s", err, got, checkpoint)
	}
	// The first state seen is what the stopped agent left: applying.
	if seen := states(); len(seen) == 0 || seen[len(seen)-1] != carvev1.StateFailed || slices.Contains(seen[1:], carvev1.StateApplying) {
		cc.fail("the state went %v with the directory unusable, want failed and never applying", seen)
	}
	if err := sm.repair(dir); err != nil {
		t.Fatal(err)
	}
	waitState(ctx, t, c, carvev1.StateSuccess, tr.To)
	if got := layout(t, m); !maps.Equal(got, want) {
		cc.lose("the GPUs hold\n%v\nwant (a clean apply)\n%v", got, want)
	}
	var got []string
	for _, op := range m.OpLog() {
		got = append(got, op.String())
	}
	if diff := cmp.Diff(wantOps[k:], got); diff != "" {
		cc.fail("NVML calls after the repair differ from the rest of a clean apply (-clean +got):\n%s", diff)
	}
	if _, err := os.Stat(filepath.Join(dir, "intent.json")); !os.IsNotExist(err) {
		cc.fail("checkpoint left after converging (err %v)", err)
	}
	noFailureLeaseLeft(ctx, cc, c)
	cc.notes = append(cc.notes, "the agent said: "+ev.Message)
}

// interruptApply runs the agent on m with the state directory dir from
// tr.From towards tr.To and stops it in the middle of the apply, once op
// k is done and checkpointed; it returns the checkpoint left.
func interruptApply(ctx context.Context, t *testing.T, c *cluster.Cluster, m *sim.Machine, dir string, tr transitions.Transition, k int) []byte {
	t.Helper()
	atK, release := make(chan struct{}), make(chan struct{})
	stopped := fmt.Errorf("stopped by the test after op %d", k)
	n := 0
	r := startAgent(t, c, m, func(cfg *agent.Config) {
		cfg.StateDir = dir
		cfg.AfterOp = func(int, int, partition.Op) error {
			switch n++; {
			case n < k:
				return nil
			case n == k:
				close(atK)
				<-release
			}
			return stopped
		}
	})
	var once sync.Once
	let := func() { once.Do(func() { close(release) }) }
	t.Cleanup(let) // before the agent is stopped, should the test end early
	waitState(ctx, t, c, carvev1.StateSuccess, tr.From)
	setProfileLabel(ctx, t, c, tr.To)
	select {
	case <-atK:
	case <-ctx.Done():
		t.Fatalf("the apply never reached op %d", k)
	}
	r.cancel()
	let()
	r.stop(t)
	data, err := os.ReadFile(filepath.Join(dir, "intent.json"))
	if err != nil {
		t.Fatalf("no checkpoint after stopping the apply: %v", err)
	}
	cp, err := carvev1.DecodeCheckpoint(data)
	if err != nil || cp.OpsDone() != k {
		t.Fatalf("checkpoint after op %d: %d ops done, %v", k, cp.OpsDone(), err)
	}
	return data
}
