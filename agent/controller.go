package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/internal/textfmt"
	"github.com/carve-dev/carve/kubeclient"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/plugin"
	"github.com/carve-dev/carve/rollout"
)

// ConfigKey is the key of the profile file in the ConfigMap.
const ConfigKey = carvev1.ConfigMapKey

// EventRecorder emits Kubernetes Events; record.EventRecorder is one.
type EventRecorder interface {
	Event(object runtime.Object, eventtype, reason, message string)
}

// Controller runs the Reconciler for one Node against the API server: it
// watches only its own Node and the one profile ConfigMap (informers with
// field selectors on their names), coalesces their changes into one queue
// key handled by one worker, and records each Result as a minimal merge
// patch of the Node's labels and carve.dev/partition annotation, as Events,
// and as pod evictions when the drain policy says so.
type Controller struct {
	// Client talks to the API server.
	Client kubeclient.Interface
	// NodeName is the Node this agent owns.
	NodeName string
	// ConfigMapNamespace and ConfigMapName name the profile ConfigMap.
	ConfigMapNamespace, ConfigMapName string
	// Reconciler does the work; build it with the Controller's
	// RecordApplying as its BeforeApply hook.
	Reconciler *Reconciler
	// Events emits Events on the Node; nil emits none.
	Events EventRecorder
	// Metrics records reconciles; nil records none.
	Metrics *Metrics
	// Clock is the time profiles are selected for; default time.Now.
	Clock func() time.Time
	// Logger logs; default slog.Default().
	Logger *slog.Logger
	// Resync is the informers' resync period; 0 disables resyncs.
	Resync time.Duration
	// ProfileLabel is the node label that pins a profile; "" is
	// carve.dev/profile (configs.File.ProfileLabel).
	ProfileLabel string
	// InUsePoll is how often the kubelet is asked which devices pods hold,
	// a change starting a pass (watchInUse); 0 never asks.
	InUsePoll time.Duration

	ready atomic.Bool
	// held is whether the Node's labels hold it (carve.dev/hold=true), as
	// the Node's informer last saw them.
	held atomic.Bool
	// inUse is the devices in use the record written last lists
	// (inUseKey), "" before the first.
	inUse atomic.Value
	// backoff spaces the retries of failed reconciles; made by Run.
	backoff workqueue.TypedRateLimiter[string]
	// wrote is the Node as this agent's latest write of it returned it
	// (remember); sync reads it rather than the informer's copy while that
	// copy is older (newest).
	wrote atomic.Pointer[corev1.Node]
}

// MinRetryBackoff and MaxRetryBackoff bound the exponential backoff after
// a reconcile failed, e.g. while the API server is unreachable (the node's
// record catches up at most MaxRetryBackoff after the API server is back),
// or ended in state failed, e.g. after an NVML operation failed (retried
// 0.5, 1, 2, ... s later, never later than the retry the pass asked for).
const (
	MinRetryBackoff = 500 * time.Millisecond
	MaxRetryBackoff = 30 * time.Second
)

// MaxWait is the longest the agent waits for a time it asked to be woken
// at (a window's start or end, a retry): the pass then runs again, reads
// the clock, and waits again if the time has not come. Passes that find
// nothing to do write nothing.
const MaxWait = 30 * time.Second

// queueKey is the one key of the work queue: every change leads to the same
// reconcile of the whole node.
const queueKey = "node"

// Held reports whether the Node is held (carve.dev/hold=true) as its
// informer last saw it: the Reconciler's Hold, asked at each operation
// boundary while the worker is in a pass.
func (c *Controller) Held() bool { return c.held.Load() }

// watchHold keeps Held up to date from the Node's informer.
func (c *Controller) watchHold(obj any) {
	if n, ok := obj.(*corev1.Node); ok {
		held, _ := carvev1.Held(n.Labels)
		c.held.Store(held)
	}
}

// recordedInUse returns the devices in use the record written last lists
// (inUseKey).
func (c *Controller) recordedInUse() string {
	s, _ := c.inUse.Load().(string)
	return s
}

// Ready reports whether the caches have synced and a reconcile has
// finished.
func (c *Controller) Ready() bool { return c.ready.Load() }

func (c *Controller) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.Default()
	}
	return c.Logger
}

func (c *Controller) now() time.Time {
	if c.Clock == nil {
		return time.Now()
	}
	return c.Clock()
}

// Run watches and reconciles until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	if c.NodeName == "" || c.ConfigMapName == "" || c.ConfigMapNamespace == "" {
		return errors.New("controller: node name and ConfigMap namespace/name are required")
	}
	nodes := newInformer(c.Client, c.nodeWatch(), &corev1.Node{}, c.Resync)
	cms := newInformer(c.Client, c.configMapWatch(), &corev1.ConfigMap{}, c.Resync)

	c.backoff = workqueue.NewTypedItemExponentialFailureRateLimiter[string](MinRetryBackoff, MaxRetryBackoff)
	q := workqueue.NewTypedRateLimitingQueueWithConfig(c.backoff, workqueue.TypedRateLimitingQueueConfig[string]{Name: "carve-agent"})
	defer q.ShutDown()
	enqueue := func(any) { q.Add(queueKey) }
	if _, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			c.watchHold(obj)
			q.Add(queueKey)
		},
		UpdateFunc: func(oldObj, newObj any) {
			c.watchHold(newObj)
			o, ok1 := oldObj.(*corev1.Node)
			n, ok2 := newObj.(*corev1.Node)
			// Only labels are an input; status heartbeats are not.
			if !ok1 || !ok2 || inputLabelsChanged(o.Labels, n.Labels) {
				q.Add(queueKey)
			}
		},
		DeleteFunc: enqueue,
	}); err != nil {
		return fmt.Errorf("controller: watch node: %w", err)
	}
	if _, err := cms.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, _ any) { q.Add(queueKey) }, DeleteFunc: enqueue,
	}); err != nil {
		return fmt.Errorf("controller: watch ConfigMap: %w", err)
	}
	var informers sync.WaitGroup
	defer informers.Wait()
	informerCtx, stopInformers := context.WithCancel(ctx)
	defer stopInformers()
	informers.Go(func() { nodes.RunWithContext(informerCtx) })
	informers.Go(func() { cms.RunWithContext(informerCtx) })
	if !cache.WaitForCacheSync(ctx.Done(), nodes.HasSynced, cms.HasSynced) {
		return fmt.Errorf("controller: caches did not sync: %w", ctx.Err())
	}
	go func() {
		<-ctx.Done()
		q.ShutDown()
	}()
	q.Add(queueKey)
	if c.Reconciler != nil {
		go watchInUse(ctx, c.Reconciler.InUse, c.InUsePoll, c.recordedInUse, func() { q.Add(queueKey) })
	}
	for c.next(ctx, q, nodes.GetStore(), cms.GetStore()) {
	}
	return nil
}

// inputLabelsChanged reports whether a Node's labels changed other than in
// carve.dev/state, which only the agent writes (applying before an apply,
// the outcome after): reacting to its own writes would start the next
// pass at once, and a failing apply would retry in a loop instead of after
// the retry interval.
func inputLabelsChanged(old, cur map[string]string) bool {
	return !maps.Equal(withoutState(old), withoutState(cur))
}

func withoutState(labels map[string]string) map[string]string {
	if _, ok := labels[carvev1.LabelState]; !ok {
		return labels
	}
	out := maps.Clone(labels)
	delete(out, carvev1.LabelState)
	return out
}

// next handles one queue item; false when the queue is shut down. A pass
// that could not finish is retried with the backoff; so is one that ended
// in state failed and asked for a retry, unless the retry it asked for
// (a window boundary, the retry interval) comes first.
func (c *Controller) next(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], nodes, cms cache.Store) bool {
	key, quit := q.Get()
	if quit {
		return false
	}
	defer q.Done(key)
	requeue, failed, err := c.sync(ctx, nodes, cms)
	if err != nil && ctx.Err() != nil {
		c.logger().Info("reconcile stopped for shutdown", "err", err)
		return false
	}
	if err != nil {
		c.logger().Error("reconcile failed; retrying", "err", err, "retries", q.NumRequeues(key))
		q.AddRateLimited(key)
		return true
	}
	c.ready.Store(true)
	if !failed || requeue.IsZero() {
		q.Forget(key)
	}
	if requeue.IsZero() {
		return true
	}
	// A timer runs on the monotonic clock: were the wall clock to step
	// (NTP, a VM resumed) across the instant asked for, a long wait would
	// miss it. Waking at least every MaxWait notices the step.
	delay := min(max(requeue.Sub(c.now()), 0), MaxWait)
	if failed {
		retries := q.NumRequeues(key)
		delay = min(delay, c.backoff.When(key))
		c.logger().Warn("reconcile ended failed; retrying with backoff", "retryIn", delay, "retries", retries)
	}
	q.AddAfter(key, delay)
	return true
}

// sync runs one reconcile and records it; it returns when to run again and
// whether the pass ended in state failed.
func (c *Controller) sync(ctx context.Context, nodes, cms cache.Store) (time.Time, bool, error) {
	obj, ok, err := nodes.GetByKey(c.NodeName)
	switch {
	case err != nil:
		return time.Time{}, false, fmt.Errorf("node %s from the cache: %w", c.NodeName, err)
	case !ok:
		return time.Time{}, false, fmt.Errorf("node %s not in the cache", c.NodeName)
	}
	node, ok := obj.(*corev1.Node)
	if !ok {
		return time.Time{}, false, fmt.Errorf("node %s: unexpected object %T", c.NodeName, obj)
	}
	node = c.newest(node)
	in := Input{Labels: node.Labels, Now: c.now()}
	in.Config, in.Revision, in.ConfigErr = c.loadConfig(cms)
	if s, ok := node.Annotations[carvev1.AnnotationRecord]; ok {
		if rec, err := carvev1.DecodeNodeRecord(s); err == nil {
			in.Previous = &rec
		} else {
			c.logger().Warn("ignoring an unreadable annotation", "annotation", carvev1.AnnotationRecord, "err", err)
		}
	}
	res, err := c.Reconciler.Reconcile(ctx, in)
	c.Metrics.observe(res, err)
	if err != nil {
		return time.Time{}, false, err
	}
	for _, ev := range res.Events {
		if ev.OnConfigMap {
			c.emitOnConfigMap(cms, ev)
			continue
		}
		c.emit(node, ev)
	}
	enc, err := res.Annotation.Encode()
	if err != nil {
		return time.Time{}, false, err
	}
	// The pass may have written the Node itself (the state applying, the
	// record that says mid-change): the patch is against that.
	cur := c.newest(node)
	patch, err := MetadataPatch(cur.Labels, res.Labels, in.Previous, cur.Annotations, map[string]string{carvev1.AnnotationRecord: enc})
	if err != nil {
		return time.Time{}, false, err
	}
	if patch != nil {
		n, err := c.Client.Nodes().Patch(ctx, c.NodeName, types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil {
			return time.Time{}, false, fmt.Errorf("patch node %s: %w", c.NodeName, err)
		}
		c.remember(n)
	}
	c.inUse.Store(inUseKey(res.Annotation.InUse))
	if res.ReleaseSlot {
		c.Reconciler.ReleaseSlot(ctx)
	}
	if len(res.Evict) > 0 {
		if err := c.Reconciler.Fence(); err != nil || c.Reconciler.heldNow() {
			c.logger().Warn("evictions held back", "err", err, "held", c.Reconciler.heldNow())
		} else {
			c.evict(ctx, node, res.Evict)
		}
	}
	c.logger().Info("reconciled", "state", res.State, "profile", res.Selection.Profile, "source", res.Selection.Source,
		"patched", patch != nil, "requeue", res.Requeue)
	return res.Requeue, res.State == carvev1.StateFailed, nil
}

// configMap returns the profile ConfigMap from the cache.
func (c *Controller) configMap(cms cache.Store) (*corev1.ConfigMap, error) {
	key := c.ConfigMapNamespace + "/" + c.ConfigMapName
	obj, ok, err := cms.GetByKey(key)
	switch {
	case err != nil:
		return nil, fmt.Errorf("ConfigMap %s: %w", key, err)
	case !ok:
		return nil, fmt.Errorf("ConfigMap %s not found", key)
	}
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return nil, fmt.Errorf("ConfigMap %s: unexpected object %T", key, obj)
	}
	return cm, nil
}

// loadConfig reads and parses the profile file from the ConfigMap cache,
// and names its revision.
func (c *Controller) loadConfig(cms cache.Store) (*configs.File, string, error) {
	cm, err := c.configMap(cms)
	if err != nil {
		return nil, "", err
	}
	key := c.ConfigMapNamespace + "/" + c.ConfigMapName
	data, ok := cm.Data[ConfigKey]
	if !ok {
		return nil, "", fmt.Errorf("ConfigMap %s has no key %s", key, ConfigKey)
	}
	f, err := configs.Parse([]byte(data))
	if err != nil {
		return nil, "", fmt.Errorf("ConfigMap %s key %s: %w", key, ConfigKey, err)
	}
	f.ProfileLabel = c.ProfileLabel
	return f, rollout.Revision(data), nil
}

func (c *Controller) emit(node *corev1.Node, ev Event) {
	if c.Events == nil {
		return
	}
	typ := corev1.EventTypeNormal
	if ev.Warning {
		typ = corev1.EventTypeWarning
	}
	c.Events.Event(node, typ, ev.Reason, ev.Message)
}

// emitOnConfigMap emits an Event on the profile ConfigMap, naming this
// node.
func (c *Controller) emitOnConfigMap(cms cache.Store, ev Event) {
	cm, err := c.configMap(cms)
	if err != nil || c.Events == nil {
		return
	}
	typ := corev1.EventTypeNormal
	if ev.Warning {
		typ = corev1.EventTypeWarning
	}
	c.Events.Event(cm, typ, ev.Reason, "node "+c.NodeName+": "+ev.Message)
}

// RecordApplying sets carve.dev/state to applying alone, while an apply
// runs: the Reconciler's BeforeApply hook.
func (c *Controller) RecordApplying(ctx context.Context, _ string, _ []partition.GPUPlan) {
	c.patchState(ctx, carvev1.StateApplying)
}

// RecordChange writes rec, which says that the node is mid-change, as the
// node's record before the change's first disruptive step: the
// Reconciler's RecordChange hook.
func (c *Controller) RecordChange(ctx context.Context, rec carvev1.NodeRecord) error {
	enc, err := rec.Encode()
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{carvev1.AnnotationRecord: enc}}})
	if err != nil {
		return fmt.Errorf("record the change in progress: %w", err)
	}
	n, err := c.Client.Nodes().Patch(ctx, c.NodeName, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("record the change in progress on node %s: %w", c.NodeName, err)
	}
	c.remember(n)
	return nil
}

// patchState sets carve.dev/state alone.
func (c *Controller) patchState(ctx context.Context, state string) {
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q}}}`, carvev1.LabelState, state)
	n, err := c.Client.Nodes().Patch(ctx, c.NodeName, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		c.logger().Warn("could not record the state", "state", state, "err", err)
		return
	}
	c.remember(n)
}

// remember keeps n, the Node as a write of this agent returned it, unless
// a newer one is kept.
func (c *Controller) remember(n *corev1.Node) {
	if n == nil {
		return
	}
	for {
		old := c.wrote.Load()
		if old != nil && !newerNode(n, old) {
			return
		}
		if c.wrote.CompareAndSwap(old, n) {
			return
		}
	}
}

// newest is the newer of cached, the informer's copy of the Node, and
// the Node as this agent's latest write returned it. A pass diffs its
// result against what it reads here: against the informer's copy alone,
// a write it has not seen yet (the record that says mid-change, the state
// applying, both written in the middle of a pass) would be taken for not
// done, and a label or record that the pass sets back to what that copy
// shows would be left out of the patch, so that the node would keep
// saying applying, or mid-change after its rollout slot is released.
func (c *Controller) newest(cached *corev1.Node) *corev1.Node {
	if w := c.wrote.Load(); w != nil && w.UID == cached.UID && newerNode(w, cached) {
		return w
	}
	return cached
}

// newerNode reports whether a is a later version of the Node than b, by
// their resourceVersions (comparable for one resource since Kubernetes
// 1.35); false when either does not parse.
func newerNode(a, b *corev1.Node) bool {
	cmp, err := resourceversion.CompareResourceVersion(a.ResourceVersion, b.ResourceVersion)
	return err == nil && cmp > 0
}

// evict asks the Eviction API to evict the pods holding devices a change
// removes; PodDisruptionBudgets may refuse, and the next reconcile asks
// again.
func (c *Controller) evict(ctx context.Context, node *corev1.Node, holders []plugin.Assignment) {
	seen := map[string]bool{}
	for _, a := range holders {
		key := a.Namespace + "/" + a.Pod
		if seen[key] {
			continue
		}
		seen[key] = true
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: a.Namespace, Name: a.Pod}}
		if err := c.Client.Evictions(a.Namespace).Evict(ctx, ev); err != nil {
			c.logger().Warn("eviction refused", "pod", key, "err", err)
			c.emit(node, Event{Warning: true, Reason: carvev1.ReasonEvicting, Message: fmt.Sprintf("evicting pod %s refused: %s", key, textfmt.OneLine(err.Error()))})
			continue
		}
		c.logger().Info("evicted", "pod", key)
		c.emit(node, Event{Reason: carvev1.ReasonEvicted, Message: fmt.Sprintf("evicted pod %s through the Eviction API: it holds devices a change removes", key)})
	}
}
