package cluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// E2EEnv is the environment variable that controls end-to-end tests: "0"
// (or "false", "no") skips them, as a person who wants the unit tests only
// says; otherwise they run, and a missing prerequisite (root) fails them
// with a message saying why. No end-to-end test is ever skipped silently.
const E2EEnv = "CARVE_E2E"

// SkipReason returns why end-to-end tests cannot run here ("" when they
// can), and whether that should fail rather than skip them.
func SkipReason() (reason string, fail bool) {
	return skipReason(os.Getenv(E2EEnv), Available())
}

// skipReason decides for the value of E2EEnv and the answer of Available.
func skipReason(env string, unavailable error) (reason string, fail bool) {
	switch env {
	case "0", "false", "no":
		return E2EEnv + "=" + env + ": end-to-end tests skipped, as asked", false
	}
	if unavailable != nil {
		return fmt.Sprintf("the end-to-end tests cannot run here: %v; run them as root (`sudo -E make test`), or ask for the unit tests only with %s=0",
			unavailable, E2EEnv), true
	}
	return "", false
}

// ForTest starts a cluster for one test and stops it when the test ends,
// printing the tail of every component log if the test failed. It skips the
// test when SkipReason says so, or in -short mode. Progress goes to the test
// log. A SIGINT or SIGTERM stops the cluster before the process exits.
func ForTest(t testing.TB, opts Options) *Cluster {
	t.Helper()
	skipUnlessPossible(t)
	if opts.Log == nil {
		opts.Log = TestLog(t)
	}
	opts.HandleSignals = true
	if os.Getenv("CARVE_E2E_KEEP") != "" {
		opts.KeepDir = true
	}
	ctx, cancel := context.WithTimeout(context.Background(), startBudget())
	defer cancel()
	c, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			var b strings.Builder
			c.DumpLogs(&b, 40)
			t.Logf("component logs (test failed):\n%s", b.String())
		}
		if err := c.Stop(); err != nil {
			t.Errorf("stop cluster: %v", err)
		}
	})
	return c
}

// skipUnlessPossible skips (or fails) t when end-to-end tests cannot run.
func skipUnlessPossible(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test skipped in -short mode")
	}
	if reason, fail := SkipReason(); reason != "" {
		if fail {
			t.Fatal(reason)
		}
		t.Skip(reason)
	}
}

// startBudget bounds Start in tests: installing packages and a cold build
// of the Kubernetes binaries can take 15 minutes on a busy 2-core machine.
func startBudget() time.Duration {
	if v := os.Getenv("CARVE_E2E_START_TIMEOUT"); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
	}
	return 30 * time.Minute
}

// Suite shares one cluster among the tests of a package: the cluster starts
// with the first test that asks for it and stops when Run returns. Use it
// from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(suite.Run(m)) }
//	var suite = cluster.NewSuite(cluster.Options{NodeName: "gpu-node"})
//	func TestX(t *testing.T) { c := suite.Cluster(t); ... }
type Suite struct {
	opts Options

	once sync.Once
	c    *Cluster
	err  error
	// tests holds the names of the tests that asked for the cluster.
	tests sync.Map
}

// NewSuite returns a Suite that starts its cluster with opts.
func NewSuite(opts Options) *Suite { return &Suite{opts: opts} }

// Cluster returns the suite's cluster, starting it on first use. It skips t
// like ForTest, and fails t when the cluster could not start. Tests must
// leave the cluster as they found it (delete their pods and objects, stop
// their device plugins): after each test the node must offer no
// device-plugin resource within 20 s. A plugin left running, or a kubelet
// left holding a stale endpoint, fails the test; a Node object merely
// behind the kubelet is logged; the kubelet is restarted in the last two
// cases (checkDevicePlugins).
func (s *Suite) Cluster(t testing.TB) *Cluster {
	t.Helper()
	skipUnlessPossible(t)
	s.once.Do(func() {
		opts := s.opts
		if opts.Log == nil {
			opts.Log = os.Stderr
		}
		opts.HandleSignals = true
		if os.Getenv("CARVE_E2E_KEEP") != "" {
			opts.KeepDir = true
		}
		ctx, cancel := context.WithTimeout(context.Background(), startBudget())
		defer cancel()
		s.c, s.err = Start(ctx, opts)
	})
	if s.err != nil {
		t.Fatalf("start cluster: %v", s.err)
	}
	// Once per top-level test: a subtest ends while its parent may still
	// run a device plugin.
	if _, seen := s.tests.LoadOrStore(t.Name(), true); !seen && !strings.Contains(t.Name(), "/") {
		t.Cleanup(func() {
			s.checkDevicePlugins(t)
			if t.Failed() {
				var b strings.Builder
				s.c.DumpLogs(&b, 40)
				t.Logf("component logs (test failed):\n%s", b.String())
			}
		})
	}
	return s.c
}

// Run runs the tests and then stops the cluster if one was started. It
// returns the exit code for os.Exit.
func (s *Suite) Run(m *testing.M) int {
	code := m.Run()
	if s.c != nil {
		if err := s.c.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop cluster: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// TestLog returns a writer that sends each line to t's log until the test
// and its cleanups registered after this call are over, and to stderr
// after that (t.Log then panics).
func TestLog(t testing.TB) io.Writer {
	t.Helper()
	w := &testLogWriter{t: t}
	t.Cleanup(w.close)
	return w
}

// testLogWriter sends progress lines to t.Log until the test is over, and
// to stderr after that (t.Log then panics).
type testLogWriter struct {
	t      testing.TB
	closed atomic.Bool
}

func (w *testLogWriter) Write(b []byte) (int, error) {
	if w.closed.Load() {
		return os.Stderr.Write(b)
	}
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

func (w *testLogWriter) close() { w.closed.Store(true) }
