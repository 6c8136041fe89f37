package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/carve-dev/carve/internal/buildinfo"
)

// versionCtl runs carvectl on statusNodes' fake cluster; kubeconfig gets
// the --kubeconfig the command passed, asked whether it asked at all.
func versionCtl(t *testing.T, args ...string) (code int, stdout, stderr string, kubeconfig *string, asked *bool) {
	t.Helper()
	kubeconfig, asked = new(string), new(bool)
	newClient := func(kc string, _ time.Duration) (kubernetes.Interface, string, error) {
		*kubeconfig, *asked = kc, true
		return fake.NewClientset(statusNodes(t)...), "https://test", nil
	}
	var out, errb bytes.Buffer
	code = runWith(args, &out, &errb, newClient)
	return code, out.String(), errb.String(), kubeconfig, asked
}

// clientLine is what carvectl version prints of its own build.
func clientLine() string {
	return "Client: carvectl " + buildinfo.Get().String() + "\n"
}

// --client and carvectl --version print carvectl's build alone, without
// asking the cluster.
func TestVersionClient(t *testing.T) {
	for _, args := range [][]string{{"version", "--client"}, {"--version"}} {
		code, stdout, stderr, _, asked := versionCtl(t, args...)
		if code != 0 || stderr != "" || *asked {
			t.Errorf("%v: exit %d, stderr %q, cluster asked %v; want 0, nothing, not asked", args, code, stderr, *asked)
		}
		if diff := cmp.Diff(clientLine(), stdout); diff != "" {
			t.Errorf("%v: stdout (-want +got):\n%s", args, diff)
		}
	}
	code, stdout, _, _, _ := versionCtl(t, "version", "--client", "-o", "json")
	var rep versionReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || code != 0 {
		t.Fatalf("exit %d, %v:\n%s", code, err, stdout)
	}
	if diff := cmp.Diff(versionReport{Client: buildinfo.Get()}, rep); diff != "" {
		t.Errorf("JSON (-want +got):\n%s", diff)
	}
	if strings.Contains(stdout, "agents") {
		t.Errorf("--client JSON names agents:\n%s", stdout)
	}
}

// The agents are grouped by the version their records name, the largest
// group first; nodes whose record names none are "unknown".
func TestVersionAgents(t *testing.T) {
	code, stdout, stderr, kc, _ := versionCtl(t, "version", "--kubeconfig", "/k")
	if code != 0 || *kc != "/k" {
		t.Fatalf("exit %d, kubeconfig %q, stderr %s", code, *kc, stderr)
	}
	want := clientLine() + strings.Join([]string{
		"Agents on https://test: 6 GPU nodes, 3 versions",
		"VERSION  NODES  NAMES",
		"unknown  3      gpu-c gpu-d gpu-f",
		"v1.3.0   2      gpu-a gpu-e",
		"v1.2.0   1      gpu-b",
	}, "\n") + "\n"
	if diff := cmp.Diff(want, stdout); diff != "" {
		t.Errorf("stdout (-want +got):\n%s", diff)
	}

	code, stdout, stderr, _, _ = versionCtl(t, "version", "-o", "json", "--selector", "pool=inference")
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	var rep versionReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, stdout)
	}
	wantRep := versionReport{Client: buildinfo.Get(), Server: "https://test", Agents: []agentVersion{
		{Version: "v1.3.0", Nodes: []string{"gpu-a"}}, {Version: "", Nodes: []string{"gpu-c"}},
	}}
	if diff := cmp.Diff(wantRep, rep); diff != "" {
		t.Errorf("JSON with --selector pool=inference (-want +got):\n%s", diff)
	}
}

// A cluster without GPU nodes still says so, in JSON as an empty list.
func TestVersionNoGPUNodes(t *testing.T) {
	code, stdout, _, _, _ := versionCtl(t, "version", "--selector", "pool=none")
	if want := clientLine() + "Agents on https://test: 0 GPU nodes, 0 versions\n"; code != 0 || stdout != want {
		t.Errorf("exit %d, stdout %q; want 0 and %q", code, stdout, want)
	}
	_, stdout, _, _, _ = versionCtl(t, "version", "--selector", "pool=none", "-o", "json")
	if !strings.Contains(stdout, `"agents": []`) {
		t.Errorf("JSON without GPU nodes lacks an empty agents list:\n%s", stdout)
	}
}

// A row lists the first names of a large group and counts the rest.
func TestVersionManyNames(t *testing.T) {
	names := []string{"n1", "n2", "n3", "n4", "n5", "n6", "n7"}
	tests := []struct {
		names []string
		want  string
	}{
		{names[:1], "n1"},
		{names[:5], "n1 n2 n3 n4 n5"},
		{names, "n1 n2 n3 n4 n5 and 2 more"},
	}
	for _, tt := range tests {
		if got := someNames(tt.names); got != tt.want {
			t.Errorf("someNames(%v) = %q, want %q", tt.names, got, tt.want)
		}
	}
}

// When the cluster cannot be read, carvectl's own version is printed
// first, then an error naming the API server (or the missing kubeconfig)
// and --client, with exit 2.
func TestVersionUnreachable(t *testing.T) {
	code, stdout, stderr := carvectl("version", "--kubeconfig", unreachableKubeconfig(t))
	if code != 2 || stdout != clientLine() {
		t.Errorf("exit %d, stdout %q; want 2 and the client's line", code, stdout)
	}
	for _, s := range []string{"carvectl version: ", "https://127.0.0.1:1", "connection refused", "--client"} {
		if !strings.Contains(stderr, s) {
			t.Errorf("stderr %q lacks %q", stderr, s)
		}
	}
	code, stdout, stderr = carvectl("version", "--kubeconfig", filepath.Join(t.TempDir(), "missing"))
	if code != 2 || stdout != clientLine() || !strings.Contains(stderr, "kubeconfig") {
		t.Errorf("missing kubeconfig: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func TestVersionUsage(t *testing.T) {
	for _, args := range [][]string{{"version", "-o", "yaml"}, {"version", "--selector", "=x"}, {"version", "extra"}, {"version", "--nope"}} {
		if code, _, stderr, _, asked := versionCtl(t, args...); code != 2 || stderr == "" || *asked {
			t.Errorf("%v: exit %d, stderr %q, cluster asked %v", args, code, stderr, *asked)
		}
	}
}
