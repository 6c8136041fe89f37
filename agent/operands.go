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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/partition"
)

// DefaultPauseOperands are the GPU Operator operands paused for a
// disruptive change unless Config.PauseOperands says otherwise: DCGM and
// its exporter hold GPU handles that make MIG destroys and GPU resets fail.
var DefaultPauseOperands = []string{"dcgm-exporter", "dcgm"}

// DefaultOperandTimeout bounds the wait for paused operands' pods to leave
// the node.
const DefaultOperandTimeout = 5 * time.Minute

// Operands pauses and restores NVIDIA GPU Operator operands on the node, the
// way the Operator's MIG manager does, through their deploy labels
// (carvev1.OperandLabel).
type Operands interface {
	// Pause sets each label key to carvev1.OperandPaused and waits, within
	// a bound, until no pod those labels deploy is left on the node.
	Pause(ctx context.Context, keys []string) error
	// Restore sets each label key back to its value.
	Restore(ctx context.Context, values map[string]string) error
}

// operandsToPause returns the operand labels (of the operands named) to
// pause for a disruptive change, each with the value to restore: those the
// node has, and those already paused by this agent (paused, whose values
// win). A label someone else set to carvev1.OperandPaused is not carve's to
// restore and is left out.
func operandsToPause(labels map[string]string, names []string, paused map[string]string) map[string]string {
	out := maps.Clone(paused)
	for _, name := range names {
		key := carvev1.OperandLabel(name)
		v, ok := labels[key]
		if _, mine := out[key]; mine || !ok || v == carvev1.OperandPaused {
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
	if err := r.Operands.Pause(p.ctx, keys); err != nil {
		p.event(true, carvev1.ReasonOperandsPaused, "pausing %s for the change: %s", strings.Join(keys, ", "), err)
		return fmt.Errorf("pause GPU Operator operands: %w", err)
	}
	p.event(false, carvev1.ReasonOperandsPaused, "paused %s for a disruptive change; their pods have left the node", strings.Join(keys, ", "))
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
	client  kubernetes.Interface
	node    string
	timeout time.Duration
	every   time.Duration
}

var _ Operands = (*nodeOperands)(nil)

// Pause implements Operands. The operands' pods are those on the node whose
// nodeSelector names one of the keys, as the GPU Operator's DaemonSets do.
func (o *nodeOperands) Pause(ctx context.Context, keys []string) error {
	values := make(map[string]string, len(keys))
	for _, k := range keys {
		values[k] = carvev1.OperandPaused
	}
	if err := o.patch(ctx, values); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	for {
		left, err := o.podsOf(ctx, keys)
		if err == nil && len(left) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("pods of the paused operands: %w", err)
			}
			return fmt.Errorf("pods %s still on the node after %s", strings.Join(left, ", "), o.timeout)
		case <-time.After(o.every):
		}
	}
}

// Restore implements Operands.
func (o *nodeOperands) Restore(ctx context.Context, values map[string]string) error {
	return o.patch(ctx, values)
}

func (o *nodeOperands) patch(ctx context.Context, values map[string]string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": values}})
	if err != nil {
		return fmt.Errorf("operand labels: %w", err)
	}
	if _, err := o.client.CoreV1().Nodes().Patch(ctx, o.node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("set operand labels: %w", err)
	}
	return nil
}

// podsOf lists the running pods on the node that one of the label keys
// deploys (namespace/name).
func (o *nodeOperands) podsOf(ctx context.Context, keys []string) ([]string, error) {
	list, err := o.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", o.node).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("list pods on node %s: %w", o.node, err)
	}
	var out []string
	for _, pod := range list.Items {
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, k := range keys {
			if _, ok := pod.Spec.NodeSelector[k]; ok {
				out = append(out, pod.Namespace+"/"+pod.Name)
				break
			}
		}
	}
	return out, nil
}
