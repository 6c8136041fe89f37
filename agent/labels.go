// Package agent is carve's node agent: it selects the profile in force for
// its node, plans and applies the MIG partition through partition, expands
// the result into device-plugin resources through timeslice, advertises them
// through plugin, and records what it did in node labels, the
// carve.dev/partition annotation and Events. It is the only package of carve
// that knows Kubernetes; the reconcile itself (Reconciler) is free of it.
package agent

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/timeslice"
)

// Node labels the agent writes (shared/spec.md, "Node labels and annotations
// written by the agent").
const (
	LabelApplied         = "carve.dev/profile.applied"
	LabelSource          = "carve.dev/profile.source"
	LabelWindow          = "carve.dev/window"
	LabelState           = "carve.dev/state"
	LabelGPUCount        = "nvidia.com/gpu.count"
	LabelGPUProduct      = "nvidia.com/gpu.product"
	LabelGPUMemory       = "nvidia.com/gpu.memory"
	LabelGPUReplicas     = "nvidia.com/gpu.replicas"
	LabelSharingStrategy = "nvidia.com/gpu.sharing-strategy"
	LabelMIGCapable      = "nvidia.com/mig.capable"
	LabelMIGStrategy     = "nvidia.com/mig.strategy"

	// migLabelPrefix starts the per-MIG-profile labels
	// nvidia.com/mig-<profile>.count, .replicas and .memory.
	migLabelPrefix = "nvidia.com/mig-"
)

// States of a node, the values of carve.dev/state.
const (
	StateSuccess        = "success"
	StatePending        = "pending"
	StateDraining       = "draining"
	StateApplying       = "applying"
	StateFailed         = "failed"
	StateRebootRequired = "reboot-required"
)

// Values of nvidia.com/gpu.sharing-strategy and nvidia.com/mig.strategy.
const (
	sharingNone        = "none"
	sharingTimeSlicing = "time-slicing"
	migStrategyMixed   = "mixed"
)

// ownedKeys are the label keys the agent owns outright.
func ownedKeys() []string {
	return []string{
		LabelApplied, LabelSource, LabelWindow, LabelState,
		LabelGPUCount, LabelGPUProduct, LabelGPUMemory, LabelGPUReplicas, LabelSharingStrategy,
		LabelMIGCapable, LabelMIGStrategy,
	}
}

// migLabelSuffixes end the per-MIG-profile labels the agent owns.
func migLabelSuffixes() []string { return []string{".count", ".replicas", ".memory"} }

// Owned reports whether the agent owns the label key: one of the keys
// spec.md lists, or nvidia.com/mig-<profile>.count, .replicas or .memory.
// The agent writes and removes owned labels only.
func Owned(key string) bool {
	for _, k := range ownedKeys() {
		if key == k {
			return true
		}
	}
	rest, ok := strings.CutPrefix(key, migLabelPrefix)
	if !ok {
		return false
	}
	for _, s := range migLabelSuffixes() {
		if p, ok := strings.CutSuffix(rest, s); ok && p != "" {
			return true
		}
	}
	return false
}

// LabelInput is what the node labels are computed from: the selection and
// state of the last reconcile and what the GPUs hold now.
type LabelInput struct {
	// Applied is the profile realised on the node, "" when none is.
	Applied string
	// Source is why Applied is in force (window, label, rule, default).
	Source string
	// Window is the active window's name, "" outside windows.
	Window string
	// State is one of the State constants.
	State string
	// GPUs are the node's GPUs as they are now.
	GPUs []partition.GPU
	// Resources are the devices advertised.
	Resources timeslice.Resources
}

// Labels returns the owned labels the node should carry, all of them; keys
// with nothing to say are left out (the patch removes them).
func Labels(in LabelInput) map[string]string {
	out := map[string]string{}
	set := func(k, v string) {
		if v = labelValue(v); v != "" {
			out[k] = v
		}
	}
	set(LabelApplied, in.Applied)
	set(LabelSource, in.Source)
	set(LabelWindow, in.Window)
	set(LabelState, in.State)
	if len(in.GPUs) == 0 {
		return out
	}
	gpus := append([]partition.GPU(nil), in.GPUs...)
	sort.SliceStable(gpus, func(i, j int) bool { return gpus[i].Index < gpus[j].Index })
	set(LabelGPUCount, strconv.Itoa(len(gpus)))
	set(LabelGPUProduct, gpus[0].Product)
	set(LabelGPUMemory, strconv.FormatUint(gpus[0].MemoryMiB, 10))
	capable := false
	for _, g := range gpus {
		capable = capable || g.MIGCapable
	}
	set(LabelMIGCapable, strconv.FormatBool(capable))
	set(LabelMIGStrategy, migStrategyMixed)

	gpuReplicas, shared := 1, false
	type migInfo struct {
		count, replicas int
		memMiB          uint64
	}
	migs := map[string]*migInfo{}
	for _, devs := range in.Resources {
		for _, d := range devs {
			if d.Replicas > 1 {
				shared = true
			}
			if d.MIGProfile == "" {
				gpuReplicas = max(gpuReplicas, d.Replicas)
				continue
			}
			mi := migs[d.MIGProfile]
			if mi == nil {
				mi = &migInfo{replicas: 1}
				migs[d.MIGProfile] = mi
			}
			if d.Replica <= 0 {
				mi.count++ // each physical device once
			}
			mi.replicas = max(mi.replicas, d.Replicas)
			mi.memMiB = max(mi.memMiB, d.MemoryMiB)
		}
	}
	set(LabelGPUReplicas, strconv.Itoa(gpuReplicas))
	strategy := sharingNone
	if shared {
		strategy = sharingTimeSlicing
	}
	set(LabelSharingStrategy, strategy)
	for profile, mi := range migs {
		base := migLabelPrefix + strings.ReplaceAll(profile, "+", ".")
		set(base+".count", strconv.Itoa(mi.count))
		set(base+".replicas", strconv.Itoa(mi.replicas))
		set(base+".memory", strconv.FormatUint(mi.memMiB, 10))
	}
	return out
}

// labelValue turns s into a valid label value as GPU feature discovery
// does with product names: spaces become '-', characters a label value may
// not hold are dropped, the result is cut to 63 characters and trimmed so
// that it starts and ends with a letter or digit.
func labelValue(s string) string {
	var b strings.Builder
	for _, c := range s {
		switch {
		case c == ' ':
			b.WriteByte('-')
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
			b.WriteRune(c)
		}
	}
	v := b.String()
	if len(v) > 63 {
		v = v[:63]
	}
	return strings.TrimFunc(v, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9')
	})
}

// MetadataPatch returns a JSON merge patch for a Node's metadata that sets
// the owned labels in want that differ from cur, removes the owned labels
// of cur that want lacks, and sets the annotations in wantAnnotations that
// differ from curAnnotations. Labels the agent does not own are never in
// the patch. It returns nil when nothing would change, and an error when
// want holds a label the agent does not own.
func MetadataPatch(cur, want, curAnnotations, wantAnnotations map[string]string) ([]byte, error) {
	labels := map[string]*string{}
	for k, v := range want {
		if !Owned(k) {
			return nil, fmt.Errorf("metadata patch: label %s is not one the agent owns", k)
		}
		if c, ok := cur[k]; !ok || c != v {
			labels[k] = &v
		}
	}
	for k := range cur {
		if _, keep := want[k]; !keep && Owned(k) {
			labels[k] = nil
		}
	}
	annotations := map[string]string{}
	for k, v := range wantAnnotations {
		if c, ok := curAnnotations[k]; !ok || c != v {
			annotations[k] = v
		}
	}
	if len(labels) == 0 && len(annotations) == 0 {
		return nil, nil
	}
	meta := map[string]any{}
	if len(labels) > 0 {
		meta["labels"] = labels
	}
	if len(annotations) > 0 {
		meta["annotations"] = annotations
	}
	b, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return nil, fmt.Errorf("metadata patch: %w", err)
	}
	return b, nil
}
