package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestMainModuleVersionsMatch: every module carve's programs are built from
// has, in the main module, the version the test module selects for it. The
// packages both compile (client-go, grpc, golang.org/x/sys, ...) are then
// compiled once into Go's build cache: make demo builds carve-agent first,
// and the test module's programs and Kubernetes after it reuse that work
// (a cold demo compiles some 600 packages fewer). A mismatch names the
// `go get` that fixes it.
func TestMainModuleVersionsMatch(t *testing.T) {
	src, goTool := testModuleAndGo(t)
	mainMods := goModules(t, goTool, filepath.Dir(src), "list", "-deps", "-f", "{{with .Module}}{{.Path}} {{.Version}}{{end}}", "./cmd/...")
	testMods := goModules(t, goTool, src, "list", "-m", "-f", "{{.Path}} {{.Version}}", "all")
	if len(mainMods) < 20 {
		t.Fatalf("carve's programs use only %d modules: %v", len(mainMods), mainMods)
	}
	if bad := versionMismatches(mainMods, testMods); len(bad) > 0 {
		t.Errorf("the main module builds with other versions than the test module selects; in the repository's root run\n  go get %s\n(then go mod tidy in both)",
			strings.Join(bad, " "))
	}
}

// testModuleAndGo returns the test module's directory and the go command.
func testModuleAndGo(t *testing.T) (src, goTool string) {
	t.Helper()
	src, err := FindSourceDir()
	if err != nil {
		t.Fatal(err)
	}
	if goTool, err = findGo(); err != nil {
		t.Fatal(err)
	}
	return src, goTool
}

// goModules runs the go command in dir and returns its "path version" lines
// as a map; lines without a version (the main modules) are left out.
func goModules(t *testing.T, goTool, dir string, args ...string) map[string]string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), goTool, args...)
	cmd.Dir = dir
	cmd.Env = goBuildEnv()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s in %s: %v", strings.Join(args, " "), dir, err)
	}
	mods := map[string]string{}
	for line := range strings.Lines(string(out)) {
		if path, version, ok := strings.Cut(strings.TrimSpace(line), " "); ok && version != "" {
			mods[path] = version
		}
	}
	return mods
}

func TestVersionMismatches(t *testing.T) {
	mainMods := map[string]string{"golang.org/x/sys": "v0.47.0", "k8s.io/api": "v0.37.2", "only.main/x": "v1.0.0"}
	testMods := map[string]string{"golang.org/x/sys": "v0.49.0", "k8s.io/api": "v0.37.2"}
	want := []string{"golang.org/x/sys@v0.49.0", "only.main/x@none"}
	if diff := cmp.Diff(want, versionMismatches(mainMods, testMods)); diff != "" {
		t.Errorf("versionMismatches (-want +got):\n%s", diff)
	}
}

// versionMismatches returns, sorted, path@version for each module of
// mainMods (path -> version) whose version testMods selects otherwise
// (path@none when it selects none).
func versionMismatches(mainMods, testMods map[string]string) []string {
	var bad []string
	for path, v := range mainMods {
		want, ok := testMods[path]
		switch {
		case !ok:
			bad = append(bad, path+"@none")
		case want != v:
			bad = append(bad, path+"@"+want)
		}
	}
	slices.Sort(bad)
	return bad
}

// TestMakefileUsesBuildFlags: the Makefile builds the demo's programs with
// the flags Kubernetes is built with here, so that they share the build
// cache (with other flags, make demo compiles client-go and the rest
// twice).
func TestMakefileUsesBuildFlags(t *testing.T) {
	src, err := FindSourceDir()
	if err != nil {
		t.Fatal(err)
	}
	makefile, err := os.ReadFile(filepath.Join(filepath.Dir(src), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "CLUSTER_GOFLAGS := "
	var got string
	for line := range strings.Lines(string(makefile)) {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			got = strings.TrimSpace(v)
		}
	}
	if want := strings.Join(BuildFlags(), " "); got != want {
		t.Errorf("the Makefile sets CLUSTER_GOFLAGS to %q, want %q (cluster.BuildFlags)", got, want)
	}
}
