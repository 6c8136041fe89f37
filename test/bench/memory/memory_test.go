package memory

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/test/cluster"
	"github.com/carve-dev/carve/test/harness"
)

// TestMeasureShort runs the measurement in short mode on the local
// cluster and checks that its readings are plausible, never their size.
func TestMeasureShort(t *testing.T) {
	c := cluster.ForTest(t, cluster.Options{NodeName: "bench-memory"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root, err := harness.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	bin, err := harness.BuildAgent(ctx, root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	res, err := Measure(ctx, Options{Cluster: c, Agent: bin, Short: true, Log: &log})
	t.Log(log.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Agent) != 3 {
		t.Fatalf("%d agent readings, want 3", len(res.Agent))
	}
	if len(res.DRA) != 2 {
		t.Fatalf("%d DRA readings, want 2", len(res.DRA))
	}
	for _, r := range append(append(res.Agent, res.DRA...), res.Floor, res.NarrowFloor, res.DRAFloor) {
		checkReading(t, r)
	}
	if res.DRADevices != DRADenseDevices {
		t.Errorf("ResourceSlice devices %d at the dense state with DRA, want %d", res.DRADevices, DRADenseDevices)
	}
	if res.DenseAllocatable != DenseDevices {
		t.Errorf("Node allocatable %s = %d at the dense state, want %d", DenseResource, res.DenseAllocatable, DenseDevices)
	}
	if res.NodeJSON == 0 || res.NodeManagedFieldsJSON == 0 || res.ConfigMapJSON == 0 || res.NodeManagedFieldsJSON >= res.NodeJSON {
		t.Errorf("object sizes: node %d (managedFields %d), ConfigMap %d", res.NodeJSON, res.NodeManagedFieldsJSON, res.ConfigMapJSON)
	}
	for _, tb := range Tables(res, true) {
		if err := tb.Check(); err != nil {
			t.Error(err)
		}
		t.Log("\n" + tb.Markdown())
	}
	checkNodeClean(ctx, t, c)
}

// checkReading checks that a reading's parts add up.
func checkReading(t *testing.T, r Reading) {
	t.Helper()
	m := r.Settled
	if m.RSS == 0 || m.Peak < m.RSS || r.Max < m.RSS || m.Threads == 0 {
		t.Errorf("%s: RSS %d, peak %d, max %d, threads %d", r.State, m.RSS, m.Peak, r.Max, m.Threads)
	}
	// status and smaps_rollup are read a moment apart, and status's
	// counters are per-thread caches: allow 10%.
	if sum := m.Anon + m.File; !near(sum, m.RSS, 0.10) {
		t.Errorf("%s: anonymous %d + file-backed %d = %d, RSS %d", r.State, m.Anon, m.File, sum, m.RSS)
	}
	// The binary's private data pages written since count as anonymous.
	if m.Binary == 0 || m.Binary+m.Libs > m.RSS || m.File > m.Binary+m.Libs || m.Binary > m.BinaryMapped+m.BinaryMapped/10 {
		t.Errorf("%s: binary %d (of %d mapped) + libraries %d, file-backed %d, RSS %d", r.State, m.Binary, m.BinaryMapped, m.Libs, m.File, m.RSS)
	}
	g := r.Go
	if g.HeapInuse == 0 || g.HeapAlloc == 0 || g.HeapAlloc > g.HeapInuse || g.Stacks == 0 || g.Goroutines == 0 {
		t.Errorf("%s: Go runtime %+v", r.State, g)
	}
	if g.HeapInuse+g.Stacks > m.Anon*11/10 {
		t.Errorf("%s: heap %d + stacks %d above the anonymous RSS %d", r.State, g.HeapInuse, g.Stacks, m.Anon)
	}
}

// near reports whether a is within frac of b.
func near(a, b uint64, frac float64) bool {
	d := float64(a) - float64(b)
	return d <= frac*float64(b) && -d <= frac*float64(b)
}

// checkNodeClean checks that the run left no ConfigMap, no label or
// annotation of carve's and no profile label.
func checkNodeClean(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	n, err := c.Clientset().CoreV1().Nodes().Get(ctx, c.NodeName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if owned := harness.OwnedLabels(n); len(owned) > 0 {
		t.Errorf("labels left on the node: %v", owned)
	}
	if _, ok := n.Labels[carvev1.LabelProfile]; ok {
		t.Errorf("label %s left on the node", carvev1.LabelProfile)
	}
	if _, ok := n.Annotations[carvev1.AnnotationRecord]; ok {
		t.Errorf("annotation %s left on the node", carvev1.AnnotationRecord)
	}
	_, err = c.Clientset().CoreV1().ConfigMaps(cmNamespace).Get(ctx, cmName, metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("ConfigMap %s/%s: %v, want it deleted", cmNamespace, cmName, err)
	}
}
