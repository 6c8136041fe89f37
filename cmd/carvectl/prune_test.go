package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	carvev1 "github.com/carve-dev/carve/api/v1"
)

// pruneNodes are the nodes of the prune tests: gpu-a with carve's labels,
// the keys its record lists (GFD's keys carve wrote), and labels of others
// (the operator's pin, GFD's key carve did not write, a paused operand);
// gpu-b with a record that does not decode; cpu with nothing of carve's.
func pruneTestNodes(t *testing.T) []runtime.Object {
	t.Helper()
	rec := carvev1.NodeRecord{Profile: "all-1g", State: carvev1.StateSuccess, Generation: 2,
		Labels: []string{carvev1.LabelApplied, carvev1.LabelState, "nvidia.com/gpu.count", "nvidia.com/mig-1g.10gb.count"}}
	return []runtime.Object{
		gpuNode("gpu-a", map[string]string{
			carvev1.LabelApplied: "all-1g", carvev1.LabelSource: "label", carvev1.LabelState: carvev1.StateSuccess,
			carvev1.LabelProfile: "all-1g", "nvidia.com/gpu.count": "8", "nvidia.com/mig-1g.10gb.count": "56",
			"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", carvev1.OperandLabel("dcgm"): carvev1.OperandPaused,
			"pool": "inference",
		}, annotation(t, rec), nil),
		gpuNode("gpu-b", map[string]string{carvev1.LabelState: carvev1.StateFailed, "nvidia.com/gpu.count": "4"},
			map[string]string{carvev1.AnnotationRecord: `{"profile":`, "other": "x"}, nil),
		gpuNode("cpu", map[string]string{"pool": "inference"}, nil, nil),
	}
}

// TestPrune: carve's labels (its own, and those its record lists) and its
// annotation are removed; everything else stays: the pin, labels of GPU
// feature discovery carve did not write, other annotations, a paused
// operand label (reported with the command that deploys it again). A dry
// run removes nothing and prints the same.
func TestPrune(t *testing.T) {
	wantLabels := map[string]map[string]string{
		"gpu-a": {carvev1.LabelProfile: "all-1g", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
			carvev1.OperandLabel("dcgm"): carvev1.OperandPaused, "pool": "inference"},
		// Without a record only carve.dev/ state labels are known carve's.
		"gpu-b": {"nvidia.com/gpu.count": "4"},
		"cpu":   {"pool": "inference"},
	}
	wantAnnotations := map[string]map[string]string{"gpu-a": nil, "gpu-b": {"other": "x"}, "cpu": nil}
	for _, dryRun := range []bool{false, true} {
		cs := fake.NewClientset(pruneTestNodes(t)...)
		code, stdout, stderr := runCarvectl(t, cs, pruneArgs(dryRun)...)
		if code != 0 {
			t.Fatalf("dry run %v: exit %d, stderr %s", dryRun, code, stderr)
		}
		for _, want := range []string{
			"gpu-a  5 labels (carve.dev/profile.applied, carve.dev/profile.source, carve.dev/state, nvidia.com/gpu.count, " +
				"nvidia.com/mig-1g.10gb.count); annotation carve.dev/partition",
			"gpu-b  1 label (carve.dev/state); annotation carve.dev/partition",
			"cpu", "nothing of carve's",
			"kubectl label node gpu-a nvidia.com/gpu.deploy.dcgm=true --overwrite",
		} {
			if !strings.Contains(stdout, want) {
				t.Errorf("dry run %v: output lacks %q:\n%s", dryRun, want, stdout)
			}
		}
		for _, obj := range pruneTestNodes(t) {
			before := obj.(metav1.Object)
			n, err := cs.CoreV1().Nodes().Get(context.Background(), before.GetName(), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			wantL, wantA := wantLabels[n.Name], wantAnnotations[n.Name]
			if dryRun {
				wantL, wantA = before.GetLabels(), before.GetAnnotations()
			}
			if diff := cmp.Diff(wantL, n.Labels); diff != "" {
				t.Errorf("dry run %v: %s labels (-want +got):\n%s", dryRun, n.Name, diff)
			}
			if diff := cmp.Diff(wantA, n.Annotations, emptyMapsEqual()); diff != "" {
				t.Errorf("dry run %v: %s annotations (-want +got):\n%s", dryRun, n.Name, diff)
			}
		}
	}
}

// TestPruneRefusesWhileTheAgentRuns: a carve DaemonSet in any namespace
// stops prune before it touches a node, unless --force.
func TestPruneRefusesWhileTheAgentRuns(t *testing.T) {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "carve-agent", Namespace: "gpu",
		Labels: map[string]string{"app.kubernetes.io/part-of": "carve"}}}
	objs := append(pruneTestNodes(t), ds)
	cs := fake.NewClientset(objs...)
	code, _, stderr := runCarvectl(t, cs, "prune")
	if code != 2 || !strings.Contains(stderr, "gpu/carve-agent still exists") || !strings.Contains(stderr, "--force") {
		t.Errorf("exit %d, stderr %q; want 2 naming the DaemonSet and --force", code, stderr)
	}
	n, err := cs.CoreV1().Nodes().Get(context.Background(), "gpu-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Labels[carvev1.LabelState] == "" {
		t.Error("a refused prune removed labels")
	}
	if code, _, stderr := runCarvectl(t, cs, "prune", "--force", "--node", "gpu-a"); code != 0 {
		t.Fatalf("--force: exit %d, %s", code, stderr)
	}
	n, err = cs.CoreV1().Nodes().Get(context.Background(), "gpu-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Labels[carvev1.LabelState] != "" {
		t.Error("--force --node gpu-a left carve.dev/state")
	}
	other, err := cs.CoreV1().Nodes().Get(context.Background(), "gpu-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if other.Labels[carvev1.LabelState] == "" {
		t.Error("--node gpu-a pruned gpu-b too")
	}
}

func TestPruneUsage(t *testing.T) {
	cs := fake.NewClientset(pruneTestNodes(t)...)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"prune", "--selector", "=x"}, "--selector"},
		{[]string{"prune", "--selector", "a=b", "--node", "n"}, "give one of them"},
		{[]string{"prune", "extra"}, "unexpected argument"},
		{[]string{"prune", "--node", "absent"}, "get node absent"},
	} {
		if code, _, stderr := runCarvectl(t, cs, tt.args...); code != 2 || !strings.Contains(stderr, tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tt.args, code, stderr, tt.want)
		}
	}
}

func pruneArgs(dryRun bool) []string {
	if dryRun {
		return []string{"prune", "--dry-run"}
	}
	return []string{"prune"}
}

// runCarvectl runs carvectl with cs as its API.
func runCarvectl(t *testing.T, cs kubernetes.Interface, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := runWith(args, &out, &errb, func(string, time.Duration) (kubernetes.Interface, string, error) {
		return cs, "https://test", nil
	})
	return code, out.String(), errb.String()
}

// emptyMapsEqual treats a nil and an empty map as equal.
func emptyMapsEqual() cmp.Option {
	return cmp.FilterValues(func(a, b map[string]string) bool { return len(a) == 0 && len(b) == 0 }, cmp.Comparer(func(_, _ map[string]string) bool { return true }))
}
