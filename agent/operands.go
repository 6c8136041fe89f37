package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/kubeclient"
	"github.com/carve-dev/carve/partition"
)

// DefaultPauseOperands returns the GPU Operator operands that carve-agent
// pauses for a disruptive change unless told otherwise, by how the devices
// are advertised (Config.Advertise), as NVIDIA's MIG manager pauses them:
// always GPU feature discovery, which labels the new layout when it starts
// again, and those whose GPU handles make MIG destroys and GPU resets fail
// (DCGM, its exporter, NVSM, and the third-party GPU clients that the label
// nvidia.com/gpu.deploy.client deploys); with AdvertiseNone also NVIDIA's
// device plugin, which sees a new MIG layout only when it starts again.
// Under carve's own device plugin or DRA driver NVIDIA's plugin is off.
func DefaultPauseOperands(advertise string) []string {
	always := []string{"gpu-feature-discovery", "dcgm-exporter", "dcgm", "nvsm", "client"}
	if advertise != AdvertiseNone {
		return always
	}
	return append([]string{"device-plugin"}, always...)
}

// DefaultOperandTimeout bounds the wait for paused operands' pods to leave
// the node.
const DefaultOperandTimeout = 5 * time.Minute

// Operands pauses and restores NVIDIA GPU Operator operands on the node, the
// way the Operator's MIG manager does, through their deploy labels
// (carvev1.OperandLabel).
type Operands interface {
	// Pause sets each label key to carvev1.OperandPaused and waits, within
	// a bound, until no pod those labels deploy is left on the node. It
	// returns the pods it evicted (namespace/name): those no DaemonSet
	// removes.
	Pause(ctx context.Context, keys []string) ([]string, error)
	// Restore sets each label key back to its value.
	Restore(ctx context.Context, values map[string]string) error
}

// operandsToPause returns the operand labels (of the operands named) to
// pause for a disruptive change, each with the value to restore: those the
// node has, and those already paused by this agent (paused, whose values
// win). A label someone else set to carvev1.OperandPaused is not carve's to
// restore and is left out, as is one set to "false" (the operand is off on
// the node; NVIDIA's MIG manager leaves it so too).
func operandsToPause(labels map[string]string, names []string, paused map[string]string) map[string]string {
	out := maps.Clone(paused)
	for _, name := range names {
		key := carvev1.OperandLabel(name)
		v, ok := labels[key]
		if _, mine := out[key]; mine || !ok || v == carvev1.OperandPaused || v == "false" {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[key] = v
	}
	return out
}

// disruptive reports whether any of the plans destroys an instance,
// changes a MIG mode or resets a GPU.
func disruptive(plans []partition.GPUPlan) bool {
	return slices.ContainsFunc(plans, partition.GPUPlan.Disruptive)
}

// pauseOperands pauses the operands a disruptive apply of plans needs
// paused and records them in the checkpoint first, so that a crash loses
// no value to restore.
func (r *Reconciler) pauseOperands(p *pass, plans []partition.GPUPlan, cp *carvev1.Checkpoint, save func() error) error {
	if r.Operands == nil || !disruptive(plans) {
		return nil
	}
	toPause := operandsToPause(p.in.Labels, r.OperandNames, r.paused)
	if len(toPause) == 0 {
		return nil
	}
	cp.Paused, r.paused = toPause, toPause
	if err := save(); err != nil {
		return fmt.Errorf("checkpoint before pausing GPU Operator operands: %w", err)
	}
	keys := slices.Sorted(maps.Keys(toPause))
	evicted, err := r.Operands.Pause(p.ctx, keys)
	if err != nil {
		p.event(true, carvev1.ReasonOperandsPaused, "pausing %s for the change: %s", strings.Join(keys, ", "), err)
		return fmt.Errorf("pause GPU Operator operands: %w", err)
	}
	also := ""
	if len(evicted) > 0 {
		also = "; evicted pod " + strings.Join(evicted, ", ") + " through the Eviction API"
	}
	p.event(false, carvev1.ReasonOperandsPaused, "paused %s for a disruptive change%s; their pods have left the node", strings.Join(keys, ", "), also)
	return nil
}

// restoreOperands puts the paused operand labels back, if any; on failure
// they stay recorded (and the checkpoint stays) and the next pass retries.
func (p *pass) restoreOperands() {
	r := p.r
	if len(r.paused) == 0 || r.Operands == nil {
		return
	}
	keys := strings.Join(slices.Sorted(maps.Keys(r.paused)), ", ")
	if err := r.Operands.Restore(p.ctx, r.paused); err != nil {
		p.event(true, carvev1.ReasonOperandsRestored, "putting back %s: %s; retried", keys, err)
		p.wakeAt(p.in.Now.Add(r.retryInterval()))
		return
	}
	r.paused = nil
	p.event(false, carvev1.ReasonOperandsRestored, "%s restored", keys)
	if err := r.forgetPaused(); err != nil {
		p.event(true, carvev1.ReasonCheckpointFailed, "%s restored, but the apply checkpoint still lists them: %s", keys, err)
	}
}

// forgetPaused drops the restored operand labels from the checkpoint that
// a failed or unfinished apply leaves, so that an agent restarting from it
// does not put back values someone may have changed since.
func (r *Reconciler) forgetPaused() error {
	if r.Checkpoints == nil {
		return nil
	}
	cp, err := r.Checkpoints.Load()
	if err != nil || cp == nil || len(cp.Paused) == 0 {
		return err
	}
	cp.Paused = nil
	return r.Checkpoints.Save(*cp)
}

// nodeOperands is Operands through the API server: it patches the node's
// labels and lists the pods on the node.
type nodeOperands struct {
	client  kubeclient.Interface
	node    string
	timeout time.Duration
	every   time.Duration
}

var _ Operands = (*nodeOperands)(nil)

// Pause implements Operands. The operands' pods are those on the node
// whose nodeSelector or required node affinity names one of the keys, as
// the GPU Operator's DaemonSets and third-party GPU clients do. A
// DaemonSet's pod leaves once the label no longer selects the node; any
// other (a label change moves no running pod) is evicted through the
// Eviction API, asked again each round, so that PodDisruptionBudgets hold.
func (o *nodeOperands) Pause(ctx context.Context, keys []string) ([]string, error) {
	values := make(map[string]string, len(keys))
	for _, k := range keys {
		values[k] = carvev1.OperandPaused
	}
	if err := o.patch(ctx, values); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	evicted := map[string]bool{}
	var refused error
	for {
		left, err := o.podsOf(ctx, keys)
		if err == nil && len(left) == 0 {
			return slices.Sorted(maps.Keys(evicted)), nil
		}
		if err == nil {
			if r := o.evict(ctx, left, evicted); r != nil {
				refused = r
			}
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return nil, fmt.Errorf("pods of the paused operands: %w", err)
			}
			return nil, stillThere(left, o.timeout, refused)
		case <-time.After(o.every):
		}
	}
}

// stillThere is the error of a pause whose pods did not leave in time.
func stillThere(left []corev1.Pod, timeout time.Duration, refused error) error {
	names := make([]string, 0, len(left))
	for i := range left {
		names = append(names, podKey(&left[i]))
	}
	err := fmt.Errorf("pods %s still on the node after %s", strings.Join(names, ", "), timeout)
	if refused != nil {
		err = fmt.Errorf("%w; the last eviction refused: %w", err, refused)
	}
	return err
}

// evict asks the Eviction API to evict those of pods that no DaemonSet
// removes and that are not on their way out, noting each it evicted; it
// returns the last refusal, nil when none was refused.
func (o *nodeOperands) evict(ctx context.Context, pods []corev1.Pod, evicted map[string]bool) error {
	var refused error
	for i := range pods {
		pod := &pods[i]
		if pod.DeletionTimestamp != nil || !evictable(pod) {
			continue
		}
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name}}
		err := o.client.Evictions(pod.Namespace).Evict(ctx, ev)
		switch {
		case err == nil:
			evicted[podKey(pod)] = true
		case ctx.Err() != nil:
			return refused // the pause's time is up, not a refusal
		case !apierrors.IsNotFound(err):
			refused = fmt.Errorf("pod %s: %w", podKey(pod), err)
		}
	}
	return refused
}

// evictable reports whether carve evicts a paused operand's pod: not a
// DaemonSet's, which its controller removes, nor a static pod's mirror,
// which the kubelet would bring back.
func evictable(pod *corev1.Pod) bool {
	owner := metav1.GetControllerOf(pod)
	return owner == nil || (owner.Kind != "DaemonSet" && owner.Kind != "Node")
}

func podKey(pod *corev1.Pod) string { return pod.Namespace + "/" + pod.Name }

// Restore implements Operands.
func (o *nodeOperands) Restore(ctx context.Context, values map[string]string) error {
	return o.patch(ctx, values)
}

func (o *nodeOperands) patch(ctx context.Context, values map[string]string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": values}})
	if err != nil {
		return fmt.Errorf("operand labels: %w", err)
	}
	if _, err := o.client.Nodes().Patch(ctx, o.node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("set operand labels: %w", err)
	}
	return nil
}

// podsOf lists the running pods on the node that one of the label keys
// deploys.
func (o *nodeOperands) podsOf(ctx context.Context, keys []string) ([]corev1.Pod, error) {
	list, err := o.client.Pods("").List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", o.node).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("list pods on node %s: %w", o.node, err)
	}
	return slices.DeleteFunc(list.Items, func(pod corev1.Pod) bool {
		done := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
		return done || !slices.ContainsFunc(keys, func(k string) bool { return selects(&pod.Spec, k) })
	}), nil
}

// selects reports whether a pod's spec asks for the node label key: in its
// nodeSelector, or in a term of its required node affinity.
func selects(spec *corev1.PodSpec, key string) bool {
	if _, ok := spec.NodeSelector[key]; ok {
		return true
	}
	if spec.Affinity == nil || spec.Affinity.NodeAffinity == nil || spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	for _, term := range spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		if slices.ContainsFunc(term.MatchExpressions, func(r corev1.NodeSelectorRequirement) bool { return r.Key == key }) {
			return true
		}
	}
	return false
}
