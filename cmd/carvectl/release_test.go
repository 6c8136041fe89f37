package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/internal/apitest"
	"github.com/carve-dev/carve/rollout"
)

// releaseNow is the time the release tests read the slots at.
var releaseNow = time.Date(2026, 11, 24, 20, 0, 0, 0, time.UTC)

// releaseCluster is gpu-s mid-change since 19:40 with an expired slot
// (stuck), gpu-a holding a live slot, gpu-c an expired slot without a
// change, gpu-gone an expired slot without its Node, and gpu-s a slot of
// another ConfigMap.
func releaseCluster(t *testing.T) []runtime.Object {
	t.Helper()
	slot := func(i int) string { return rollout.SlotName("carve-profiles", i) }
	other := rolloutLease(rollout.SlotName("other", 0), rollout.KindSlot, "gpu-s", "", releaseNow.Add(-time.Hour), 15)
	other.Labels[carvev1.LeaseLabelConfigMap] = "other"
	return append(statusNodes(t),
		stuckNode(t, "gpu-s", slot(0), releaseNow.Add(-20*time.Minute)),
		rolloutLease(slot(0), rollout.KindSlot, "gpu-s", "", releaseNow.Add(-10*time.Minute), 15),
		rolloutLease(slot(1), rollout.KindSlot, "gpu-a", "", releaseNow.Add(-2*time.Second), 15),
		rolloutLease(slot(2), rollout.KindSlot, "gpu-c", "", releaseNow.Add(-20*time.Second), 15),
		rolloutLease(slot(3), rollout.KindSlot, "gpu-gone", "", releaseNow.Add(-time.Minute), 15),
		other,
	)
}

// slotHolders lists the rollout Leases left, as name=holder.
func slotHolders(t *testing.T, cs kubernetes.Interface) []string {
	t.Helper()
	list, err := cs.CoordinationV1().Leases("carve-system").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range list.Items {
		out = append(out, l.Name+"="+*l.Spec.HolderIdentity)
	}
	return out
}

// TestRolloutRelease: release deletes the slot the node holds when it is
// expired (stuck, free, or its Node gone), or live with --force, and says
// what it did and what follows; it refuses a live slot without --force,
// changes nothing with --dry-run, touches no other ConfigMap's slot, and
// ends with exit 1 for a node that holds none. Every delete names the
// resourceVersion read.
func TestRolloutRelease(t *testing.T) {
	all := []string{"carve-rollout-carve-profiles-0=gpu-s", "carve-rollout-carve-profiles-1=gpu-a", "carve-rollout-carve-profiles-2=gpu-c",
		"carve-rollout-carve-profiles-3=gpu-gone", "carve-rollout-other-0=gpu-s"}
	without := func(i int) []string { return append(append([]string(nil), all[:i]...), all[i+1:]...) }
	tests := []struct {
		name       string
		q          releaseQuery
		wantErr    bool
		wantLeases []string
		// out are the lines of stdout (stderr when wantErr), each a prefix.
		out []string
	}{
		{"stuck", releaseQuery{node: "gpu-s"}, false, without(0), []string{
			"released slot carve-system/carve-rollout-carve-profiles-0, held by gpu-s since 2026-11-24T19:49:00Z",
			"  last renewal: 2026-11-24T19:50:00Z, 10m0s ago (expired 2026-11-24T19:50:15Z, 9m45s ago)",
			"  holder: state applying, mid-change since 2026-11-24T19:40:00Z (20m0s ago)",
			"  next: the slot is free: a waiting node takes it at its next try (within about 8 s); the rollout no longer counts gpu-s as unavailable",
		}},
		{"stuck, dry run", releaseQuery{node: "gpu-s", dryRun: true}, false, all, []string{
			"would release slot carve-system/carve-rollout-carve-profiles-0, held by gpu-s",
			"  last renewal: ",
			"  holder: state applying, mid-change since 2026-11-24T19:40:00Z (20m0s ago)",
			"  next: the slot is free",
		}},
		{"live", releaseQuery{node: "gpu-a"}, true, all, []string{
			"carvectl rollout release: slot carve-rollout-carve-profiles-1: node gpu-a's agent still renews it (last renewal 2026-11-24T19:59:58Z, 2s ago, expires in 13s): the agent is alive; nothing released.",
			"--force releases it anyway: that agent then stops at its next operation boundary, keeps its checkpoint and waits for a slot again.",
		}},
		{"live, dry run", releaseQuery{node: "gpu-a", dryRun: true}, true, all, []string{
			"carvectl rollout release: slot carve-rollout-carve-profiles-1: node gpu-a's agent still renews it",
			"--force releases it anyway",
		}},
		{"live, forced", releaseQuery{node: "gpu-a", force: true}, false, without(1), []string{
			"released slot carve-system/carve-rollout-carve-profiles-1, held by gpu-a",
			"  last renewal: 2026-11-24T19:59:58Z, 2s ago (renewed by its agent)",
			"  holder: state success, no change in progress",
			"  next: the slot is free: a waiting node takes it at its next try (within about 8 s); the agent on gpu-a finds its slot gone when it renews it, stops at its next operation boundary",
		}},
		{"expired, no change", releaseQuery{node: "gpu-c"}, false, without(2), []string{
			"released slot carve-system/carve-rollout-carve-profiles-2, held by gpu-c",
			"  last renewal: 2026-11-24T19:59:40Z, 20s ago (expired 2026-11-24T19:59:55Z, 5s ago)",
			"  holder: state success, no change in progress",
			"  next: the slot is free: a waiting node takes it at its next try (within about 8 s)",
		}},
		{"node gone", releaseQuery{node: "gpu-gone"}, false, without(3), []string{
			"released slot carve-system/carve-rollout-carve-profiles-3, held by gpu-gone",
			"  last renewal: ",
			"  holder: node gpu-gone is gone",
			"  next: the slot is free",
		}},
		{"no slot", releaseQuery{node: "gpu-b"}, true, all, []string{
			"carvectl rollout release: node gpu-b holds no rollout slot of carve-system/carve-profiles: nothing to release",
		}},
		{"another ConfigMap's slot", releaseQuery{node: "gpu-s", configMap: "other"}, false, without(4), []string{
			"released slot carve-system/carve-rollout-other-0, held by gpu-s since 2026-11-24T18:59:00Z",
			"  last renewal: 2026-11-24T19:00:00Z, 1h0m0s ago (expired 2026-11-24T19:00:15Z, 59m45s ago)",
			"  holder: state applying, mid-change since 2026-11-24T19:40:00Z (20m0s ago)",
			"  next: the slot is free",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs, strict := apitest.NewStrict(releaseCluster(t)...)
			q := tt.q
			q.namespace, q.now = "carve-system", releaseNow
			if q.configMap == "" {
				q.configMap = "carve-profiles"
			}
			var stdout, stderr bytes.Buffer
			err := release(context.Background(), cs, q, &stdout, &stderr)
			if code := exitCode(err); (code == 1) != tt.wantErr || (code != 0 && code != 1) {
				t.Fatalf("error %v, want exit 1 %v; stderr:\n%s", err, tt.wantErr, stderr.String())
			}
			out, quiet := stdout.String(), stderr.String()
			if tt.wantErr {
				out, quiet = quiet, out
			}
			if quiet != "" {
				t.Errorf("unexpected output:\n%s", quiet)
			}
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(lines) != len(tt.out) {
				t.Fatalf("output (-want +got):\n%s", cmp.Diff(tt.out, lines))
			}
			for i, want := range tt.out {
				if !strings.HasPrefix(lines[i], want) {
					t.Errorf("line %d:\n got %s\nwant %s…", i, lines[i], want)
				}
			}
			if diff := cmp.Diff(tt.wantLeases, slotHolders(t, cs)); diff != "" {
				t.Errorf("Leases left (-want +got):\n%s", diff)
			}
			for _, a := range cs.Actions() {
				if d, ok := a.(k8stesting.DeleteAction); ok {
					if p := d.GetDeleteOptions().Preconditions; p == nil || p.ResourceVersion == nil {
						t.Errorf("delete of %s names no resourceVersion", d.GetName())
					}
				}
			}
			if u := strict.Unconditional(); len(u) > 0 {
				t.Errorf("unconditional writes: %v", u)
			}
		})
	}
}

// TestRolloutReleaseTakenOver: a slot taken over by another node between
// the read and the delete is not deleted (the delete names the version
// read, which the takeover replaced), and release says nothing was done.
func TestRolloutReleaseTakenOver(t *testing.T) {
	cs, _ := apitest.NewStrict(releaseCluster(t)...)
	name := rollout.SlotName("carve-profiles", 0)
	// Just before the delete reaches the store, gpu-b takes the slot over
	// (as a waiting agent would if gpu-s's record lost its change): the
	// Lease gets a new holder and resourceVersion. The reactor then lets
	// the strict fake's delete run on the store as it now is.
	cs.PrependReactor("delete", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		gvr := coordinationv1.SchemeGroupVersion.WithResource("leases")
		obj, err := cs.Tracker().Get(gvr, "carve-system", name)
		if err != nil {
			return true, nil, err
		}
		l := obj.(*coordinationv1.Lease).DeepCopy()
		l.Spec.HolderIdentity = new("gpu-b")
		l.Spec.RenewTime = new(metav1.NewMicroTime(releaseNow))
		l.ResourceVersion = "1000"
		return false, nil, cs.Tracker().Update(gvr, l, "carve-system")
	})
	q := releaseQuery{node: "gpu-s", namespace: "carve-system", configMap: "carve-profiles", now: releaseNow}
	var stdout, stderr bytes.Buffer
	if code := exitCode(release(context.Background(), cs, q, &stdout, &stderr)); code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if want := "carvectl rollout release: slot " + name + " changed since it was read (renewed, released or taken over): nothing done; run the command again"; !strings.HasPrefix(stderr.String(), want) {
		t.Errorf("stderr %q, want %q…", stderr.String(), want)
	}
	if stdout.String() != "" {
		t.Errorf("stdout %q, want nothing", stdout.String())
	}
	got, err := cs.CoordinationV1().Leases("carve-system").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the slot taken over is gone: %v", err)
	}
	if h := *got.Spec.HolderIdentity; h != "gpu-b" {
		t.Errorf("holder %s, want gpu-b", h)
	}
}

// TestRolloutReleaseCommand: NODE and the flags reach the query wherever
// NODE stands, and bad usage exits 2.
func TestRolloutReleaseCommand(t *testing.T) {
	now := time.Now()
	var gotKubeconfig string
	newClient := func(kubeconfig string, _ time.Duration) (kubernetes.Interface, string, error) {
		gotKubeconfig = kubeconfig
		l := rolloutLease(rollout.SlotName("carve-profiles", 0), rollout.KindSlot, "gpu-c", "", now.Add(-time.Minute), 15)
		l.Namespace = "ns"
		return fake.NewClientset(append(statusNodes(t), l)...), "https://test", nil
	}
	carvectl := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := runWith(args, &out, &errb, newClient)
		return code, out.String(), errb.String()
	}
	code, stdout, stderr := carvectl("rollout", "release", "--kubeconfig", "/k", "gpu-c", "--dry-run", "--config-map", "ns/carve-profiles")
	if code != 0 || gotKubeconfig != "/k" || !strings.HasPrefix(stdout, "would release slot ns/carve-rollout-carve-profiles-0, held by gpu-c") {
		t.Errorf("exit %d, kubeconfig %q, stdout:\n%s\nstderr:\n%s", code, gotKubeconfig, stdout, stderr)
	}
	if code, _, stderr := carvectl("rollout", "release", "gpu-x", "--config-map", "ns/carve-profiles"); code != 1 || !strings.Contains(stderr, "holds no rollout slot") {
		t.Errorf("a node without a slot: exit %d, stderr %q", code, stderr)
	}
	for _, args := range [][]string{{"rollout"}, {"rollout", "relase", "gpu-c"}, {"rollout", "release"}, {"rollout", "release", "gpu-c", "gpu-d"},
		{"rollout", "release", "gpu-c", "--config-map", "carve-profiles"}, {"rollout", "release", "gpu-c", "--no-such-flag"}} {
		if code, _, stderr := carvectl(args...); code != 2 || stderr == "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, stderr)
		}
	}
	if code, stdout, _ := carvectl("rollout", "-h"); code != 0 || !strings.Contains(stdout, "carvectl rollout release NODE") {
		t.Errorf("rollout -h: exit %d, stdout %q", code, stdout)
	}
}

// exitCode is the exit code err gives: 0 for nil, its code for an
// exitError, 2 for any other.
func exitCode(err error) int {
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	}
	return 2
}
