// Package live measures, on the real local cluster, how fast a profile
// change reaches the kubelet while carve-agent keeps running, against the
// baseline of restarting the agent process the way NVIDIA's device plugin
// is restarted on a configuration change; and what the agent costs the API
// server, per repartition and per hour at steady state (`make bench
// BENCH=live`).
//
// Run starts the carve-agent binary under an identity of its own (a
// ServiceAccount with configs/deploy's RBAC, a token from the TokenRequest
// API) and counts its requests with two FlowSchemas that match only that
// ServiceAccount.
package live

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/carve-dev/carve/test/bench/report"
	"github.com/carve-dev/carve/test/cluster"
	"github.com/carve-dev/carve/test/harness"
)

// Options configure Run.
type Options struct {
	// Cluster is the running local cluster (required). Run leaves it as it
	// found it.
	Cluster *cluster.Cluster
	// Agent is the carve-agent binary (required).
	Agent string
	// Short is the short mode `make test` runs: 2 changes per series and
	// side, a 5 s steady-state window; the same code paths.
	Short bool
	// Log receives progress lines; nil discards them.
	Log io.Writer
	// Changes is the number of changes per series and side; 0 is 20 (2 in
	// short mode).
	Changes int
	// Steady is the steady-state window; 0 is 11 min, longer than the
	// longest period of any request the agent makes (client-go's watch
	// renewals, at most 10 min), or 5 s in short mode.
	Steady time.Duration
	// Root is the carve repository, for configs/deploy; "" finds it from
	// the working directory.
	Root string
}

// withDefaults fills the zero fields.
func (o Options) withDefaults() (Options, error) {
	if o.Cluster == nil || o.Agent == "" {
		return o, errors.New("live: Options.Cluster and Options.Agent are required")
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Changes == 0 {
		o.Changes = 20
		if o.Short {
			o.Changes = 2
		}
	}
	if o.Steady == 0 {
		o.Steady = 11 * time.Minute
		if o.Short {
			o.Steady = 5 * time.Second
		}
	}
	if o.Root == "" {
		root, err := harness.RepoRoot(".")
		if err != nil {
			return o, fmt.Errorf("live: %w", err)
		}
		o.Root = root
	}
	return o, nil
}

// Run measures live updates against restarts and the agent's API cost,
// and returns their tables, each figure with its baseline and the ratio.
func Run(ctx context.Context, o Options) ([]report.Table, error) {
	res, err := measure(ctx, o)
	if err != nil {
		return nil, err
	}
	return res.tables(), nil
}

// results are what one run measured.
type results struct {
	series []series
	// steady is the agent's requests over the steady-state window, which
	// began steadyAge after the agent process started.
	steady                  requests
	steadyWindow, steadyAge time.Duration
	// check is what the FlowSchemas counted of known requests: the
	// admin's (want none) and the ServiceAccount's (want probe).
	check schemaCheck
	// changes is the number of changes per series and side.
	changes int
}

// bench is one run's state.
type bench struct {
	o       Options
	cs      kubernetes.Interface
	node    string
	id      *identity
	runner  *agentRunner
	proc    *harness.Process
	kubelet *kubelet
	view    *nodeView
	// counts are the agent's request counts last read.
	counts requests
	// procStart is when proc was started.
	procStart time.Time
	// stopWatch ends the node informer; start is when Run began.
	stopWatch context.CancelFunc
	start     time.Time
}

// startAgent starts a new agent process.
func (b *bench) startAgent() error {
	p, err := b.runner.start()
	if err != nil {
		return err
	}
	b.proc, b.procStart = p, time.Now()
	return nil
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.o.Log, "live: "+format+"\n", args...)
}

// measure is Run without the tables.
func measure(ctx context.Context, o Options) (res *results, err error) {
	if o, err = o.withDefaults(); err != nil {
		return nil, err
	}
	b := &bench{o: o, cs: o.Cluster.Clientset(), node: o.Cluster.NodeName(), start: time.Now()}
	dir, err := os.MkdirTemp("", "carve-bench-live-")
	if err != nil {
		return nil, fmt.Errorf("live: %w", err)
	}
	defer func() { err = errors.Join(err, b.cleanUp(dir)) }()
	res = &results{changes: o.Changes}
	defer func() { b.logf("done in %s", time.Since(b.start).Round(time.Second)) }()
	if err := b.setUp(ctx, dir, res); err != nil {
		return nil, fmt.Errorf("live: set up: %w", err)
	}
	for _, k := range kinds() {
		for _, tr := range []trigger{byLabel, byConfigMap} {
			s, err := b.runSeries(ctx, k, tr, o.Changes)
			if err != nil {
				return nil, fmt.Errorf("live: %w", err)
			}
			res.series = append(res.series, s)
		}
	}
	if err := b.steadyState(ctx, res); err != nil {
		return nil, fmt.Errorf("live: steady state: %w", err)
	}
	n, err := b.runner.rateLimited()
	if err != nil {
		return nil, fmt.Errorf("live: %w", err)
	}
	if n > 0 {
		return nil, fmt.Errorf("live: the kubelet rejected %d of the agent's PodResources calls for its rate limit: "+
			"the benchmark's polling disturbed what it measured", n)
	}
	return res, nil
}

// setUp gives the agent its identity, checks the FlowSchemas, and starts
// the agent and the observers.
func (b *bench) setUp(ctx context.Context, dir string, res *results) error {
	if err := b.cleanNode(ctx); err != nil {
		return err
	}
	var err error
	if b.id, err = setUpIdentity(ctx, b.o.Cluster.RESTConfig(), b.cs, b.o.Root, dir); err != nil {
		return err
	}
	if b.kubelet, err = dialKubelet(b.o.Cluster.PodResourcesSocket()); err != nil {
		return err
	}
	watchCtx, stop := context.WithCancel(ctx)
	b.stopWatch = stop
	if b.view, err = watchNode(watchCtx, b.cs, b.node); err != nil {
		return err
	}
	k := kinds()[0]
	first, err := targetFor(k, k.a, byLabel)
	if err != nil {
		return err
	}
	if err := harness.ApplyProfiles(ctx, b.cs, namespace, configMapName, first.file); err != nil {
		return err
	}
	if res.check, err = checkSchemas(ctx, b.cs, b.id.client, b.node); err != nil {
		return err
	}
	b.runner = newAgentRunner(b.o.Agent, b.id.kubeconfig, dir, b.o.Cluster)
	if err := b.startAgent(); err != nil {
		return err
	}
	b.logf("agent started (pid %d); %d changes per series and side", b.proc.PID(), b.o.Changes)
	return b.reach(ctx, first)
}

// steadyState counts the agent's requests over the window, with no change.
func (b *bench) steadyState(ctx context.Context, res *results) error {
	b.logf("steady state: %s without a change", b.o.Steady)
	before, t0 := b.counts, time.Now()
	res.steadyAge = t0.Sub(b.procStart)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(b.o.Steady):
	}
	after, err := countRequests(ctx, b.cs)
	if err != nil {
		return err
	}
	res.steady, res.steadyWindow = after.minus(before), time.Since(t0)
	if b.proc.Exited() {
		return fmt.Errorf("the agent exited during the window\nagent log:\n%s", b.runner.tail())
	}
	return nil
}

// cleanNode removes what an agent wrote on the node, and carve's profile
// label.
func (b *bench) cleanNode(ctx context.Context) error {
	return harness.ResetNode(ctx, b.cs, b.node)
}

// cleanUp stops the agent and the observers and deletes everything Run
// created, whether or not it succeeded: the agent's objects, the node's
// labels and annotation, carve's Events on the node, and dir.
func (b *bench) cleanUp(dir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errs []error
	if b.proc != nil {
		if err := stopAgent(b.proc); err != nil {
			errs = append(errs, fmt.Errorf("stop the agent: %w\nagent log:\n%s", err, b.runner.tail()))
		}
	}
	if b.kubelet != nil {
		b.kubelet.close()
	}
	if b.stopWatch != nil {
		b.stopWatch()
	}
	errs = append(errs, tearDownIdentity(ctx, b.cs), b.cleanNode(ctx), b.deleteEvents(ctx), os.RemoveAll(dir))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("live: clean up: %w", err)
	}
	return nil
}

// deleteEvents deletes the Events carve-agent emitted on the node since
// Run began (those of the ConfigMap went with the namespace).
func (b *bench) deleteEvents(ctx context.Context) error {
	events := b.cs.CoreV1().Events(metav1.NamespaceDefault)
	sel := "involvedObject.kind=Node,involvedObject.name=" + b.node + ",source=carve-agent"
	list, err := events.List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return fmt.Errorf("carve-agent's Events on node %s: %w", b.node, err)
	}
	since := b.start.Truncate(time.Second)
	for _, e := range list.Items {
		if e.CreationTimestamp.Time.Before(since) {
			continue
		}
		if err := events.Delete(ctx, e.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete Event %s: %w", e.Name, err)
		}
	}
	return nil
}
