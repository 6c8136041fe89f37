package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/test/harness"
)

// TestStatusWatch: carvectl status -w against the cluster's API server,
// writing to a file, prints the table with the node's row, then one line
// when the node's carve.dev/state label changes (none for the kubelet's
// own updates of the Node), and ends with exit 0 on SIGTERM.
func TestStatusWatch(t *testing.T) {
	c := suite.Cluster(t)
	cs := c.Clientset()
	ctx := testCtx(t, 5*time.Minute)
	freshNode(t, c)
	bin := buildCarvectl(ctx, t)
	setState := func(state string) {
		t.Helper()
		if err := harness.SetNodeLabels(ctx, cs, c.NodeName(), map[string]string{carvev1.LabelState: state}); err != nil {
			t.Fatal(err)
		}
	}
	setState(carvev1.StatePending)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := harness.SetNodeLabels(ctx, cs, c.NodeName(), map[string]string{carvev1.LabelState: ""}); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})

	logPath := filepath.Join(t.TempDir(), "status.log")
	p, err := harness.Start(bin, []string{"status", "-w", "--kubeconfig", c.Kubeconfig()}, nil, logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = p.Stop() })
	states := func() []string {
		b, _ := os.ReadFile(logPath)
		var out []string
		for l := range strings.Lines(string(b)) {
			if f := strings.Fields(l); len(f) > 5 && f[0] != "NODE" {
				out = append(out, f[0]+" "+f[5])
			}
		}
		return out
	}
	waitLines := func(what string, n int) {
		t.Helper()
		if err := harness.Poll(ctx, time.Minute, func(context.Context) (bool, error) { return len(states()) >= n, nil }); err != nil {
			t.Fatalf("%s: %v; carvectl wrote:\n%s", what, err, harness.Tail(logPath, 20))
		}
	}
	waitLines("the first table", 1)
	setState(carvev1.StateDraining)
	waitLines("the change", 2)
	// The kubelet updates the Node now and then; none of that shows.
	time.Sleep(3 * time.Second)
	code, err := p.Stop()
	if err != nil || code != 0 {
		t.Errorf("carvectl status -w on SIGTERM: exit %d, %v", code, err)
	}
	want := []string{c.NodeName() + " " + carvev1.StatePending, c.NodeName() + " " + carvev1.StateDraining}
	if diff := cmp.Diff(want, states()); diff != "" {
		t.Errorf("rows (-want +got):\n%s\ncarvectl wrote:\n%s", diff, harness.Tail(logPath, 20))
	}
	if b, _ := os.ReadFile(logPath); !strings.HasPrefix(string(b), "NODE ") {
		t.Errorf("carvectl status -w did not start with the table header:\n%s", b)
	}
}
