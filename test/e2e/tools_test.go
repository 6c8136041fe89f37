package e2e

import (
	"bytes"
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/carve-dev/carve/test/cluster"
	"github.com/carve-dev/carve/test/harness"
)

// kubectlRunner returns a function that runs the test cluster's kubectl
// against its API server and returns the combined output.
func kubectlRunner(ctx context.Context, t *testing.T, c *cluster.Cluster) func(args ...string) (string, error) {
	t.Helper()
	kubectl := kubectlPath(t)
	return func(args ...string) (string, error) {
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", c.Kubeconfig()}, args...)...)
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
}

// buildCarvectl builds cmd/carvectl of this repository into a temporary
// directory and returns the binary's path.
func buildCarvectl(ctx context.Context, t *testing.T) string {
	t.Helper()
	root, err := harness.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	bin, err := harness.Build(ctx, root, t.TempDir(), "carvectl")
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// kubectlPath returns kubectl of the test cluster's Kubernetes release,
// building it the first time (a few minutes; the build's progress goes to
// the test's log). The build has a context of its own: a caller's context
// is often bounded for what it runs with kubectl (a minute), not for a
// build.
func kubectlPath(t *testing.T) string {
	t.Helper()
	cacheDir, err := cluster.DefaultCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), kubectlBuildLimit)
	defer cancel()
	kubectl, err := cluster.EnsureKubectl(ctx, cluster.TestLog(t), cacheDir, "")
	if err != nil {
		t.Fatal(err)
	}
	return kubectl
}

// kubectlBuildLimit bounds a cold build of kubectl (about 2 minutes on 2
// cores after the cluster's build).
const kubectlBuildLimit = 20 * time.Minute
