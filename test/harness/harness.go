package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/carve-dev/carve/agent"
	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/test/cluster"
)

// ResourcePrefix starts the names of the resources carve advertises.
const ResourcePrefix = "nvidia.com/"

// Poll calls cond every 250 ms until it returns true or an error, or limit
// passes (an error that says so). An error cond marks with Retry keeps it
// polling; the last such error is named when time runs out.
func Poll(ctx context.Context, limit time.Duration, cond func(context.Context) (bool, error)) error {
	return PollEvery(ctx, 250*time.Millisecond, limit, cond)
}

// PollEvery is Poll with another interval.
func PollEvery(ctx context.Context, every, limit time.Duration, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var transient error
	for {
		ok, err := cond(ctx)
		var r retryError
		switch {
		case errors.As(err, &r):
			transient = r.err
		case err != nil || ok:
			return err
		}
		select {
		case <-ctx.Done():
			if transient != nil {
				return fmt.Errorf("gave up after %s (last transient error: %w): %w", limit, transient, ctx.Err())
			}
			return fmt.Errorf("gave up after %s: %w", limit, ctx.Err())
		case <-time.After(every):
		}
	}
}

// Retry marks err as transient for Poll (an API server restarting, an
// object not there yet): Poll goes on and names err only if time runs out.
// Retry(nil) is nil.
func Retry(err error) error {
	if err == nil {
		return nil
	}
	return retryError{err: err}
}

type retryError struct{ err error }

func (r retryError) Error() string { return "transient: " + r.err.Error() }
func (r retryError) Unwrap() error { return r.err }

// DevicePod is a pod in namespace default that asks for n devices of a
// resource and writes the devices it was given (NVIDIA_VISIBLE_DEVICES) to
// its termination message; with hold it sleeps that long first. It carries
// the label app=<name>.
func DevicePod(name, res string, n int64, hold time.Duration) *corev1.Pod {
	return ResourcePod(name, map[string]int64{res: n}, hold)
}

// ResourcePod is DevicePod asking for several resources at once.
func ResourcePod(name string, limits map[string]int64, hold time.Duration) *corev1.Pod {
	script := `printf "%s" "$NVIDIA_VISIBLE_DEVICES" > /dev/termination-log`
	if hold > 0 {
		script = fmt.Sprintf("sleep %d; %s", int(hold.Seconds()), script)
	}
	rl := corev1.ResourceList{}
	for res, n := range limits {
		rl[corev1.ResourceName(res)] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			HostNetwork:                   true,
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name:            "c",
				Image:           cluster.BusyboxImage,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"/bin/sh", "-c", script},
				Resources:       corev1.ResourceRequirements{Limits: rl},
			}},
		},
	}
}

// DeletePod deletes a pod at once and waits until it is gone; a pod that
// does not exist is not an error.
func DeletePod(ctx context.Context, cs kubernetes.Interface, namespace, name string) error {
	zero := int64(0)
	err := cs.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete pod %s/%s: %w", namespace, name, err)
	}
	return WaitPodGone(ctx, cs, namespace, name, time.Minute)
}

// WaitPodGone waits until a pod no longer exists.
func WaitPodGone(ctx context.Context, cs kubernetes.Interface, namespace, name string, limit time.Duration) error {
	err := Poll(ctx, limit, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("pod %s/%s still there: %w", namespace, name, err)
	}
	return nil
}

// PodPhase returns a pod's phase ("" when it cannot be read).
func PodPhase(ctx context.Context, cs kubernetes.Interface, namespace, name string) corev1.PodPhase {
	p, err := cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return p.Status.Phase
}

// PodMessage waits for a pod to succeed and returns its termination
// message; a failed pod is an error.
func PodMessage(ctx context.Context, cs kubernetes.Interface, namespace, name string, limit time.Duration) (string, error) {
	var msg string
	var phase corev1.PodPhase
	err := Poll(ctx, limit, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, Retry(err)
		}
		phase = p.Status.Phase
		if phase == corev1.PodFailed {
			return false, fmt.Errorf("pod %s failed: %s %s", name, p.Status.Reason, p.Status.Message)
		}
		if phase != corev1.PodSucceeded || len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Terminated == nil {
			return false, nil
		}
		msg = p.Status.ContainerStatuses[0].State.Terminated.Message
		return true, nil
	})
	if err != nil {
		return "", fmt.Errorf("pod %s (phase %s): %w", name, phase, err)
	}
	return msg, nil
}

// Allocatable returns the node's allocatable count of every resource whose
// name starts with ResourcePrefix, leaving out those at zero (the kubelet
// keeps a resource whose devices went away at zero for a while).
func Allocatable(n *corev1.Node) map[string]int64 {
	out := map[string]int64{}
	for name, q := range n.Status.Allocatable {
		if strings.HasPrefix(string(name), ResourcePrefix) && q.Value() != 0 {
			out[string(name)] = q.Value()
		}
	}
	return out
}

// WaitAllocatable waits until the node's non-zero carve resources are
// exactly want, and returns the last ones seen with the error.
func WaitAllocatable(ctx context.Context, cs kubernetes.Interface, node string, want map[string]int64, limit time.Duration) (map[string]int64, error) {
	var last map[string]int64
	err := Poll(ctx, limit, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, Retry(err) // the API server may be restarting
		}
		last = Allocatable(n)
		return maps.Equal(last, want), nil
	})
	if err != nil {
		return last, fmt.Errorf("allocatable: want %v, last seen %v: %w", want, last, err)
	}
	return last, nil
}

// OwnedLabels returns the node labels carve-agent owns: its own
// carve.dev/ keys and those its node record lists as written by it.
func OwnedLabels(n *corev1.Node) map[string]string {
	var rec *carvev1.NodeRecord
	if r, err := RecordOf(n); err == nil {
		rec = &r
	}
	out := map[string]string{}
	for k, v := range n.Labels {
		if carvev1.Owns(rec, k) {
			out[k] = v
		}
	}
	return out
}

// FormatLabels writes labels as sorted k=v lines with an indent.
func FormatLabels(labels map[string]string, indent string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		fmt.Fprintf(&b, "%s%s=%s\n", indent, k, labels[k])
	}
	return b.String()
}

// WaitNode waits until cond holds for the node and returns it; the error
// names what was awaited and shows the owned labels last seen.
func WaitNode(ctx context.Context, cs kubernetes.Interface, node string, limit time.Duration, what string, cond func(*corev1.Node) bool) (*corev1.Node, error) {
	return WaitNodeEvery(ctx, cs, node, 250*time.Millisecond, limit, what, cond)
}

// WaitNodeEvery is WaitNode reading the node at another interval.
func WaitNodeEvery(ctx context.Context, cs kubernetes.Interface, node string, every, limit time.Duration, what string, cond func(*corev1.Node) bool) (*corev1.Node, error) {
	var last *corev1.Node
	err := PollEvery(ctx, every, limit, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, Retry(err)
		}
		last = n
		return cond(n), nil
	})
	if err != nil {
		var labels map[string]string
		if last != nil {
			labels = OwnedLabels(last)
		}
		return last, fmt.Errorf("node %s never got %s (carve labels %v): %w", node, what, labels, err)
	}
	return last, nil
}

// WaitState waits until the node carries carve.dev/state=state and, when
// applied is not empty, carve.dev/profile.applied=applied.
func WaitState(ctx context.Context, cs kubernetes.Interface, node, state, applied string, limit time.Duration) (*corev1.Node, error) {
	what := carvev1.LabelState + "=" + state
	if applied != "" {
		what += ", " + carvev1.LabelApplied + "=" + applied
	}
	return WaitNode(ctx, cs, node, limit, what, func(n *corev1.Node) bool {
		return n.Labels[carvev1.LabelState] == state && (applied == "" || n.Labels[carvev1.LabelApplied] == applied)
	})
}

// RecordOf decodes the node's record, the carve.dev/partition annotation.
func RecordOf(n *corev1.Node) (carvev1.NodeRecord, error) {
	s, ok := n.Annotations[carvev1.AnnotationRecord]
	if !ok {
		return carvev1.NodeRecord{}, fmt.Errorf("node %s has no %s annotation", n.Name, carvev1.AnnotationRecord)
	}
	return carvev1.DecodeNodeRecord(s)
}

// SetNodeLabels sets labels on a node; an empty value removes the label.
func SetNodeLabels(ctx context.Context, cs kubernetes.Interface, node string, labels map[string]string) error {
	set := map[string]*string{}
	for k, v := range labels {
		if v == "" {
			set[k] = nil
			continue
		}
		set[k] = &v
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": set}})
	if err != nil {
		return err
	}
	if _, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("label node %s: %w", node, err)
	}
	return nil
}

// ResetNode removes what carve-agent wrote on the node (its labels and the
// carve.dev/partition annotation), the operator's carve.dev/profile and
// carve.dev/hold labels and the driver upgrade state label, so that the
// next agent starts from a node it never saw.
func ResetNode(ctx context.Context, cs kubernetes.Interface, node string) error {
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reset node %s: %w", node, err)
	}
	labels := map[string]any{carvev1.LabelProfile: nil, carvev1.LabelHold: nil, carvev1.LabelDriverUpgrade: nil}
	for k := range OwnedLabels(n) {
		labels[k] = nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels": labels, "annotations": map[string]any{carvev1.AnnotationRecord: nil},
	}})
	if err != nil {
		return err
	}
	if _, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("reset node %s: %w", node, err)
	}
	return nil
}

// ApplyProfiles creates or replaces the profile ConfigMap namespace/name
// with profiles.yaml = data, creating the namespace when needed.
func ApplyProfiles(ctx context.Context, cs kubernetes.Interface, namespace, name, data string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", namespace, err)
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Data:       map[string]string{agent.ConfigKey: data},
	}
	cms := cs.CoreV1().ConfigMaps(namespace)
	_, err := cms.Update(ctx, cm, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("ConfigMap %s/%s: %w", namespace, name, err)
	}
	return nil
}

// DeleteProfiles deletes the profile ConfigMap; a missing one is fine.
func DeleteProfiles(ctx context.Context, cs kubernetes.Interface, namespace, name string) error {
	err := cs.CoreV1().ConfigMaps(namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete ConfigMap %s/%s: %w", namespace, name, err)
	}
	return nil
}

// NodeEvents lists the Events on the node with the given reason (all
// reasons when empty), oldest first.
func NodeEvents(ctx context.Context, cs kubernetes.Interface, node, reason string) ([]corev1.Event, error) {
	sel := fields.Set{"involvedObject.kind": "Node", "involvedObject.name": node}
	if reason != "" {
		sel["reason"] = reason
	}
	list, err := cs.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: sel.AsSelector().String()})
	if err != nil {
		return nil, fmt.Errorf("events of node %s: %w", node, err)
	}
	evs := list.Items
	slices.SortFunc(evs, func(a, b corev1.Event) int { return eventTime(a).Compare(eventTime(b)) })
	return evs, nil
}

func eventTime(e corev1.Event) time.Time {
	if !e.LastTimestamp.IsZero() {
		return e.LastTimestamp.Time
	}
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// WaitEvent waits for an Event on the node with the reason whose message
// contains substr, created at or after since, and returns it.
func WaitEvent(ctx context.Context, cs kubernetes.Interface, node, reason, substr string, since time.Time, limit time.Duration) (corev1.Event, error) {
	var found corev1.Event
	var seen []string
	err := Poll(ctx, limit, func(ctx context.Context) (bool, error) {
		evs, err := NodeEvents(ctx, cs, node, reason)
		if err != nil {
			return false, Retry(err)
		}
		seen = seen[:0]
		for _, e := range evs {
			seen = append(seen, e.Message)
			if !eventTime(e).Before(since.Truncate(time.Second)) && strings.Contains(e.Message, substr) {
				found = e
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return found, fmt.Errorf("no %s Event containing %q since %s (seen: %q): %w", reason, substr, since.Format(time.RFC3339), seen, err)
	}
	return found, nil
}

// WaitConfigMapEvent waits up to limit for an Event with reason on the
// ConfigMap namespace/name, emitted since since.
func WaitConfigMapEvent(ctx context.Context, cs kubernetes.Interface, namespace, name, reason string, since time.Time, limit time.Duration) (corev1.Event, error) {
	var found corev1.Event
	err := Poll(ctx, limit, func(ctx context.Context) (bool, error) {
		list, err := cs.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
			"involvedObject.kind": "ConfigMap", "involvedObject.name": name, "reason": reason,
		}.String()})
		if err != nil {
			return false, Retry(err)
		}
		for _, e := range list.Items {
			if !eventTime(e).Before(since.Truncate(time.Second)) {
				found = e
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return found, fmt.Errorf("no %s Event on ConfigMap %s/%s since %s: %w", reason, namespace, name, since.Format(time.RFC3339), err)
	}
	return found, nil
}

// DisruptionReasonEviction is the reason of the DisruptionTarget condition
// the API server sets on a pod it evicts through the Eviction API, before it
// deletes the pod; a plain delete sets none.
const DisruptionReasonEviction = "EvictionByEvictionAPI"

// WatchDisruption watches pod namespace/name from now on (an informer, which
// lists, watches and watches again as needed) for its DisruptionTarget
// condition. The returned stop waits (up to 30 s) until the pod is seen
// deleted, ends the watch and returns the condition's reason ("" when the
// pod never had it) and what was seen of the pod, a line per change, for a
// failure message.
func WatchDisruption(ctx context.Context, cs kubernetes.Interface, namespace, name string) (stop func() (string, []string), err error) {
	lw := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "pods", namespace, fields.OneTermEqualSelector("metadata.name", name))
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	var (
		mu      sync.Mutex
		reason  string
		seen    []string
		deleted = make(chan struct{})
		once    sync.Once
	)
	record := func(what string, obj any) {
		mu.Lock()
		defer mu.Unlock()
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		p, ok := obj.(*corev1.Pod)
		if !ok {
			seen = append(seen, fmt.Sprintf("%s %T", what, obj))
			return
		}
		var conds []string
		for _, cond := range p.Status.Conditions {
			conds = append(conds, fmt.Sprintf("%s=%s(%s)", cond.Type, cond.Status, cond.Reason))
			if cond.Type == corev1.DisruptionTarget && cond.Status == corev1.ConditionTrue {
				reason = cond.Reason
			}
		}
		seen = append(seen, fmt.Sprintf("%s %s deleting=%v %s", what, p.Status.Phase, p.DeletionTimestamp != nil, strings.Join(conds, " ")))
	}
	_, err = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { record("add", obj) },
		UpdateFunc: func(_, obj any) { record("update", obj) },
		DeleteFunc: func(obj any) {
			record("delete", obj)
			once.Do(func() { close(deleted) })
		},
	})
	if err != nil {
		return nil, fmt.Errorf("watch pod %s/%s: %w", namespace, name, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		inf.RunWithContext(ctx)
	}()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		cancel()
		<-done
		return nil, fmt.Errorf("watch pod %s/%s: %w", namespace, name, ctx.Err())
	}
	return func() (string, []string) {
		select {
		case <-deleted:
		case <-time.After(30 * time.Second):
		}
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return reason, seen
	}, nil
}

// WaitNamespaceGone waits up to limit until the namespace is deleted (its
// deletion is asynchronous: the namespace stays while its objects go).
func WaitNamespaceGone(ctx context.Context, cs kubernetes.Interface, name string, limit time.Duration) error {
	return Poll(ctx, limit, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}
