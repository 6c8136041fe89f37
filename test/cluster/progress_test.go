package cluster

// Tests of the Kubernetes build's progress report; they need neither root
// nor a Kubernetes build (a fake go command stands in for the real one).

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/carve-dev/carve/internal/testclock"
)

// lockedBuffer is a log that tests read while the progress writes to it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestBuildProgressFollowsGoBuildOutput(t *testing.T) {
	clock := testclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var log strings.Builder
	p := newBuildProgress(&log, clock.Now, "Kubernetes "+DefaultKubernetesVersion, map[string]string{
		"k8s.io/kubernetes/cmd/kubectl": "kubectl",
		"k8s.io/kubernetes/cmd/kubelet": "kubelet",
	})
	status := func() string {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.statusLocked()
	}
	if got, want := status(), "  still building Kubernetes "+DefaultKubernetesVersion+": 0s, 0 packages compiled"; got != want {
		t.Errorf("status before any output = %q, want %q", got, want)
	}

	write := func(s string) {
		t.Helper()
		if n, err := p.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	write("go: downloading k8s.io/api v0.34.4\ngo: downloading k8s.io/apimachinery v0.34.4\n")
	clock.Add(5 * time.Second)
	if got, want := status(), "  still building Kubernetes "+DefaultKubernetesVersion+": 5s, 2 modules downloaded"; got != want {
		t.Errorf("status while downloading = %q, want %q", got, want)
	}
	// Lines arrive in pieces; a package counts once its line is complete.
	write("internal/goarch\nrunt")
	if compiled, _ := p.counts(); compiled != 1 {
		t.Errorf("compiled = %d after one complete line, want 1", compiled)
	}
	write("ime\n# k8s.io/some/cgo\nwarning.c:1:2: warning: something [-Wfoo]\n    1 | x\n")
	clock.Add(90 * time.Second)
	write("k8s.io/kubernetes/cmd/kubectl\n")
	p.setTotal(10)
	if got, want := status(), "  still building Kubernetes "+DefaultKubernetesVersion+": 1m35s, 3 of 10 packages compiled, 30% (latest k8s.io/kubernetes/cmd/kubectl)"; got != want {
		t.Errorf("status = %q, want %q", got, want)
	}
	write("k8s.io/kubernetes/cmd/kubelet") // no newline: the last line
	p.Flush()
	if compiled, total := p.counts(); compiled != 4 || total != 10 {
		t.Errorf("counts = %d, %d, want 4, 10", compiled, total)
	}
	if got, want := status(), "  still building Kubernetes "+DefaultKubernetesVersion+": 1m35s, 4 of 10 packages compiled, 40%, linking"; got != want {
		t.Errorf("status once every main package is reached = %q, want %q", got, want)
	}

	wantLog := "  downloading modules (first k8s.io/api v0.34.4)\n" +
		"  kubectl: compiling its main package, then linking (1m35s)\n" +
		"  kubelet: compiling its main package, then linking (1m35s)\n"
	if log.String() != wantLog {
		t.Errorf("log:\n%s\nwant:\n%s", log.String(), wantLog)
	}
	wantOut := "go: downloading k8s.io/api v0.34.4\ngo: downloading k8s.io/apimachinery v0.34.4\n" +
		"# k8s.io/some/cgo\nwarning.c:1:2: warning: something [-Wfoo]\n    1 | x"
	if got := p.output(); got != wantOut {
		t.Errorf("output:\n%s\nwant (the lines that name no package):\n%s", got, wantOut)
	}
}

func TestBuildProgressKeepsTheTail(t *testing.T) {
	p := newBuildProgress(&strings.Builder{}, time.Now, "Kubernetes "+DefaultKubernetesVersion, nil)
	for i := range buildTailLines + 50 {
		_, _ = p.Write([]byte("error line " + strings.Repeat("x", i%3) + "\n"))
	}
	if n := len(strings.Split(p.output(), "\n")); n != buildTailLines {
		t.Errorf("kept %d lines, want %d", n, buildTailLines)
	}
}

func TestBuildProgressHeartbeat(t *testing.T) {
	clock := testclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	log := &lockedBuffer{}
	p := newBuildProgress(log, clock.Now, "Kubernetes "+DefaultKubernetesVersion, nil)
	tick := make(chan time.Time)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.heartbeat(tick, stop)
	}()
	_, _ = p.Write([]byte("fmt\n"))
	clock.Add(20 * time.Second)
	tick <- clock.Now()
	_, _ = p.Write([]byte("os\n"))
	clock.Add(20 * time.Second)
	tick <- clock.Now()
	close(stop)
	<-done
	want := "  still building Kubernetes " + DefaultKubernetesVersion + ": 20s, 1 packages compiled (latest fmt)\n" +
		"  still building Kubernetes " + DefaultKubernetesVersion + ": 40s, 2 packages compiled (latest os)\n"
	if got := log.String(); got != want {
		t.Errorf("heartbeats:\n%s\nwant:\n%s", got, want)
	}
}

func TestCountPackages(t *testing.T) {
	out := "unsafe\ninternal/goarch\nruntime\n\nk8s.io/kubernetes/cmd/kubectl\n"
	if n := countPackages(out); n != 3 {
		t.Errorf("countPackages = %d, want 3 (unsafe is never compiled)", n)
	}
}

// fakeGo writes a stand-in for the go command: `list` prints packages,
// `build` prints what `go build -v` would, slowly, then runs failBuild
// (a shell command; "true" for success) and creates the binaries in the
// -o directory.
func fakeGo(t *testing.T, failBuild string) string {
	t.Helper()
	script := `#!/bin/sh
case "$1" in
list)
	printf 'unsafe\nfmt\nk8s.io/a\n'
	echo "` + kubeMainPackage + `"
	;;
build)
	[ "$2" = -v ] || { echo "fake go: want -v first, got $2" >&2; exit 3; }
	out=
	while [ $# -gt 0 ]; do
		if [ "$1" = -o ]; then out=$2; fi
		shift
	done
	echo "go: downloading k8s.io/a v1.0.0" >&2
	sleep 0.2
	echo fmt >&2
	echo k8s.io/a >&2
	sleep 0.2
	echo "` + kubeMainPackage + `" >&2; : > "${out}` + kubeBinary + `"
	sleep 0.2
	` + failBuild + `
	;;
*)
	echo "fake go: unexpected $*" >&2
	exit 3
	;;
esac
`
	path := filepath.Join(t.TempDir(), "go")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestBuildKubernetesReportsProgress(t *testing.T) {
	goTool := fakeGo(t, "true")
	out := t.TempDir()
	log := &lockedBuffer{}
	if err := buildKubernetes(context.Background(), log, goTool, fakeKubeBuild(t), out, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	got := log.String()
	t.Logf("log:\n%s", got)
	for _, want := range []string{
		"  downloading modules (first k8s.io/a v1.0.0)\n",
		"  still building Kubernetes " + DefaultKubernetesVersion + ": ",
		", linking\n",
		"  compiled 3 packages\n",
		"  " + kubeBinary + ": compiling its main package, then linking (",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("log lacks %q:\n%s", want, got)
		}
	}
	// Every component's name runs the one binary.
	for _, name := range kubeComponents() {
		target, err := os.Readlink(filepath.Join(out, name))
		if err != nil || target != kubeBinary {
			t.Errorf("%s links to %q (%v), want %s", name, target, err, kubeBinary)
		}
	}
}

// fakeKubeBuild is the build of the components that buildKubernetesRelease
// makes for DefaultKubernetesVersion, in a directory of its own.
func fakeKubeBuild(t *testing.T) goBuild {
	t.Helper()
	return goBuild{
		what:    "Kubernetes " + DefaultKubernetesVersion,
		dir:     t.TempDir(),
		mains:   map[string]string{kubeMainPackage: kubeBinary},
		tags:    kubeBuildTag,
		ldflags: buildLDFlags(DefaultKubernetesVersion),
	}
}

func TestBuildKubernetesFailureShowsCompilerOutput(t *testing.T) {
	goTool := fakeGo(t, `echo "# k8s.io/a" >&2; echo "a.go:1:2: undefined: x" >&2; exit 1`)
	err := buildKubernetes(context.Background(), &lockedBuffer{}, goTool, fakeKubeBuild(t), t.TempDir(), time.Hour)
	if err == nil {
		t.Fatal("the build failed but buildKubernetes did not")
	}
	msg := err.Error()
	if !strings.Contains(msg, "# k8s.io/a\na.go:1:2: undefined: x") {
		t.Errorf("error lacks the compiler output: %v", err)
	}
	if strings.Contains(msg, "\nfmt\n") || strings.Contains(msg, kubeMainPackage) {
		t.Errorf("error lists compiled packages: %v", err)
	}
}
