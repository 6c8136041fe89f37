package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/internal/testclock"
	"github.com/carve-dev/carve/rollout"
)

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// lines are the complete lines written so far.
func (b *syncBuffer) lines() []string {
	s := b.String()
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return strings.Split(s[:i], "\n")
	}
	return nil
}

// watchEnv is a fake API server whose node watches a test can break.
type watchEnv struct {
	cs *fake.Clientset
	mu sync.Mutex
	// current is the live node watch; started counts the watches begun.
	current watch.Interface
	started int
	// fail, when set, fails the next node watch once, after gate closes.
	fail error
	gate chan struct{}
}

func newWatchEnv(t *testing.T, objs ...*corev1.Node) *watchEnv {
	t.Helper()
	e := &watchEnv{cs: fake.NewClientset()}
	for _, n := range objs {
		if _, err := e.cs.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.cs.PrependWatchReactor("nodes", func(a clienttesting.Action) (bool, watch.Interface, error) {
		e.mu.Lock()
		fail, gate := e.fail, e.gate
		e.fail = nil
		e.mu.Unlock()
		if fail != nil {
			<-gate
			return true, nil, fail
		}
		w, err := e.cs.Tracker().Watch(a.GetResource(), a.GetNamespace(), a.(clienttesting.WatchActionImpl).ListOptions)
		e.mu.Lock()
		e.current = w
		e.started++
		e.mu.Unlock()
		return true, w, err
	})
	return e
}

// breakWatch ends the live node watch; the informer's next watch fails
// with err once release is called. Until then that watch holds the fake
// clientset's lock: change objects through e.cs.Tracker() meanwhile.
func (e *watchEnv) breakWatch(err error) (release func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.fail, e.gate = err, make(chan struct{})
	e.current.Stop()
	return func() { close(e.gate) }
}

func (e *watchEnv) watches() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.started
}

// setNode changes node name's labels by edit through the API.
func (e *watchEnv) setNode(t *testing.T, name string, edit func(labels map[string]string)) {
	t.Helper()
	n, err := e.cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	edit(n.Labels)
	if _, err := e.cs.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitFor fails t unless cond holds within 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// watchRun is watchStatus running in the background.
type watchRun struct {
	out, stderr *syncBuffer
	cancel      context.CancelFunc
	done        chan error
}

func startWatch(t *testing.T, cs kubernetes.Interface, q statusQuery, o watchOptions) *watchRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &watchRun{out: &syncBuffer{}, stderr: &syncBuffer{}, cancel: cancel, done: make(chan error, 1)}
	o.stderr = r.stderr
	go func() { r.done <- watchStatus(ctx, cs, "https://test", q, o, r.out) }()
	t.Cleanup(func() { _ = r.stop(t) })
	return r
}

// stop cancels the watch and returns what it returned.
func (r *watchRun) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok {
			close(r.done)
		}
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not end within 10 s of its context")
		return nil
	}
}

// wait returns what the watch returned on its own.
func (r *watchRun) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		close(r.done)
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not end within 10 s")
		return nil
	}
}

var watchNow = time.Date(2026, 11, 24, 20, 0, 0, 0, time.UTC)

// poolNode is a node of the pool=gpu pool in state, with gpus GPUs.
func poolNode(name, state string, gpus int64) *corev1.Node {
	l := map[string]string{"pool": "gpu", carvev1.LabelState: state}
	alloc := map[string]int64{}
	if gpus > 0 {
		l[carvev1.LabelApplied], l[carvev1.LabelSource] = "full", "rule"
		alloc["nvidia.com/gpu"] = gpus
	}
	return gpuNode(name, l, nil, alloc)
}

func setState(state string) func(map[string]string) {
	return func(l map[string]string) { l[carvev1.LabelState] = state }
}

// slotLease is a live rollout slot of carve-system/carve-profiles held
// by node since a minute before watchNow.
func slotLease(node string) *coordinationv1.Lease {
	return rolloutLease(rollout.SlotName("carve-profiles", 0), rollout.KindSlot, node, "", watchNow.Add(-5*time.Second), 15)
}

// watchStep is one change a test makes and how many lines it must bring.
type watchStep struct {
	name  string
	do    func(t *testing.T, e *watchEnv)
	lines int
}

// watchSteps drive a watch through changes that show and changes that
// must not: the next step's line proves the ones before printed nothing.
func watchSteps() []watchStep {
	return []watchStep{
		{"gpu-b drains", func(t *testing.T, e *watchEnv) {
			t.Helper()
			e.setNode(t, "gpu-b", setState(carvev1.StateDraining))
		}, 1},
		{"a label status does not show, and a node outside the selector", func(t *testing.T, e *watchEnv) {
			t.Helper()
			e.setNode(t, "gpu-a", func(l map[string]string) { l["topology.kubernetes.io/zone"] = "b" })
			e.setNode(t, "gpu-x", setState(carvev1.StateFailed))
			e.setNode(t, "gpu-b", setState(carvev1.StateDraining))
		}, 0},
		{"a new node", func(t *testing.T, e *watchEnv) {
			t.Helper()
			if _, err := e.cs.CoreV1().Nodes().Create(context.Background(), poolNode("gpu-c", carvev1.StatePending, 0), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}, 1},
		{"gpu-a goes while the watch is lost, and the watch has expired", func(t *testing.T, e *watchEnv) {
			t.Helper()
			before := e.watches()
			release := e.breakWatch(apierrors.NewResourceExpired("too old resource version"))
			// Through the tracker: the fake clientset's lock is held by
			// the informer's next watch, which waits for release.
			if err := e.cs.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("nodes"), "", "gpu-a"); err != nil {
				t.Fatal(err)
			}
			release()
			waitFor(t, "the watch to come back", func() bool { return e.watches() > before })
		}, 1},
		{"gpu-b is done", func(t *testing.T, e *watchEnv) {
			t.Helper()
			e.setNode(t, "gpu-b", setState(carvev1.StateSuccess))
		}, 1},
		{"gpu-b takes a rollout slot", func(t *testing.T, e *watchEnv) {
			t.Helper()
			if _, err := e.cs.CoordinationV1().Leases("carve-system").Create(context.Background(), slotLease("gpu-b"), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}, 1},
		{"gpu-b stops renewing its slot", func(t *testing.T, e *watchEnv) {
			t.Helper()
			l := slotLease("gpu-b")
			l.Spec.RenewTime = new(metav1.NewMicroTime(watchNow.Add(-20 * time.Second)))
			if _, err := e.cs.CoordinationV1().Leases("carve-system").Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}, 1},
	}
}

// TestStatusWatchLines: outside a terminal, status -w prints the table,
// then a line per row that changed, and JSON Lines with -o json: nothing
// for a change the row does not show, nothing twice when the informer
// lists again after a lost watch, a node deleted meanwhile once.
func TestStatusWatchLines(t *testing.T) {
	tests := []struct {
		output string
		want   []string
	}{
		{"table", []string{
			"NODE   SELECTED  SELECTED BY  PINNED  APPLIED  STATE    ROLLOUT  VERSION  RESOURCES  LAST ERROR",
			"gpu-a  full      rule         -       full     success  -        -        gpu=8      -",
			"gpu-b  -         rule         -       full     pending  -        -        gpu=8      -",
			"gpu-b  -         rule         -       full     draining  -        -        gpu=8      -",
			"gpu-c  -         -            -       -        pending  -        -        -          -",
			"gpu-a  full      rule         -       full     <deleted>  -        -        gpu=8      -",
			"gpu-b  full      rule         -       full     success  -        -        gpu=8      -",
			"gpu-b  full      rule         -       full     success  slot     -        gpu=8      -",
			"gpu-b  full      rule         -       full     success  expired  -        gpu=8      -",
		}},
		{"json", []string{
			`{"type":"ADDED","node":"gpu-a","selected":"full","source":"rule","applied":"full","state":"success","resources":{"gpu":8}}`,
			`{"type":"ADDED","node":"gpu-b","source":"rule","applied":"full","state":"pending","resources":{"gpu":8}}`,
			`{"type":"MODIFIED","node":"gpu-b","source":"rule","applied":"full","state":"draining","resources":{"gpu":8}}`,
			`{"type":"ADDED","node":"gpu-c","state":"pending","resources":{}}`,
			`{"type":"DELETED","node":"gpu-a","selected":"full","source":"rule","applied":"full","state":"success","resources":{"gpu":8}}`,
			`{"type":"MODIFIED","node":"gpu-b","selected":"full","source":"rule","applied":"full","state":"success","resources":{"gpu":8}}`,
			`{"type":"MODIFIED","node":"gpu-b","selected":"full","source":"rule","applied":"full","state":"success","resources":{"gpu":8},"rollout":"slot",` +
				`"slot":{"name":"carve-rollout-carve-profiles-0","since":"2026-11-24T19:58:55Z"}}`,
			`{"type":"MODIFIED","node":"gpu-b","selected":"full","source":"rule","applied":"full","state":"success","resources":{"gpu":8},"rollout":"expired",` +
				`"slot":{"name":"carve-rollout-carve-profiles-0","since":"2026-11-24T19:58:55Z","expiredAt":"2026-11-24T19:59:55Z"}}`,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.output, func(t *testing.T) {
			other := poolNode("gpu-x", carvev1.StateSuccess, 8)
			delete(other.Labels, "pool")
			e := newWatchEnv(t, poolNode("gpu-a", carvev1.StateSuccess, 8), poolNode("gpu-b", carvev1.StatePending, 8), other,
				gpuNode("cpu-only", map[string]string{"pool": "gpu"}, nil, nil))
			q := statusQuery{selector: "pool=gpu", output: tc.output, namespace: "carve-system", configMap: "carve-profiles"}
			run := startWatch(t, e.cs, q, watchOptions{now: func() time.Time { return watchNow }, redrawEvery: redrawEvery, rolloutEvery: 10 * time.Millisecond})
			n := 2
			if tc.output == "table" {
				n++
			}
			waitFor(t, "the first table", func() bool { return len(run.out.lines()) >= n })
			for _, step := range watchSteps() {
				step.do(t, e)
				n += step.lines
				waitFor(t, step.name, func() bool { return len(run.out.lines()) >= n })
			}
			if err := run.stop(t); err != nil {
				t.Fatalf("watch: %v", err)
			}
			if diff := cmp.Diff(tc.want, run.out.lines()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
			if got := run.stderr.String(); got != "" {
				t.Errorf("stderr %q, want nothing: an expired watch is no news", got)
			}
		})
	}
}

// frame is what status -w draws on a terminal for lines: cursor home,
// each line cleared to its end, the rest of the screen cleared.
func frame(lines ...string) string {
	return "\x1b[H" + strings.Join(lines, "\x1b[K\n") + "\x1b[K\n\x1b[J"
}

// TestStatusWatchTerminal: on a terminal, status -w redraws the whole
// table in place, under a header with the count by state and the time of
// the last change, over the rollout.
func TestStatusWatchTerminal(t *testing.T) {
	file := "version: v1\nprofiles:\n  full:\n    - gpus: all\nrollout: {maxUnavailable: 1, maxFailures: 1}\n"
	rev := rollout.Revision(file)
	e := newWatchEnv(t, poolNode("gpu-a", carvev1.StateSuccess, 8), poolNode("gpu-b", carvev1.StatePending, 8))
	ctx := context.Background()
	if _, err := e.cs.CoreV1().ConfigMaps("carve-system").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "carve-profiles", Namespace: "carve-system"},
		Data: map[string]string{carvev1.ConfigMapKey: file}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cs.CoordinationV1().Leases("carve-system").Create(ctx, slotLease("gpu-a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	clock := testclock.New(watchNow)
	q := statusQuery{output: "table", namespace: "carve-system", configMap: "carve-profiles"}
	run := startWatch(t, e.cs, q, watchOptions{terminal: true, now: clock.Now, redrawEvery: redrawEvery, rolloutEvery: time.Hour})
	rolloutLine := "Rollout of carve-system/carve-profiles (revision " + rev + "; maxUnavailable 1, maxFailures 1): 0 nodes"
	first := frame(
		"2 nodes: 1 pending, 1 success (last change 20:00:00)",
		"",
		"NODE   SELECTED  SELECTED BY  PINNED  APPLIED  STATE    ROLLOUT  VERSION  RESOURCES  LAST ERROR",
		"gpu-a  full      rule         -       full     success  slot     -        gpu=8      -",
		"gpu-b  -         rule         -       full     pending  -        -        gpu=8      -",
		"",
		rolloutLine,
		"  slot "+rollout.SlotName("carve-profiles", 0)+": gpu-a, for 1m5s",
	)
	waitFor(t, "the first frame", func() bool { return run.out.String() == first })
	clock.Set(watchNow.Add(7 * time.Second))
	e.setNode(t, "gpu-b", setState(carvev1.StateDraining))
	second := frame(
		"2 nodes: 1 draining, 1 success (last change 20:00:07)",
		"",
		"NODE   SELECTED  SELECTED BY  PINNED  APPLIED  STATE     ROLLOUT  VERSION  RESOURCES  LAST ERROR",
		"gpu-a  full      rule         -       full     success   slot     -        gpu=8      -",
		"gpu-b  -         rule         -       full     draining  -        -        gpu=8      -",
		"",
		rolloutLine,
		"  slot "+rollout.SlotName("carve-profiles", 0)+": gpu-a, for 1m12s",
	)
	waitFor(t, "the second frame", func() bool { return len(run.out.String()) >= len(first+second) })
	if err := run.stop(t); err != nil {
		t.Fatalf("watch: %v", err)
	}
	if diff := cmp.Diff(strings.Split(first+second, "\n"), strings.Split(run.out.String(), "\n")); diff != "" {
		t.Errorf("frames (-want +got):\n%s", diff)
	}
}

// TestStatusWatchInterrupt: carvectl status -w ends on SIGINT with exit 0,
// and writes nothing once it has returned.
func TestStatusWatchInterrupt(t *testing.T) {
	e := newWatchEnv(t, poolNode("gpu-a", carvev1.StateSuccess, 8))
	newClient := func(string, time.Duration) (kubernetes.Interface, string, error) { return e.cs, "https://test", nil }
	out, errb := &syncBuffer{}, &syncBuffer{}
	code := make(chan int, 1)
	go func() { code <- runWith([]string{"status", "--watch"}, out, errb, newClient) }()
	waitFor(t, "the first table", func() bool { return len(out.lines()) == 2 })
	self, err := os.FindProcess(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if err := self.Signal(os.Interrupt); err != nil {
		t.Skipf("cannot interrupt this process: %v", err)
	}
	select {
	case c := <-code:
		if c != 0 {
			t.Errorf("exit %d, want 0; stderr %q", c, errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("status -w still runs 10 s after SIGINT")
	}
	written := out.String()
	e.setNode(t, "gpu-a", setState(carvev1.StateDraining))
	time.Sleep(300 * time.Millisecond)
	if got := out.String(); got != written {
		t.Errorf("written after the end:\n%s", strings.TrimPrefix(got, written))
	}
}

// TestStatusWatchErrors: status -w ends with an error naming the API
// server when it cannot list the nodes or the server refuses the watch;
// a watch that fails otherwise is tried again, saying so on stderr.
func TestStatusWatchErrors(t *testing.T) {
	tests := []struct {
		name string
		// refuseList makes every node list fail.
		refuseList bool
		// watchErr breaks the watch after the first table.
		watchErr error
		// wantErr is in the watch's error; "" for none.
		wantErr    string
		wantStderr []string
	}{
		{name: "list refused", refuseList: true, wantErr: `watch nodes on https://test: failed to list *v1.Node: nodes is forbidden: User "u" cannot list resource "nodes"`},
		{name: "watch refused", watchErr: apierrors.NewUnauthorized("token expired"), wantErr: "watch nodes on https://test: token expired"},
		{name: "watch lost", watchErr: errors.New("stream reset"), wantStderr: []string{
			"carvectl status: watch of nodes on https://test lost at 20:00:00: stream reset; retrying",
			"carvectl status: watching nodes on https://test again",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newWatchEnv(t, poolNode("gpu-a", carvev1.StateSuccess, 8))
			if tc.refuseList {
				e.cs.PrependReactor("list", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewForbidden(corev1.Resource("nodes"), "", errors.New(`User "u" cannot list resource "nodes"`))
				})
			}
			q := statusQuery{output: "table", namespace: "carve-system", configMap: "carve-profiles"}
			run := startWatch(t, e.cs, q, watchOptions{now: func() time.Time { return watchNow }, redrawEvery: redrawEvery, rolloutEvery: time.Hour})
			if tc.watchErr != nil {
				waitFor(t, "the first table", func() bool { return len(run.out.lines()) == 2 })
				e.breakWatch(tc.watchErr)()
			}
			var err error
			if tc.wantErr != "" {
				err = run.wait(t)
			} else {
				waitFor(t, "the error on stderr", func() bool { return run.stderr.String() != "" })
				e.setNode(t, "gpu-a", setState(carvev1.StateDraining))
				waitFor(t, "the change", func() bool { return len(run.out.lines()) == 3 })
				err = run.stop(t)
			}
			if got := errString(err); !strings.Contains(got, tc.wantErr) || (tc.wantErr == "") != (err == nil) {
				t.Errorf("error %q, want one with %q", got, tc.wantErr)
			}
			if diff := cmp.Diff(tc.wantStderr, run.stderr.lines()); diff != "" {
				t.Errorf("stderr (-want +got):\n%s", diff)
			}
		})
	}
}

// errString is err's message, "" for nil.
func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
