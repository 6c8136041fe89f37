package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/carve-dev/carve/agent"
	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/kubeclient/clientset"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/test/cluster"
	"github.com/carve-dev/carve/test/harness"
)

const (
	scaleNS    = "carve-scale"
	scaleCM    = "carve-scale"
	scaleLabel = "carve.dev/scale-test"
)

// run1 is one measurement: a fleet size and a rollout bound.
type run1 struct {
	nodes     int
	bound     string
	opLatency time.Duration
	steady    time.Duration
	limit     time.Duration
}

// result is what one run measured.
type result struct {
	nodes            int
	bound            string
	boundNodes       int
	converge         time.Duration
	most             int
	reqPerNodeChange float64
	reqPerNodeHour   float64
	serverReqPerNode float64
	// serverReqPerNodeHour is the API server's count while idle, per node
	// and hour (the control plane's own requests included).
	serverReqPerNodeHour float64
	cpuChange            time.Duration
	cpuHourPerNode       time.Duration
	rssMiB, peakMiB      int
	startup              time.Duration
	reqPerNodeStartup    float64
	// changeKinds and idleKinds break the requests per node down by kind.
	changeKinds, idleKinds string
}

func (r result) line() string {
	return fmt.Sprintf("%d nodes, maxUnavailable %s: converged in %s, at most %d at once (bound %d), %.1f requests/node for the change, %.1f/node/hour steady, CPU %s, RSS %d MiB",
		r.nodes, r.bound, r.converge.Round(100*time.Millisecond), r.most, r.boundNodes, r.reqPerNodeChange, r.reqPerNodeHour, r.cpuChange.Round(10*time.Millisecond), r.rssMiB)
}

// fileFor is the profile file with default profile def.
func fileFor(def, bound string) string {
	return fmt.Sprintf(`version: v1
defaultProfile: %s
rollout: {maxUnavailable: %q, maxFailures: 1}
profiles:
  full:
    - gpus: all
  balanced:
    - gpus: all
      mig: {1g.10gb: 2, 2g.20gb: 1, 3g.40gb: 1}
`, def, bound)
}

// fleet watches the fleet's Nodes and slot Leases from outside the agents.
type fleet struct {
	mu     sync.Mutex
	states map[string][2]string // node -> state, applied
	slots  map[string]bool
	most   int
}

func (f *fleet) node(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	f.mu.Lock()
	f.states[n.Name] = [2]string{n.Labels[carvev1.LabelState], n.Labels[carvev1.LabelApplied]}
	f.mu.Unlock()
}

func (f *fleet) lease(obj any, gone bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if gone || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		delete(f.slots, l.Name)
	} else {
		f.slots[l.Name] = true
	}
	f.most = max(f.most, len(f.slots))
}

// done counts the nodes in state success with applied.
func (f *fleet) done(applied string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, s := range f.states {
		if s == [2]string{carvev1.StateSuccess, applied} {
			n++
		}
	}
	return n
}

func (f *fleet) takeMost() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.most
	f.most = len(f.slots)
	return m
}

func watchFleet(ctx context.Context, cs kubernetes.Interface) (*fleet, error) {
	f := &fleet{states: map[string][2]string{}, slots: map[string]bool{}}
	nodes := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = scaleLabel }))
	leases := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(scaleNS), informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = carvev1.LeaseLabelKind + "=slot"
	}))
	ni, li := nodes.Core().V1().Nodes().Informer(), leases.Coordination().V1().Leases().Informer()
	if _, err := ni.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: f.node, UpdateFunc: func(_, o any) { f.node(o) }}); err != nil {
		return nil, err
	}
	if _, err := li.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) { f.lease(o, false) }, UpdateFunc: func(_, o any) { f.lease(o, false) }, DeleteFunc: func(o any) { f.lease(o, true) },
	}); err != nil {
		return nil, err
	}
	nodes.Start(ctx.Done())
	leases.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), ni.HasSynced, li.HasSynced) {
		return nil, fmt.Errorf("fleet watch did not sync")
	}
	return f, nil
}

// counting counts the requests a transport sends, in all and by kind.
type counting struct {
	rt http.RoundTripper
	n  *atomic.Int64
	by *kinds
}

func (c counting) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	c.by.add(requestKind(r))
	return c.rt.RoundTrip(r)
}

// kinds counts requests by kind ("PATCH nodes", "WATCH leases", ...).
type kinds struct {
	mu sync.Mutex
	n  map[string]int64
}

func (k *kinds) add(kind string) {
	k.mu.Lock()
	k.n[kind]++
	k.mu.Unlock()
}

// snapshot copies the counts.
func (k *kinds) snapshot() map[string]int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return maps.Clone(k.n)
}

// requestKind names a request by verb and resource: the method, WATCH for
// a watch, and the resource from the path.
func requestKind(r *http.Request) string {
	verb := r.Method
	if r.URL.Query().Get("watch") == "true" {
		verb = "WATCH"
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	res := "?"
	for i, p := range parts {
		switch p {
		case "nodes", "configmaps", "leases", "events", "pods":
			res = p
		case "namespaces":
			if i+2 < len(parts) {
				continue
			}
		}
	}
	return verb + " " + res
}

// diff returns after minus before, per kind, scaled by f, largest first,
// as "PATCH nodes 2.0, ...".
func diffKinds(before, after map[string]int64, f float64) string {
	type kv struct {
		k string
		v float64
	}
	var out []kv
	for k, v := range after {
		if d := float64(v-before[k]) * f; d > 0 {
			out = append(out, kv{k, d})
		}
	}
	slices.SortFunc(out, func(a, b kv) int { return cmp.Compare(b.v, a.v) })
	var s []string
	for _, e := range out {
		s = append(s, fmt.Sprintf("%s %.1f", e.k, e.v))
	}
	return strings.Join(s, ", ")
}

// WrappedRoundTripper lets client-go see the transport underneath, to
// cancel requests through it.
func (c counting) WrappedRoundTripper() http.RoundTripper { return c.rt }

// agentClient is a client of its own connection (a Proxy function makes
// client-go build a transport for it alone, as a separate agent process
// would have), counting its requests into n.
func agentClient(base *rest.Config, n *atomic.Int64, by *kinds) (kubernetes.Interface, error) {
	cfg := rest.CopyConfig(base)
	// No overall timeout, as in carve-agent: the local cluster's 30 s
	// would cut every watch after 30 s.
	cfg.Timeout = 0
	cfg.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return counting{rt: rt, n: n, by: by} }
	cfg.UserAgent = "carve-agent (scale test)"
	return kubernetes.NewForConfig(cfg)
}

// serverRequests sums the API server's apiserver_request_total.
func serverRequests(ctx context.Context, cs kubernetes.Interface) (float64, error) {
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, err
	}
	sum := 0.0
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
			sum += v
		}
	}
	return sum, sc.Err()
}

// cpu is the process's user and system time so far.
func cpu() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// memMiB reads VmRSS and VmHWM (the peak) from /proc/self/status.
func memMiB() (rss, peak int) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	for l := range strings.SplitSeq(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.Atoi(f[1])
		switch f[0] {
		case "VmRSS:":
			rss = kb / 1024
		case "VmHWM:":
			peak = kb / 1024
		}
	}
	return rss, peak
}

// measure runs one fleet: N Nodes and agents, all converged on whole GPUs,
// then flipped to MIG at once.
func measure(ctx context.Context, c *cluster.Cluster, r run1) (result, error) {
	cs := c.Clientset()
	out := result{nodes: r.nodes, bound: r.bound}
	f0, err := configs.Parse([]byte(fileFor("full", r.bound)))
	if err != nil {
		return out, fmt.Errorf("--bounds %q: %w", r.bound, err)
	}
	out.boundNodes = f0.Rollout.MaxUnavailable.Of(r.nodes)
	if err := clean(cs); err != nil {
		return out, err
	}
	defer func() { _ = clean(cs) }()
	if err := harness.ApplyProfiles(ctx, cs, scaleNS, scaleCM, fileFor("full", r.bound)); err != nil {
		return out, err
	}
	for i := range r.nodes {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("carve-scale-%03d", i), Labels: map[string]string{scaleLabel: "true"}}}
		if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			return out, fmt.Errorf("create node %s: %w", n.Name, err)
		}
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	f, err := watchFleet(wctx, cs)
	if err != nil {
		return out, err
	}
	var requests atomic.Int64
	by := &kinds{n: map[string]int64{}}
	actx, acancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { acancel(); wg.Wait() }()
	dir, err := os.MkdirTemp("", "carve-scale-")
	if err != nil {
		return out, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	start := time.Now()
	for i := range r.nodes {
		a, err := newAgent(c.RESTConfig(), &requests, by, fmt.Sprintf("carve-scale-%03d", i), filepath.Join(dir, strconv.Itoa(i)), r.opLatency)
		if err != nil {
			return out, err
		}
		wg.Go(func() { _ = a.Run(actx) })
	}
	if err := wait(ctx, f, "full", r.nodes, r.limit); err != nil {
		return out, fmt.Errorf("start-up: %w", err)
	}
	out.startup = time.Since(start)
	out.reqPerNodeStartup = float64(requests.Load()) / float64(r.nodes)
	time.Sleep(10 * time.Second) // let the start-up settle
	f.takeMost()

	req0, srv0, cpu0, kinds0 := requests.Load(), must(serverRequests(ctx, cs)), cpu(), by.snapshot()
	t0 := time.Now()
	if err := harness.ApplyProfiles(ctx, cs, scaleNS, scaleCM, fileFor("balanced", r.bound)); err != nil {
		return out, err
	}
	if err := wait(ctx, f, "balanced", r.nodes, r.limit); err != nil {
		return out, fmt.Errorf("repartition: %w", err)
	}
	out.converge = time.Since(t0)
	out.most = f.takeMost()
	out.rssMiB, out.peakMiB = memMiB()
	time.Sleep(10 * time.Second) // the slots are released, the last patches land
	out.reqPerNodeChange = float64(requests.Load()-req0) / float64(r.nodes)
	out.serverReqPerNode = (must(serverRequests(ctx, cs)) - srv0) / float64(r.nodes)
	out.cpuChange = cpu() - cpu0
	out.changeKinds = diffKinds(kinds0, by.snapshot(), 1/float64(r.nodes))

	req1, cpu1, kinds1, srv1 := requests.Load(), cpu(), by.snapshot(), must(serverRequests(ctx, cs))
	time.Sleep(r.steady)
	perHour := float64(time.Hour) / float64(r.steady)
	out.reqPerNodeHour = float64(requests.Load()-req1) / float64(r.nodes) * perHour
	out.serverReqPerNodeHour = (must(serverRequests(ctx, cs)) - srv1) / float64(r.nodes) * perHour
	out.idleKinds = diffKinds(kinds1, by.snapshot(), perHour/float64(r.nodes))
	out.cpuHourPerNode = time.Duration(float64(cpu()-cpu1) / float64(r.nodes) * perHour)
	return out, nil
}

func must(v float64, err error) float64 {
	if err != nil {
		return 0
	}
	return v
}

// wait waits until want nodes are in state success with applied.
func wait(ctx context.Context, f *fleet, applied string, want int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for f.done(applied) < want {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d nodes reached %s within %s", f.done(applied), want, applied, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// newAgent builds one agent on its own simulated H100.
func newAgent(base *rest.Config, requests *atomic.Int64, by *kinds, node, dir string, opLatency time.Duration) (*agent.Agent, error) {
	m, err := sim.New("h100-80gb*1")
	if err != nil {
		return nil, err
	}
	if err := m.Init(); err != nil {
		return nil, err
	}
	m.SetLatency(sim.UniformLatency(opLatency))
	client, err := agentClient(base, requests, by)
	if err != nil {
		return nil, err
	}
	return agent.New(agent.Config{
		NodeName: node, Client: clientset.Wrap(client), ConfigMapNamespace: scaleNS, ConfigMapName: scaleCM, GPUs: m,
		Advertise: agent.AdvertiseNone, PodResourcesSocket: agent.PodResourcesNone, StateDir: dir,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
}

// clean removes the fleet's Nodes, Leases and ConfigMap.
func clean(cs kubernetes.Interface) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cs.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: scaleLabel}); err != nil {
		return err
	}
	if err := cs.CoordinationV1().Leases(scaleNS).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: carvev1.LeaseLabelConfigMap + "=" + scaleCM}); err != nil {
		return err
	}
	return harness.DeleteProfiles(ctx, cs, scaleNS, scaleCM)
}
