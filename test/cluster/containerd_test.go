package cluster

// Tests of how containerd is built; they need neither root nor a build.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestContainerdVersionIsTheTestModules: the containerd the cluster says
// it runs is the one the test module requires and builds.
func TestContainerdVersionIsTheTestModules(t *testing.T) {
	src, goTool := testModuleAndGo(t)
	mods := goModules(t, goTool, src, "list", "-m", "-f", "{{.Path}} {{.Version}}", containerdModule)
	if got := mods[containerdModule]; got != ContainerdVersion {
		t.Errorf("test/go.mod requires %s %s, but ContainerdVersion is %s", containerdModule, got, ContainerdVersion)
	}
}

func TestContainerdStampNamesTheRecipe(t *testing.T) {
	s := containerdStamp()
	for _, want := range []string{"containerd=" + ContainerdVersion, "recipe=" + containerdRecipe, "tags=" + containerdBuildTags} {
		if !strings.Contains(s, want) {
			t.Errorf("stamp %q lacks %q", s, want)
		}
	}
	if f := containerdLDFlags(); !strings.Contains(f, containerdModule+"/version.Version="+ContainerdVersion) {
		t.Errorf("ldflags %q do not stamp the version", f)
	}
}

// TestHostPackagesLeaveContainerdOut: containerd is built, not installed;
// runc still comes from the host.
func TestHostPackagesLeaveContainerdOut(t *testing.T) {
	pkgs := HostPackages()
	if slices.Contains(pkgs, "containerd") {
		t.Errorf("HostPackages() = %v installs Debian's containerd", pkgs)
	}
	if !slices.Contains(pkgs, "runc") {
		t.Errorf("HostPackages() = %v lacks runc", pkgs)
	}
}

// TestEnsureBuiltBuildsOnce: concurrent callers get one build; a later
// call finds the binaries; a new stamp rebuilds; a failed build installs
// nothing.
func TestEnsureBuiltBuildsOnce(t *testing.T) {
	t.Setenv("CARVE_CLUSTER_REBUILD", "")
	dir := t.TempDir()
	var mu sync.Mutex
	builds := 0
	spec := func(stamp string, fail bool) cachedBuild {
		return cachedBuild{what: "test programs", dir: dir, stamp: stamp, bins: []string{"a", "b"},
			build: func(_ context.Context, out string) error {
				mu.Lock()
				builds++
				mu.Unlock()
				if fail {
					return errors.New("compiler error")
				}
				for _, b := range []string{"a", "b"} {
					if err := os.WriteFile(filepath.Join(out, b), []byte(stamp), 0o755); err != nil {
						return err
					}
				}
				return nil
			}}
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if err := ensureBuilt(ctx, &lockedBuffer{}, spec("one\n", false)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := ensureBuilt(ctx, &lockedBuffer{}, spec("one\n", false)); err != nil {
		t.Fatal(err)
	}
	if builds != 1 {
		t.Errorf("%d builds, want 1", builds)
	}
	if err := ensureBuilt(ctx, &lockedBuffer{}, spec("two\n", true)); err == nil {
		t.Fatal("a failed build was not reported")
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "bin", "a")); string(data) != "one\n" {
		t.Errorf("after a failed build bin/a holds %q, want the old build's", data)
	}
	if err := ensureBuilt(ctx, &lockedBuffer{}, spec("two\n", false)); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "bin", "a")); string(data) != "two\n" || builds != 3 {
		t.Errorf("after a new stamp: bin/a = %q after %d builds, want the new build after 3", data, builds)
	}
}

// TestRequiredConditions: RuntimeReady and NetworkReady decide; the
// deprecation condition containerd 2 adds on a cgroup v1 host does not.
func TestRequiredConditions(t *testing.T) {
	cond := func(typ string, ok bool) *runtimeapi.RuntimeCondition {
		return &runtimeapi.RuntimeCondition{Type: typ, Status: ok, Reason: "R", Message: "M"}
	}
	deprecated := cond("ContainerdHasNoDeprecationWarnings", false)
	if err := requiredConditions([]*runtimeapi.RuntimeCondition{cond(runtimeapi.RuntimeReady, true), cond(runtimeapi.NetworkReady, true), deprecated}); err != nil {
		t.Errorf("ready runtime with a deprecation warning: %v", err)
	}
	for _, conds := range [][]*runtimeapi.RuntimeCondition{
		{cond(runtimeapi.RuntimeReady, true), deprecated},
		{cond(runtimeapi.RuntimeReady, true), cond(runtimeapi.NetworkReady, false)},
		{cond(runtimeapi.RuntimeReady, false), cond(runtimeapi.NetworkReady, true)},
	} {
		if err := requiredConditions(conds); err == nil {
			t.Errorf("conditions %v taken as ready", conds)
		}
	}
}
