package plugin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/timeslice"
	"github.com/carve-dev/carve/xidhealth"
	"github.com/carve-dev/carve/xidpolicy"
)

// policyEnv is a Manager serving the whole GPUs of a simulated a30x4 under
// a policy where XID 94 recovers after quiet, with a fake clock, a state
// file in dir and the given boot ID.
type policyEnv struct {
	*env
	machine *sim.Machine
	clock   *fakeClock
	uuids   []string
	res     timeslice.Resources
}

const policyQuiet = time.Minute

func newPolicyEnv(t *testing.T, m *sim.Machine, dir, boot string) *policyEnv {
	t.Helper()
	gpus, err := partition.ReadInventory(m)
	if err != nil {
		t.Fatal(err)
	}
	res, err := timeslice.Expand(gpus, nil)
	if err != nil {
		t.Fatal(err)
	}
	pol := xidpolicy.Default()
	pol.Recoverable, pol.Quiet = []uint64{94}, policyQuiet
	clock := &fakeClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	e := newEnv(t, Options{NVML: m, Health: HealthOptions{
		Policy: pol, StateFile: filepath.Join(dir, carvev1.XIDHealthFile),
		BootID: func() (string, error) { return boot, nil }, Now: clock.Now,
		Poll: 10 * time.Millisecond, MinBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
	}}, true)
	e.update(t, res)
	pe := &policyEnv{env: e, machine: m, clock: clock, res: res}
	for _, g := range gpus {
		pe.uuids = append(pe.uuids, g.UUID)
	}
	return pe
}

// health is what the kubelet was last sent for the whole GPUs.
func (pe *policyEnv) health(t *testing.T) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, d := range pe.m.Advertised()[carvev1.GPUResource] {
		got[d.ID] = map[bool]string{true: "Healthy", false: "Unhealthy"}[d.Healthy]
	}
	return got
}

// raise raises XIDs on whole GPUs once the health loop watches, and waits
// until the Manager has handled them.
func (pe *policyEnv) raise(t *testing.T, handledBefore int, xids map[int]uint64) {
	t.Helper()
	pe.clock.waitLoopPass(t) // the loop's event set exists
	for gpu, x := range xids {
		if err := pe.machine.RaiseXID(gpu, x, -1, -1); err != nil {
			t.Fatal(err)
		}
	}
	waitXIDsHandled(t, pe.m, handledBefore+len(xids))
}

func (pe *policyEnv) healthyBut(unhealthy ...int) map[string]string {
	out := map[string]string{}
	for _, u := range pe.uuids {
		out[u] = "Healthy"
	}
	for _, i := range unhealthy {
		out[pe.uuids[i]] = "Unhealthy"
	}
	return out
}

// stop ends the Manager's Run, as an agent that exits, and waits for it;
// the env's cleanup still sees Run's result.
func (pe *policyEnv) stop() {
	pe.cancel()
	err := <-pe.runDone
	pe.runDone <- err
}

func newSimA30(t *testing.T) *sim.Machine {
	t.Helper()
	m, err := sim.New("a30x4")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Init(); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestHealthPolicyClasses: on simulated GPUs, a critical XID (79) keeps
// its GPU unhealthy past any quiet period, a recoverable one (94) lifts
// after the quiet period, an ignored one (13) changes nothing, and a
// recoverable XID on a GPU a critical one hit does not lift it either.
func TestHealthPolicyClasses(t *testing.T) {
	pe := newPolicyEnv(t, newSimA30(t), t.TempDir(), "boot-1")
	pe.raise(t, 0, map[int]uint64{0: 79, 1: 94, 2: 13})
	if diff := cmp.Diff(map[string]uint64{pe.uuids[0]: 79, pe.uuids[1]: 94}, pe.m.Unhealthy()); diff != "" {
		t.Fatalf("unhealthy after the XIDs (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(pe.healthyBut(0, 1), pe.health(t)); diff != "" {
		t.Fatalf("advertised after the XIDs (-want +got):\n%s", diff)
	}
	pe.raise(t, 3, map[int]uint64{0: 94})
	pe.clock.add(policyQuiet)
	pe.clock.waitLoopPass(t)
	if diff := cmp.Diff(pe.healthyBut(0), pe.health(t)); diff != "" {
		t.Errorf("advertised once the quiet period passed (-want +got):\n%s", diff)
	}
	pe.clock.add(1000 * time.Hour)
	pe.clock.waitLoopPass(t)
	if diff := cmp.Diff(map[string]uint64{pe.uuids[0]: 94}, pe.m.Unhealthy()); diff != "" {
		t.Errorf("unhealthy 1000 h later (-want +got):\n%s", diff)
	}
}

// TestHealthCriticalSurvivesRestart: the devices critical XIDs made
// unhealthy stay unhealthy for an agent restarted on the same boot; a
// reset of their GPU or a new boot makes them healthy; recoverable XIDs
// are not kept.
func TestHealthCriticalSurvivesRestart(t *testing.T) {
	m, dir := newSimA30(t), t.TempDir()
	first := newPolicyEnv(t, m, dir, "boot-1")
	first.raise(t, 0, map[int]uint64{0: 79, 1: 94, 3: 48})
	first.stop()

	again := newPolicyEnv(t, m, dir, "boot-1")
	if diff := cmp.Diff(map[string]uint64{again.uuids[0]: 79, again.uuids[3]: 48}, again.m.Unhealthy()); diff != "" {
		t.Fatalf("unhealthy after a restart on the same boot (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(again.healthyBut(0, 3), again.health(t)); diff != "" {
		t.Fatalf("advertised after a restart on the same boot (-want +got):\n%s", diff)
	}
	// The agent reset GPU 3: healthy, and still after another restart.
	again.m.GPUReset(again.uuids[3])
	if diff := cmp.Diff(again.healthyBut(0), again.health(t)); diff != "" {
		t.Errorf("advertised after GPU 3 was reset (-want +got):\n%s", diff)
	}
	again.stop()
	third := newPolicyEnv(t, m, dir, "boot-1")
	if diff := cmp.Diff(map[string]uint64{third.uuids[0]: 79}, third.m.Unhealthy()); diff != "" {
		t.Errorf("unhealthy after the reset and a restart (-want +got):\n%s", diff)
	}
	third.stop()

	// A reboot: every GPU is healthy, and the file says so for this boot.
	rebooted := newPolicyEnv(t, m, dir, "boot-2")
	if diff := cmp.Diff(map[string]uint64{}, rebooted.m.Unhealthy()); diff != "" {
		t.Errorf("unhealthy after a reboot (-want +got):\n%s", diff)
	}
	rec, err := xidhealth.ReadStateFile(filepath.Join(dir, carvev1.XIDHealthFile))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(carvev1.XIDHealth{Version: carvev1.XIDHealthVersion, BootID: "boot-2", Devices: []carvev1.XIDUnhealthy{}}, rec); diff != "" {
		t.Errorf("health file after the reboot (-want +got):\n%s", diff)
	}
}

// TestHealthFileUnreadable: a state file that cannot be decoded stops
// New, naming the file, rather than making every device healthy.
func TestHealthFileUnreadable(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, carvev1.XIDHealthFile)
	if err := os.WriteFile(path, []byte(`{"version":9,"bootID":"b","devices":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := New(Options{NVML: newSimA30(t), Logger: discardLogger(), Health: HealthOptions{StateFile: path, BootID: func() (string, error) { return "b", nil }}})
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "format version 9") {
		t.Fatalf("New with an unreadable health file: %v", err)
	}
}
