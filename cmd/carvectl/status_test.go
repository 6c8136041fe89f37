package main

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	carvev1 "github.com/carve-dev/carve/api/v1"
)

func gpuNode(name string, labels, annotations map[string]string, alloc map[string]int64) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations}}
	n.Status.Allocatable = corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("512Gi"),
	}
	for k, v := range alloc {
		n.Status.Allocatable[corev1.ResourceName(k)] = *resource.NewQuantity(v, resource.DecimalSI)
	}
	return n
}

func annotation(t *testing.T, p carvev1.NodeRecord) map[string]string {
	t.Helper()
	s, err := p.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{carvev1.AnnotationRecord: s}
}

// gpuARecord is the record in gpu-a's annotation.
func gpuARecord() carvev1.NodeRecord {
	return carvev1.NodeRecord{Profile: "balanced", ProfileHash: "abc", State: carvev1.StateSuccess, Generation: 3, AgentVersion: "v1.3.0",
		GPUs: []carvev1.GPURecord{{Index: 0, UUID: "GPU-0", Model: "H100-80GB", MIGMode: "enabled"}}}
}

// onlyFields makes cmp compare nodeStatus rows on the named fields alone.
func onlyFields(names ...string) cmp.Option {
	var ignore []string
	for f := range reflect.TypeFor[nodeStatus]().Fields() {
		if !slices.Contains(names, f.Name) {
			ignore = append(ignore, f.Name)
		}
	}
	return cmpopts.IgnoreFields(nodeStatus{}, ignore...)
}

// statusNodes is a cluster with one node of each kind status must show.
// gpu-a, gpu-c and gpu-f carry no selection in the annotation (an older
// agent, or none): status falls back to the labels. The agents are mid-
// upgrade: gpu-a and gpu-e run v1.3.0, gpu-b v1.2.0, gpu-f an agent older
// than the version field.
func statusNodes(t *testing.T) []runtime.Object {
	t.Helper()
	return []runtime.Object{
		gpuNode("gpu-a", map[string]string{
			carvev1.LabelState: carvev1.StateSuccess, carvev1.LabelApplied: "balanced", carvev1.LabelSource: "rule", "pool": "inference",
		}, annotation(t, gpuARecord()),
			map[string]int64{"nvidia.com/mig-1g.10gb": 14, "nvidia.com/mig-3g.40gb": 2, "nvidia.com/gpu": 4}),
		gpuNode("gpu-b", map[string]string{
			carvev1.LabelState: carvev1.StateFailed, carvev1.LabelApplied: "full", carvev1.LabelSource: "label", carvev1.LabelProfile: "split",
		}, annotation(t, carvev1.NodeRecord{Profile: "full", State: carvev1.StateFailed, Generation: 7, AgentVersion: "v1.2.0",
			Selected:  &carvev1.SelectedProfile{Profile: "split", Source: "label"},
			LastError: "profile split: GPUs 4-7 are not on this node\n(it has GPUs 0-3)"}),
			map[string]int64{"nvidia.com/gpu": 4}),
		gpuNode("gpu-c", map[string]string{
			carvev1.LabelState: carvev1.StateSuccess, carvev1.LabelApplied: "full", carvev1.LabelSource: "window",
			carvev1.LabelWindow: "nightly-training", "pool": "inference",
		}, nil, map[string]int64{"nvidia.com/gpu": 8}),
		gpuNode("gpu-d", map[string]string{carvev1.LabelState: carvev1.StatePending},
			map[string]string{carvev1.AnnotationRecord: `{"profile": "full",`}, nil),
		// The annotation says why, whatever the labels say (here stale).
		// nvidia.com/gpu at zero is what the kubelet keeps for a while
		// after the whole GPUs went into MIG: not shown.
		gpuNode("gpu-e", map[string]string{
			carvev1.LabelState: carvev1.StateDraining, carvev1.LabelApplied: "balanced", carvev1.LabelSource: "rule",
		}, annotation(t, carvev1.NodeRecord{Profile: "balanced", State: carvev1.StateDraining, Generation: 9, AgentVersion: "v1.3.0",
			Selected: &carvev1.SelectedProfile{Profile: "small", Source: "window", Window: "nightly"}}),
			map[string]int64{"nvidia.com/mig-1g.10gb": 4, "nvidia.com/gpu": 0}),
		// Pending on an older agent's annotation: the labels cannot tell
		// what it waits for.
		gpuNode("gpu-f", map[string]string{
			carvev1.LabelState: carvev1.StatePending, carvev1.LabelApplied: "full", carvev1.LabelSource: "rule",
		}, annotation(t, carvev1.NodeRecord{Profile: "full", State: carvev1.StatePending, Generation: 2}),
			map[string]int64{"nvidia.com/gpu": 8}),
		gpuNode("cpu-only", map[string]string{"pool": "inference"}, nil, nil),
	}
}

func TestStatusTable(t *testing.T) {
	// zeroResource matches a resource at zero in a row ("gpu=0").
	zeroResource := regexp.MustCompile(`=0(\s|$)`)
	tests := []struct {
		name      string
		selector  string
		wantLines map[string][]string // node -> substrings of its row
		// wantSelected is the SELECTED column, by node.
		wantSelected map[string]string
		// wantVersion is the VERSION column, by node.
		wantVersion map[string]string
		wantNot     []string
	}{
		{
			name:     "all nodes",
			selector: "",
			wantLines: map[string][]string{
				"gpu-a": {"rule", "balanced", "success", "v1.3.0", "gpu=4 mig-1g.10gb=14 mig-3g.40gb=2"},
				"gpu-b": {"label", "split", "full", "failed", "v1.2.0", "gpu=4", "profile split: GPUs 4-7 are not on this node; (it has GPUs 0-3)"},
				"gpu-c": {"window nightly-training", "full", "success", "gpu=8"},
				"gpu-d": {"pending", "decode carve.dev/partition annotation"},
				"gpu-e": {"window nightly", "balanced", "draining", "v1.3.0", "mig-1g.10gb=4"},
				"gpu-f": {"rule", "full", "pending"},
			},
			wantSelected: map[string]string{
				"gpu-a": "balanced", "gpu-b": "split", "gpu-c": "full", "gpu-d": "-", "gpu-e": "small", "gpu-f": "-",
			},
			wantVersion: map[string]string{
				"gpu-a": "v1.3.0", "gpu-b": "v1.2.0", "gpu-c": "-", "gpu-d": "-", "gpu-e": "v1.3.0", "gpu-f": "-",
			},
			wantNot: []string{"cpu-only"},
		},
		{
			name:     "selector",
			selector: "pool=inference",
			wantLines: map[string][]string{
				"gpu-a": {"balanced"},
				"gpu-c": {"window nightly-training"},
			},
			wantSelected: map[string]string{"gpu-a": "balanced", "gpu-c": "full"},
			wantNot:      []string{"cpu-only", "gpu-b", "gpu-d", "gpu-e", "gpu-f"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset(statusNodes(t)...)
			var out strings.Builder
			if err := status(context.Background(), cs, "https://test", statusQuery{selector: tc.selector, output: "table", namespace: "carve-system", configMap: "carve-profiles", now: time.Now()}, &out); err != nil {
				t.Fatal(err)
			}
			table, _, _ := strings.Cut(out.String(), "\n\nRollout of ")
			lines := strings.Split(strings.TrimRight(table, "\n"), "\n")
			if !strings.HasPrefix(lines[0], "NODE") {
				t.Errorf("header: %q", lines[0])
			}
			if got, want := len(lines)-1, len(tc.wantLines); got != want {
				t.Errorf("%d rows, want %d:\n%s", got, want, out.String())
			}
			if h := strings.Fields(lines[0]); len(h) < 2 || h[1] != "SELECTED" {
				t.Errorf("header %q, want SELECTED second", lines[0])
			}
			rows := map[string]string{}
			versionAt := strings.Index(lines[0], "VERSION")
			for _, l := range lines[1:] {
				f := strings.Fields(l)
				rows[f[0]] = l
				if want, ok := tc.wantSelected[f[0]]; ok && (len(f) < 2 || f[1] != want) {
					t.Errorf("row %q: SELECTED %q, want %q", l, f[1], want)
				}
				if want, ok := tc.wantVersion[f[0]]; ok && (versionAt < 0 || !strings.HasPrefix(l[versionAt:], want+" ")) {
					t.Errorf("row %q: VERSION column (at %d) is not %q", l, versionAt, want)
				}
			}
			for node, subs := range tc.wantLines {
				row, ok := rows[node]
				if !ok {
					t.Errorf("no row for %s:\n%s", node, out.String())
					continue
				}
				if zeroResource.MatchString(row) {
					t.Errorf("row %q shows a resource at zero", row)
				}
				for _, s := range subs {
					if !strings.Contains(row, s) {
						t.Errorf("row %q lacks %q", row, s)
					}
				}
			}
			for _, s := range tc.wantNot {
				if strings.Contains(out.String(), s) {
					t.Errorf("output shows %q:\n%s", s, out.String())
				}
			}
		})
	}
}

func TestStatusJSON(t *testing.T) {
	cs := fake.NewClientset(statusNodes(t)...)
	var out strings.Builder
	if err := status(context.Background(), cs, "https://test", statusQuery{output: "json", namespace: "carve-system", configMap: "carve-profiles", now: time.Now()}, &out); err != nil {
		t.Fatal(err)
	}
	var rows []nodeStatus
	if err := json.Unmarshal([]byte(out.String()), &rows); err != nil {
		t.Fatalf("decode: %v\n%s", err, out.String())
	}
	byNode := map[string]nodeStatus{}
	for _, r := range rows {
		byNode[r.Node] = r
	}
	if len(rows) != 6 {
		t.Errorf("%d rows, want 6 (cpu-only excluded)", len(rows))
	}
	selections := []struct {
		node, selected, source, window string
	}{
		{"gpu-a", "balanced", "rule", ""},               // from the labels: success
		{"gpu-b", "split", "label", ""},                 // from the annotation
		{"gpu-c", "full", "window", "nightly-training"}, // no annotation
		{"gpu-d", "", "", ""},                           // unreadable annotation, no labels
		{"gpu-e", "small", "window", "nightly"},         // the annotation wins
		{"gpu-f", "", "rule", ""},                       // pending: the labels cannot tell
	}
	for _, s := range selections {
		r := byNode[s.node]
		if r.Selected != s.selected || r.Source != s.source || r.Window != s.window {
			t.Errorf("%s: selected %q by %q window %q, want %q by %q window %q", s.node, r.Selected, r.Source, r.Window, s.selected, s.source, s.window)
		}
	}
	var eSelected *carvev1.SelectedProfile
	if e := byNode["gpu-e"]; e.Record != nil {
		eSelected = e.Record.Selected
	}
	if diff := cmp.Diff(&carvev1.SelectedProfile{Profile: "small", Source: "window", Window: "nightly"}, eSelected); diff != "" {
		t.Errorf("gpu-e partition: selected (-want +got):\n%s", diff)
	}
	aRecord := gpuARecord()
	wantA := nodeStatus{Node: "gpu-a", Selected: "balanced", Source: "rule", Applied: "balanced", State: carvev1.StateSuccess,
		Resources: map[string]int64{"gpu": 4, "mig-1g.10gb": 14, "mig-3g.40gb": 2}, Record: &aRecord, AgentVersion: "v1.3.0"}
	if diff := cmp.Diff(wantA, byNode["gpu-a"]); diff != "" {
		t.Errorf("gpu-a (-want +got):\n%s", diff)
	}
	b := byNode["gpu-b"]
	if diff := cmp.Diff(nodeStatus{Pinned: "split", State: carvev1.StateFailed, AgentVersion: "v1.2.0"}, b, onlyFields("Pinned", "State", "AgentVersion")); diff != "" {
		t.Errorf("gpu-b (-want +got):\n%s", diff)
	}
	if !strings.Contains(b.LastError, "GPUs 4-7") {
		t.Errorf("gpu-b: last error %q lacks %q", b.LastError, "GPUs 4-7")
	}
	if diff := cmp.Diff(nodeStatus{Window: "nightly-training"}, byNode["gpu-c"], onlyFields("Window", "Record")); diff != "" {
		t.Errorf("gpu-c (-want +got):\n%s", diff)
	}
	if d := byNode["gpu-d"]; d.AnnotationError == "" || d.Record != nil {
		t.Errorf("gpu-d: annotation error %q, record %+v; want an error and no record", d.AnnotationError, d.Record)
	}
}

// TestStatusCommand: the flags reach the client and the query, a failed
// node is no failure of the command, and bad usage exits 2.
func TestStatusCommand(t *testing.T) {
	var gotKubeconfig string
	newClient := func(kubeconfig string, _ time.Duration) (kubernetes.Interface, string, error) {
		gotKubeconfig = kubeconfig
		return fake.NewClientset(statusNodes(t)...), "https://test", nil
	}
	carvectl := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := runWith(args, &out, &errb, newClient)
		return code, out.String(), errb.String()
	}
	code, stdout, stderr := carvectl("status", "--kubeconfig", "/k", "-o", "json", "--selector", "pool=inference")
	if code != 0 || gotKubeconfig != "/k" {
		t.Fatalf("exit %d, kubeconfig %q, stderr %s", code, gotKubeconfig, stderr)
	}
	var rows []nodeStatus
	if err := json.Unmarshal([]byte(stdout), &rows); err != nil {
		t.Fatalf("%v:\n%s", err, stdout)
	}
	// pool=inference picks gpu-a, gpu-c and cpu-only, which is no GPU node.
	var names []string
	for _, r := range rows {
		names = append(names, r.Node)
	}
	if diff := cmp.Diff([]string{"gpu-a", "gpu-c"}, names); diff != "" {
		t.Errorf("nodes of --selector pool=inference (-want +got):\n%s", diff)
	}
	// A failed node still exits 0.
	if code, stdout, _ := carvectl("status"); code != 0 || !strings.Contains(stdout, "failed") {
		t.Errorf("exit %d:\n%s", code, stdout)
	}
	for _, args := range [][]string{{"status", "-o", "yaml"}, {"status", "--selector", "=x"}, {"status", "extra"}, {"status", "-w", "extra"}} {
		if code, _, stderr := carvectl(args...); code != 2 || stderr == "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, stderr)
		}
	}
}

// TestStatusUnreachable: status and status -w end with exit 2 and an
// error naming the API server and the cause when nothing answers there,
// and with one naming the kubeconfig when there is none.
func TestStatusUnreachable(t *testing.T) {
	kc := unreachableKubeconfig(t)
	for _, args := range [][]string{{"status"}, {"status", "-w"}, {"status", "--watch", "-o", "json"}} {
		code, _, stderr := carvectl(append(args, "--kubeconfig", kc)...)
		// The cause, not a timeout: watching lists first, like status.
		if code != 2 || !strings.Contains(stderr, "https://127.0.0.1:1") || !strings.Contains(stderr, "connection refused") {
			t.Errorf("%v: exit %d, stderr %q", args, code, stderr)
		}
	}
	code, _, stderr := carvectl("status", "--kubeconfig", filepath.Join(t.TempDir(), "missing"))
	if code != 2 || !strings.Contains(stderr, "kubeconfig") {
		t.Errorf("missing kubeconfig: exit %d, stderr %q", code, stderr)
	}
}

// unreachableKubeconfig writes a kubeconfig whose API server,
// https://127.0.0.1:1, refuses connections, and returns its path.
func unreachableKubeconfig(t *testing.T) string {
	t.Helper()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	const cfg = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1"}
contexts:
- name: c
  context: {cluster: c, user: u}
current-context: c
users:
- name: u
  user: {token: t}
`
	if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return kc
}

// TestStatusPinLabel: an agent that pins by another label
// (--profile-label nvidia.com/mig.config) records it, and status shows
// that label's value as the pin, also while a window overrides it.
func TestStatusPinLabel(t *testing.T) {
	tests := []struct {
		name   string
		source string
		want   string
	}{
		{"pinned", "label", "all-1g.10gb"},
		{"a window over the pin", "window", "all-1g.10gb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := gpuNode("gpu-m", map[string]string{
				carvev1.LabelState: carvev1.StateSuccess, carvev1.LabelMIGManagerConfig: "all-1g.10gb", carvev1.LabelProfile: "ignored",
			}, annotation(t, carvev1.NodeRecord{Profile: "all-1g.10gb", State: carvev1.StateSuccess, Generation: 1,
				Selected: &carvev1.SelectedProfile{Profile: "all-1g.10gb", Source: tt.source, PinLabel: carvev1.LabelMIGManagerConfig}}), nil)
			r, ok := statusOf(n)
			if !ok {
				t.Fatal("not a GPU node")
			}
			if r.Pinned != tt.want {
				t.Errorf("pinned %q, want %q", r.Pinned, tt.want)
			}
		})
	}
}

// A held node shows state held and what its agent would do; one whose
// state is not held yet (or is failed) is marked held.
func TestStatusShowsHeld(t *testing.T) {
	held := map[string]string{carvev1.LabelHold: carvev1.HoldTrue, carvev1.LabelApplied: "balanced", carvev1.LabelSource: "label"}
	cs := fake.NewClientset(
		gpuNode("gpu-h", merged(held, map[string]string{carvev1.LabelState: carvev1.StateHeld}),
			annotation(t, carvev1.NodeRecord{Profile: "balanced", State: carvev1.StateHeld, Generation: 2,
				Waiting: "its hold to be removed (carve.dev/hold=true); it would then apply profile small (label): 9 ops on GPU 0, disruptive"}),
			map[string]int64{"nvidia.com/gpu": 1}),
		gpuNode("gpu-i", merged(held, map[string]string{carvev1.LabelState: carvev1.StateFailed}), nil, map[string]int64{"nvidia.com/gpu": 1}),
		gpuNode("gpu-j", map[string]string{carvev1.LabelHold: "yes", carvev1.LabelState: carvev1.StateSuccess}, nil, map[string]int64{"nvidia.com/gpu": 1}),
	)
	var out strings.Builder
	if err := status(context.Background(), cs, "https://test", statusQuery{output: "table", namespace: "carve-system", configMap: "carve-profiles", now: time.Now()}, &out); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"gpu-h": {" held ", "waiting for its hold to be removed (carve.dev/hold=true); it would then apply profile small (label): 9 ops on GPU 0, disruptive"},
		"gpu-i": {" failed (held) "},
		"gpu-j": {" success "},
	}
	for l := range strings.SplitSeq(out.String(), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		for _, s := range want[f[0]] {
			if !strings.Contains(l, s) {
				t.Errorf("row %q lacks %q", l, s)
			}
		}
		if f[0] == "gpu-j" && strings.Contains(l, "held") {
			t.Errorf("row %q: hold=yes holds nothing, shown held", l)
		}
	}
}

func merged(a, b map[string]string) map[string]string {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}
