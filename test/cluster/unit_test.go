package cluster

// Tests of the pieces that need neither root nor a cluster; they run
// everywhere, also where TestCluster skips.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

func TestLockSerializesAndRecordsHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	ctx := context.Background()
	l1, prev, err := acquireLock(ctx, path, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if prev.PID != 0 {
		t.Errorf("fresh lock has a previous holder: %+v", prev)
	}
	rec := lockRecord{PID: os.Getpid(), Dir: "/tmp/x", NodeName: "n", Owner: "test", Started: time.Now()}
	rec.PIDStart, _ = procStartTime(os.Getpid())
	if err := l1.write(rec); err != nil {
		t.Fatal(err)
	}
	info, ok, err := Current(path)
	if err != nil || !ok || !info.Running || info.Dir != "/tmp/x" || info.NodeName != "n" {
		t.Fatalf("Current = %+v, %v, %v", info, ok, err)
	}

	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	var waited []string
	if _, _, err := acquireLock(short, path, func(f string, _ ...any) { waited = append(waited, f) }); err == nil {
		t.Fatal("second acquire succeeded while the lock was held")
	} else if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("second acquire: %v, want a deadline error", err)
	}
	if len(waited) != 1 {
		t.Errorf("waiting was reported %d times, want once", len(waited))
	}

	// A holder that dies without releasing leaves its record to the next.
	if err := l1.f.Close(); err != nil {
		t.Fatal(err)
	}
	l2, prev, err := acquireLock(ctx, path, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if prev.Dir != "/tmp/x" {
		t.Errorf("previous record = %+v, want the dead holder's", prev)
	}
	if err := l2.release(); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := Current(path); ok || err != nil {
		t.Errorf("after release Current reports a cluster (%v, %v)", ok, err)
	}
}

func TestUnescapeMountPath(t *testing.T) {
	for in, want := range map[string]string{
		`/tmp/a\040b`:  "/tmp/a b",
		`/tmp/plain`:   "/tmp/plain",
		`/x\011y\134z`: "/x\ty\\z",
	} {
		if got := unescapeMountPath(in); got != want {
			t.Errorf("unescapeMountPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestWithin(t *testing.T) {
	if !within("/tmp/c/kubelet/pods", "/tmp/c") || !within("/tmp/c", "/tmp/c") {
		t.Error("paths below the root not recognised")
	}
	if within("/tmp/cc", "/tmp/c") || within("/tmp", "/tmp/c") {
		t.Error("paths beside or above the root taken as below it")
	}
}

func TestRemoveTreeRefusesForeignDirectories(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "precious"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := removeTree(dir); err == nil {
		t.Fatal("removeTree removed a directory without the marker")
	}
	if _, err := os.Stat(filepath.Join(dir, "precious")); err != nil {
		t.Fatalf("file gone: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, markerFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := removeTree(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("marked directory not removed: %v", err)
	}
}

func TestKubeletConfig(t *testing.T) {
	p := newPaths("/tmp/c")
	data, err := kubeletConfig(p, ports{kubelet: 1234, kubeletHealthz: 1235}, "/carve-cluster-x")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{
		"kind":                     "KubeletConfiguration",
		"address":                  "127.0.0.1",
		"healthzBindAddress":       "127.0.0.1",
		"cgroupDriver":             "cgroupfs",
		"cgroupRoot":               "/carve-cluster-x",
		"failCgroupV1":             false,
		"failSwapOn":               false,
		"containerRuntimeEndpoint": "unix:///tmp/c/run/containerd.sock",
		"port":                     float64(1234),
	} {
		if m[k] != want {
			t.Errorf("%s = %v, want %v", k, m[k], want)
		}
	}
	if _, ok := m["readOnlyPort"]; ok {
		t.Errorf("readOnlyPort set: %v", m["readOnlyPort"])
	}
}

// TestContainerdConfig: the configuration is in containerd 2's format
// (version 3, the CRI plugin split into images and runtime), keeps
// containerd to the cluster's root, and gives it the cluster's CDI spec
// directory only.
func TestContainerdConfig(t *testing.T) {
	cfg := containerdConfig(newPaths("/tmp/c"), "/usr/lib/cni")
	for _, want := range []string{
		"\nversion = 3\n",
		`root = "/tmp/c/containerd/root"`,
		`state = "/tmp/c/containerd/state"`,
		`address = "/tmp/c/run/containerd.sock"`,
		`address = "/tmp/c/run/containerd.sock.ttrpc"`,
		`[plugins."io.containerd.cri.v1.images".pinned_images]` + "\n    sandbox = \"" + BusyboxImage + `"`,
		`restrict_oom_score_adj = true`,
		`cdi_spec_dirs = ["/tmp/c/cdi"]`,
		`[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]` + "\n      runtime_type = \"io.containerd.runc.v2\"",
		`[plugins."io.containerd.cri.v1.runtime".cni]` + "\n    bin_dirs = [\"/usr/lib/cni\"]\n    conf_dir = \"/tmp/c/cni/net.d\"",
		`stream_server_address = "127.0.0.1"`,
		`[plugins."io.containerd.nri.v1.nri"]` + "\n  disable = true",
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("containerd config lacks %q:\n%s", want, cfg)
		}
	}
	// Keys containerd 2 no longer reads (it would ignore them silently).
	for _, gone := range []string{"sandbox_image", "enable_cdi", "bin_dir =", `"io.containerd.grpc.v1.cri".containerd`, `"io.containerd.grpc.v1.cri".cni`, "/etc/cdi", "/var/run/cdi"} {
		if strings.Contains(cfg, gone) {
			t.Errorf("containerd config has %q, which containerd %s does not read or the cluster must not use", gone, ContainerdVersion)
		}
	}
}

func TestBuildLDFlags(t *testing.T) {
	f := buildLDFlags(DefaultKubernetesVersion)
	for _, want := range []string{"-s -w", "k8s.io/component-base/version.gitVersion=" + DefaultKubernetesVersion, "k8s.io/component-base/version.gitMinor=37"} {
		if !strings.Contains(f, want) {
			t.Errorf("ldflags %q lack %q", f, want)
		}
	}
}

// TestKubernetesVersionMatchesGoMod: the default release is the one
// test/go.mod builds, with every staging module pinned to its published
// twin, and the main module's client libraries are of the same release.
func TestKubernetesVersionMatchesGoMod(t *testing.T) {
	data, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatalf("read test/go.mod: %v", err)
	}
	mod := string(data)
	if !strings.Contains(mod, "k8s.io/kubernetes "+DefaultKubernetesVersion) {
		t.Errorf("test/go.mod does not require k8s.io/kubernetes %s", DefaultKubernetesVersion)
	}
	staging := stagingVersion(DefaultKubernetesVersion)
	for _, m := range []string{"k8s.io/api", "k8s.io/client-go", "k8s.io/kubelet", "k8s.io/apiserver", "k8s.io/streaming", "k8s.io/cri-streaming"} {
		if !strings.Contains(mod, m+" => "+m+" "+staging) {
			t.Errorf("test/go.mod does not pin %s to %s", m, staging)
		}
	}
	main, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatalf("read the main go.mod: %v", err)
	}
	for _, m := range []string{"k8s.io/api", "k8s.io/apimachinery", "k8s.io/client-go", "k8s.io/kubelet"} {
		if !strings.Contains(string(main), m+" "+staging) {
			t.Errorf("go.mod does not require %s %s", m, staging)
		}
	}
}

// TestSkipReason: end-to-end tests are skipped only when CARVE_E2E asks for
// it; where they cannot run, they fail saying why.
func TestSkipReason(t *testing.T) {
	noRoot := errors.New("a local cluster needs root")
	tests := []struct {
		env         string
		unavailable error
		skip, fail  bool
		words       string
	}{
		{env: "", unavailable: nil},
		{env: "1", unavailable: nil},
		{env: "", unavailable: noRoot, fail: true, words: "sudo -E make test"},
		{env: "1", unavailable: noRoot, fail: true, words: "CARVE_E2E=0"},
		{env: "yes", unavailable: noRoot, fail: true, words: "needs root"},
		{env: "0", unavailable: noRoot, skip: true, words: "as asked"},
		{env: "false", unavailable: nil, skip: true, words: "as asked"},
		{env: "no", unavailable: nil, skip: true, words: "as asked"},
	}
	for _, tt := range tests {
		reason, fail := skipReason(tt.env, tt.unavailable)
		if fail != tt.fail || (reason != "") != (tt.skip || tt.fail) {
			t.Errorf("CARVE_E2E=%q, unavailable %v: reason %q, fail %v; want skip %v, fail %v", tt.env, tt.unavailable, reason, fail, tt.skip, tt.fail)
		}
		if !strings.Contains(reason, tt.words) {
			t.Errorf("CARVE_E2E=%q: reason %q lacks %q", tt.env, reason, tt.words)
		}
	}
}
