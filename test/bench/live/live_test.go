package live

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/google/go-cmp/cmp"

	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/test/bench/report"
	"github.com/carve-dev/carve/test/cluster"
	"github.com/carve-dev/carve/test/harness"
)

// TestShortRun runs the benchmark in short mode on the local cluster and
// checks that it measured what it says: every series has its samples, the
// restart side restarted the process and the live side did not, the
// FlowSchemas count the agent's requests and none of the admin's, and the
// cluster is left as it was found. Timings are not checked.
func TestShortRun(t *testing.T) {
	c := cluster.ForTest(t, cluster.Options{})
	root, err := harness.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin, err := harness.BuildAgent(ctx, root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	res, err := measure(ctx, Options{Cluster: c, Agent: bin, Short: true, Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	checkSeries(t, res)
	checkProcesses(t, res)
	if diff := cmp.Diff(schemaCheck{probe: probeRequests}, res.check, cmp.AllowUnexported(schemaCheck{}, requests{})); diff != "" {
		t.Errorf("the FlowSchemas counted (-want +got):\n%s", diff)
	}
	for _, tb := range res.tables() {
		if err := tb.Check(); err != nil {
			t.Error(err)
		}
	}
	checkClean(ctx, t, c)
}

type testLog struct{ t *testing.T }

func (l testLog) Write(b []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// checkSeries checks that each kind and trigger has 2 changes per side,
// and that each change cost the agent a write at least (its node patch).
func checkSeries(t *testing.T, res *results) {
	t.Helper()
	if res.changes != 2 || len(res.series) != 4 {
		t.Fatalf("%d series of %d changes per side, want 4 of 2", len(res.series), res.changes)
	}
	for _, s := range res.series {
		if l, r := len(s.bySide(live)), len(s.bySide(restart)); l != 2 || r != 2 {
			t.Errorf("%s by %s: %d live and %d restart changes, want 2 each", s.kind, s.trigger, l, r)
		}
		for i, smp := range s.samples {
			if smp.devices <= 0 || smp.alloc <= 0 || smp.cost.writes < 1 {
				t.Errorf("%s by %s, change %d (%s): devices %s, allocatable %s, requests %+v; want times and a write at least",
					s.kind, s.trigger, i+1, smp.side, smp.devices, smp.alloc, smp.cost)
			}
		}
	}
}

// checkProcesses checks that every restart started a new process and no
// live change did, and that each change began with the process the one
// before ended with.
func checkProcesses(t *testing.T, res *results) {
	t.Helper()
	prev := 0
	for _, s := range res.series {
		for i, smp := range s.samples {
			if prev != 0 && smp.pidBefore != prev {
				t.Errorf("%s by %s, change %d: began with pid %d, the change before ended with %d", s.kind, s.trigger, i+1, smp.pidBefore, prev)
			}
			prev = smp.pidAfter
			restarted := smp.pidAfter != smp.pidBefore
			if restarted != (smp.side == restart) {
				t.Errorf("%s by %s, change %d (%s): pid %d -> %d", s.kind, s.trigger, i+1, smp.side, smp.pidBefore, smp.pidAfter)
			}
		}
	}
}

// checkClean checks that Run deleted what it created and reset the node.
func checkClean(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	cs := c.Clientset()
	gone := map[string]error{}
	_, gone["namespace"] = cs.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
	_, gone["ClusterRole"] = cs.RbacV1().ClusterRoles().Get(ctx, clusterName, metav1.GetOptions{})
	_, gone["ClusterRoleBinding"] = cs.RbacV1().ClusterRoleBindings().Get(ctx, clusterName, metav1.GetOptions{})
	_, gone[writeSchema] = cs.FlowcontrolV1().FlowSchemas().Get(ctx, writeSchema, metav1.GetOptions{})
	_, gone[readSchema] = cs.FlowcontrolV1().FlowSchemas().Get(ctx, readSchema, metav1.GetOptions{})
	for what, err := range gone {
		if !apierrors.IsNotFound(err) {
			t.Errorf("%s left behind (get: %v)", what, err)
		}
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, c.NodeName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k := range n.Labels {
		if strings.HasPrefix(k, "carve.dev/") {
			t.Errorf("node label %s left behind", k)
		}
	}
	if _, err := harness.RecordOf(n); err == nil {
		t.Error("node record annotation left behind")
	}
	checkNoEvents(ctx, t, cs, c.NodeName())
}

// checkNoEvents checks that no Event of carve-agent on the node is left.
func checkNoEvents(ctx context.Context, t *testing.T, cs kubernetes.Interface, node string) {
	t.Helper()
	evs, err := harness.NodeEvents(ctx, cs, node, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Source.Component == "carve-agent" {
			t.Errorf("Event %s (%s) left behind", e.Name, e.Reason)
		}
	}
}

// TestParseRequests: the counts are the two FlowSchemas' samples, summed
// over priority levels; other FlowSchemas and metrics are left out.
func TestParseRequests(t *testing.T) {
	for _, tc := range []struct {
		name, metrics string
		want          requests
	}{
		{"none", "# HELP x\napiserver_request_total{verb=\"GET\"} 5\n", requests{}},
		{"both", `apiserver_flowcontrol_dispatched_requests_total{flow_schema="carve-bench-live-reads",priority_level="workload-high"} 7
apiserver_flowcontrol_dispatched_requests_total{flow_schema="carve-bench-live-writes",priority_level="workload-high"} 3
apiserver_flowcontrol_dispatched_requests_total{flow_schema="service-accounts",priority_level="workload-low"} 100
apiserver_flowcontrol_current_executing_requests{flow_schema="carve-bench-live-reads",priority_level="workload-high"} 1
`, requests{reads: 7, writes: 3}},
		{"two levels", `apiserver_flowcontrol_dispatched_requests_total{flow_schema="carve-bench-live-writes",priority_level="a"} 2
apiserver_flowcontrol_dispatched_requests_total{flow_schema="carve-bench-live-writes",priority_level="b"} 4
`, requests{writes: 6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseRequests([]byte(tc.metrics))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(requests{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestSidesAlternate: each side makes half the changes, and as many in
// each direction.
func TestSidesAlternate(t *testing.T) {
	for _, n := range []int{2, 20} {
		got := map[[2]int]int{} // side, direction -> changes
		for i := range 2 * n {
			got[[2]int{int(sideOf(i)), i % 2}]++
		}
		want := map[[2]int]int{{0, 0}: n / 2, {0, 1}: n / 2, {1, 0}: n / 2, {1, 1}: n / 2}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%d changes per side: (-want +got):\n%s", n, diff)
		}
	}
}

// TestTargets: every target's file is valid and the profile the node is
// on is the one wanted, with its hash; a label change keeps the file, a
// ConfigMap edit keeps the label.
func TestTargets(t *testing.T) {
	for _, k := range kinds() {
		for _, tr := range []trigger{byLabel, byConfigMap} {
			a, errA := targetFor(k, k.a, tr)
			b, errB := targetFor(k, k.b, tr)
			if errA != nil || errB != nil {
				t.Fatalf("%s by %s: %v %v", k.name, tr, errA, errB)
			}
			if a.hash == "" || a.hash == b.hash {
				t.Errorf("%s by %s: hashes %q and %q, want two", k.name, tr, a.hash, b.hash)
			}
			if (a.file == b.file) != (tr == byLabel) || (a.label == b.label) != (tr == byConfigMap) {
				t.Errorf("%s by %s: the change is not made by the trigger alone", k.name, tr)
			}
			f, err := configs.Parse([]byte(b.file))
			if err != nil {
				t.Fatal(err)
			}
			if got, want := f.ProfileHash(b.label), f.ProfileHash(k.b.name); got != want {
				t.Errorf("%s by %s: the node's profile is not %s", k.name, tr, k.b.name)
			}
		}
	}
}

// TestDeployObjects: the agent gets configs/deploy's ServiceAccount and
// RBAC, moved into the benchmark's namespace and names.
func TestDeployObjects(t *testing.T) {
	root, err := harness.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := deployObjects(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, describe(t, o))
	}
	want := []string{
		"ServiceAccount carve-bench-live/carve-agent",
		"Role carve-bench-live/carve-agent",
		"RoleBinding carve-bench-live/carve-agent -> Role carve-agent for carve-bench-live/carve-agent",
		"ClusterRole carve-bench-live",
		"ClusterRoleBinding carve-bench-live -> ClusterRole carve-bench-live for carve-bench-live/carve-agent",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// describe names an object, and what a binding binds to whom.
func describe(t *testing.T, o runtime.Object) string {
	t.Helper()
	subjects := func(ss []rbacv1.Subject) string {
		var s []string
		for _, x := range ss {
			s = append(s, x.Namespace+"/"+x.Name)
		}
		return strings.Join(s, ",")
	}
	switch o := o.(type) {
	case *corev1.ServiceAccount:
		return "ServiceAccount " + o.Namespace + "/" + o.Name
	case *rbacv1.Role:
		return "Role " + o.Namespace + "/" + o.Name
	case *rbacv1.RoleBinding:
		return "RoleBinding " + o.Namespace + "/" + o.Name + " -> " + o.RoleRef.Kind + " " + o.RoleRef.Name + " for " + subjects(o.Subjects)
	case *rbacv1.ClusterRole:
		return "ClusterRole " + o.Name
	case *rbacv1.ClusterRoleBinding:
		return "ClusterRoleBinding " + o.Name + " -> " + o.RoleRef.Kind + " " + o.RoleRef.Name + " for " + subjects(o.Subjects)
	}
	t.Fatalf("unexpected %T", o)
	return ""
}

// TestTables: the figures land in their columns, with the restart as the
// baseline of each ratio, and the tables pass Check.
func TestTables(t *testing.T) {
	ms := time.Millisecond
	smp := func(sd side, dev, alloc time.Duration, reads, writes float64) sample {
		return sample{side: sd, devices: dev, alloc: alloc, cost: requests{reads: reads, writes: writes}}
	}
	res := &results{
		changes: 2,
		series: []series{{kind: "k", trigger: byLabel, samples: []sample{
			smp(live, 10*ms, 1000*ms, 0, 2), smp(restart, 100*ms, 1500*ms, 4, 5),
			smp(restart, 300*ms, 2500*ms, 4, 5), smp(live, 30*ms, 1200*ms, 0, 2),
		}}},
		steady: requests{reads: 1}, steadyWindow: time.Minute, steadyAge: 10 * time.Second,
	}
	tables := res.tables()
	for _, tb := range tables {
		if err := tb.Check(); err != nil {
			t.Error(err)
		}
	}
	want := [][]string{
		{"k", "node label", "kubelet's devices", "2 + 2", "10.0 ms", "30.0 ms", "100 ms", "300 ms", "0.10x", "0.10x"},
		{"k", "node label", "Node allocatable", "2 + 2", "1.00 s", "1.20 s", "1.50 s", "2.50 s", "0.67x", "0.48x"},
	}
	if diff := cmp.Diff(want, tables[0].Rows); diff != "" {
		t.Errorf("latency rows (-want +got):\n%s", diff)
	}
	wantCost := [][]string{{"k", "node label", "0.0", "2.0", "4.0", "5.0", "0.00x", "0.40x"}}
	if diff := cmp.Diff(wantCost, tables[1].Rows); diff != "" {
		t.Errorf("cost rows (-want +got):\n%s", diff)
	}
	if got := tables[2].Rows[0][1]; got != "60.0" {
		t.Errorf("steady reads per hour: %s, want 60.0 (1 read in a minute)", got)
	}
	if got := tables[2].Rows[1][1:3]; !cmp.Equal(got, []string{"16.0", "0.0"}) {
		t.Errorf("known periods: %v, want 16.0 reads and 0.0 writes per hour", got)
	}
	var goals []report.Goal
	for _, tb := range tables {
		goals = append(goals, tb.Goals...)
	}
	wantGoals := []report.Goal{
		{Name: "a live update reaches the kubelet sooner than a restart (p50)", Met: true, Figures: "live faster in 2 of 2 figures"},
		{Name: "a live repartition costs the API server fewer requests than a restart", Met: true,
			Figures: "live 0.0 reads and 2.0 writes per repartition, a restart 4.0 and 5.0"},
		{Name: "no writes at rest (API requests per node per hour at steady state)", Met: true,
			Figures: "0.0 writes/hour (0.0 writes and 1.0 reads in 1m0s at rest); 60.0 reads/hour, 3.75x the floor of two informers' watch renewals"},
	}
	if diff := cmp.Diff(wantGoals, goals); diff != "" {
		t.Errorf("goals (-want +got):\n%s", diff)
	}
	res.steady.writes = 1
	if g := res.tables()[2].Goals[0]; g.Met || !strings.HasPrefix(g.Figures, "60.0 writes/hour") {
		t.Errorf("steady goal with a write at rest: %+v, want not met, 60.0 writes/hour", g)
	}
}
