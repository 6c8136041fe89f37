package agent

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/google/go-cmp/cmp"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/configs"
)

// hostileFiles are profile files meant to hurt: each one made the agent's
// memory or time grow with the square of its size, or more, before
// (a 90 KB file of overlapping entries grew an agent to 14 GiB).
func hostileFiles() map[string]string {
	repeat := func(head, item string, n int) string {
		var b strings.Builder
		b.WriteString(head)
		for i := range n {
			b.WriteString(strings.ReplaceAll(item, "$i", fmt.Sprint(i)))
		}
		return b.String()
	}
	bomb := "version: v1\nprofiles: {a: []}\nx0: &x0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
	for i := 1; i < 9; i++ {
		bomb += fmt.Sprintf("x%d: &x%d [*x%d, *x%d, *x%d, *x%d, *x%d, *x%d, *x%d, *x%d, *x%d, *x%d]\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	return map[string]string{
		"overlapping model filters": repeat("version: v1\ndefaultProfile: p\nprofiles:\n  p:\n",
			"    - gpus: all\n      model: H100-80GB\n      mig: {1g.10gb: 1}\n    - gpus: all\n      model: NVIDIA H100 80GB HBM3\n      mig: {1g.10gb: 1}\n", 1200),
		"over the size limit": "version: v1\nprofiles: {a: []}\n#" + strings.Repeat("x", configs.MaxFileBytes),
		"an alias bomb":       bomb,
		"thousands of windows": repeat("version: v1\ndefaultProfile: p\nprofiles:\n  p: [{gpus: all, mig: {1g.10gb: 2, 2g.20gb: 1, 3g.40gb: 1}, timeSlicing: {replicas: {1g.10gb: 2}}}]\n  q: []\nwindows:\n",
			"  - {name: w$i, schedule: \"0 * * * *\", duration: 30m, profile: q, nodeSelector: {never: \"true\"}}\n", 2500),
	}
}

// The agent fed a hostile ConfigMap: it reads it through the same path as
// from the API server, rejects it (state failed) or takes it, leaves the
// GPUs and the advertised devices as they were, and allocates a bounded
// amount of memory doing so, well below the DaemonSet's 256 MiB limit.
func TestReconcileHostileConfigMapBounded(t *testing.T) {
	// Bytes allocated by the pass in all (garbage included): half the
	// DaemonSet's memory limit. A pass allocates about 40 MiB at most here,
	// twice that under the race detector; before, gigabytes.
	const budget = 128 << 20
	for name, src := range hostileFiles() {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, "h100-80gb*2")
			h.reconcile(h.parse(testProfiles), nil, "balanced")
			before, beforeRes := layout(h.gpus()), h.adv.counts()
			h.m.ResetOpLog()
			c := &Controller{NodeName: "node-1", ConfigMapNamespace: "carve-system", ConfigMapName: "carve-profiles"}
			store := cache.NewStore(cache.MetaNamespaceKeyFunc)
			if err := store.Add(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "carve-system", Name: "carve-profiles"}, Data: map[string]string{ConfigKey: src}}); err != nil {
				t.Fatal(err)
			}
			delete(h.labels, carvev1.LabelProfile)

			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			f, _, cfgErr := c.loadConfig(store)
			res, err := h.r.Reconcile(context.Background(), Input{Config: f, ConfigErr: cfgErr, Labels: h.labels, Now: h.now, Previous: h.prev})
			runtime.ReadMemStats(&ms1)
			if err != nil {
				t.Fatal(err)
			}
			if alloc := ms1.TotalAlloc - ms0.TotalAlloc; alloc > budget {
				t.Errorf("one pass allocated %d MiB, more than %d MiB", alloc>>20, budget>>20)
			} else {
				t.Logf("one pass allocated %d MiB", alloc>>20)
			}
			want := carvev1.StateFailed
			if name == "thousands of windows" { // valid, and none applies to this node
				want = carvev1.StateSuccess
			}
			if res.State != want {
				t.Errorf("state %s (%v), want %s", res.State, res.Err, want)
			}
			if len(res.Annotation.LastError) > 4096 {
				t.Errorf("the annotation's error is %d bytes; it must stay short", len(res.Annotation.LastError))
			}
			if ops := h.mutations(); len(ops) != 0 {
				t.Errorf("GPUs touched: %v", ops)
			}
			if got := layout(h.gpus()); got != before {
				t.Errorf("layout %s, want %s", got, before)
			}
			if diff := cmp.Diff(beforeRes, h.adv.counts()); diff != "" {
				t.Errorf("advertised devices changed (-before +after):\n%s", diff)
			}
		})
	}
}
