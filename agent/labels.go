package agent

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/timeslice"
)

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
	// Options say which optional keys to write.
	Options LabelOptions
}

// LabelOptions choose the optional label keys.
type LabelOptions struct {
	// MIGManagerState also writes the state to NVIDIA's MIG manager label
	// nvidia.com/mig.config.state, with its values (see
	// carvev1.MIGManagerState), for automation built on it.
	MIGManagerState bool
	// CarveOnly leaves out GPU feature discovery's nvidia.com/* keys, for
	// clusters where GFD writes them: carve then writes only carve.dev/*
	// (and nvidia.com/mig.config.state when MIGManagerState asks for it).
	CarveOnly bool
}

// Labels returns the labels carve writes on the node, all of them; keys
// with nothing to say are left out (the patch removes them).
func Labels(in LabelInput) map[string]string {
	out := labelSet{}
	out.set(carvev1.LabelApplied, in.Applied)
	out.set(carvev1.LabelSource, in.Source)
	out.set(carvev1.LabelWindow, in.Window)
	out.set(carvev1.LabelState, in.State)
	if in.Options.MIGManagerState {
		out.set(carvev1.LabelMIGManagerState, carvev1.MIGManagerState(in.State))
	}
	if len(in.GPUs) == 0 || in.Options.CarveOnly {
		return out
	}
	out.gpus(in.GPUs, in.Resources)
	out.sharing(in.GPUs, in.Resources)
	return out
}

// labelSet collects labels; a value with nothing to say is left out.
type labelSet map[string]string

func (l labelSet) set(k, v string) {
	if v = carvev1.LabelValue(v); v != "" {
		l[k] = v
	}
}

// gpus sets the labels that describe the GPUs: their count, and the
// product and memory of the first. The product ends in "-SHARED" when
// whole GPUs are time-sliced under nvidia.com/gpu (GFD's rule:
// replicas above 1, not renamed).
func (l labelSet) gpus(gpus []partition.GPU, res timeslice.Resources) {
	first := slices.MinFunc(gpus, func(a, b partition.GPU) int { return a.Index - b.Index })
	l.set(carvev1.LabelGPUCount, strconv.Itoa(len(gpus)))
	l.set(carvev1.LabelGPUProduct, carvev1.ProductLabel(first.Product, "", sharedUnrenamed(res, "")))
	l.set(carvev1.LabelGPUMemory, strconv.FormatUint(first.MemoryMiB, 10))
	capable := slices.ContainsFunc(gpus, func(g partition.GPU) bool { return g.MIGCapable })
	l.set(carvev1.LabelMIGCapable, strconv.FormatBool(capable))
	l.set(carvev1.LabelMIGStrategy, carvev1.MIGStrategyMixed)
}

// sharedUnrenamed reports whether the devices of a MIG profile ("" for
// whole GPUs) are time-sliced under the resource's own name: what makes
// GPU feature discovery add "-SHARED" to the product label. Replicas
// advertised under a renamed resource (renameShared) do not count.
func sharedUnrenamed(res timeslice.Resources, migProfile string) bool {
	return slices.ContainsFunc(res[carvev1.ResourceName(migProfile, false)], func(d timeslice.Device) bool {
		return d.MIGProfile == migProfile && d.Replicas > 1
	})
}

// migInfo is what the per-MIG-profile labels say of one profile.
type migInfo struct {
	count, replicas int
	memMiB          uint64
	// gpu is the lowest index of a GPU with a device of the profile, and
	// instance that device's instance, whose figures the labels give.
	gpu      int
	instance *partition.Instance
}

// sharing sets the labels that describe the advertised devices: replicas
// of whole GPUs, the sharing strategy, and per MIG profile its devices,
// with the figures GPU feature discovery gives each profile.
func (l labelSet) sharing(gpus []partition.GPU, res timeslice.Resources) {
	instances := map[string]*partition.Instance{} // by MIG device UUID
	products := map[int]string{}                  // by GPU index
	for gi := range gpus {
		products[gpus[gi].Index] = gpus[gi].Product
		for ii := range gpus[gi].Instances {
			if in := &gpus[gi].Instances[ii]; in.Complete() {
				instances[in.UUID()] = in
			}
		}
	}
	gpuReplicas, shared := 1, false
	migs := map[string]*migInfo{}
	for _, devs := range res {
		for _, d := range devs {
			shared = shared || d.Replicas > 1
			if d.MIGProfile == "" {
				gpuReplicas = max(gpuReplicas, d.Replicas)
				continue
			}
			mi := migs[d.MIGProfile]
			if mi == nil {
				mi = &migInfo{replicas: 1, gpu: d.GPU}
				migs[d.MIGProfile] = mi
			}
			if d.Replica <= 0 {
				mi.count++ // each physical device once
			}
			mi.replicas = max(mi.replicas, d.Replicas)
			mi.memMiB = max(mi.memMiB, d.MemoryMiB)
			if in := instances[d.UUID]; in != nil && (mi.instance == nil || d.GPU < mi.gpu) {
				mi.gpu, mi.instance = d.GPU, in
			}
		}
	}
	l.set(carvev1.LabelGPUReplicas, strconv.Itoa(gpuReplicas))
	l.set(carvev1.LabelSharingStrategy, sharingStrategy(shared))
	for profile, mi := range migs {
		key := func(suffix string) string { return carvev1.MIGLabelKey(profile, suffix) }
		l.set(key(carvev1.MIGLabelCount), strconv.Itoa(mi.count))
		l.set(key(carvev1.MIGLabelReplicas), strconv.Itoa(mi.replicas))
		l.set(key(carvev1.MIGLabelMemory), strconv.FormatUint(mi.memMiB, 10))
		l.set(key(carvev1.MIGLabelSharingStrategy), sharingStrategy(mi.replicas > 1))
		l.set(key(carvev1.MIGLabelProduct), carvev1.ProductLabel(products[mi.gpu], profile, sharedUnrenamed(res, profile)))
		if in := mi.instance; in != nil {
			l.migInstance(profile, *in)
		}
	}
}

// migInstance sets the labels that give a MIG profile's slices,
// multiprocessors and engines, from one of its instances; the
// multiprocessors and engines only where its profile's are known.
func (l labelSet) migInstance(profile string, in partition.Instance) {
	key := func(suffix string) string { return carvev1.MIGLabelKey(profile, suffix) }
	l.set(key(carvev1.MIGLabelSlicesGI), strconv.Itoa(in.ComputeSlices))
	l.set(key(carvev1.MIGLabelSlicesCI), strconv.Itoa(in.CIs[0].ComputeSlices))
	e := in.Engines
	if e.Multiprocessors == 0 {
		return
	}
	for suffix, n := range map[string]int{
		carvev1.MIGLabelMultiprocessors: e.Multiprocessors, carvev1.MIGLabelCopyEngines: e.CopyEngines,
		carvev1.MIGLabelDecoders: e.Decoders, carvev1.MIGLabelEncoders: e.Encoders,
		carvev1.MIGLabelJPEGs: e.JPEGs, carvev1.MIGLabelOFAs: e.OFAs,
	} {
		l.set(key(suffix), strconv.Itoa(n))
	}
}

// sharingStrategy is the value of a sharing-strategy label.
func sharingStrategy(shared bool) string {
	if shared {
		return carvev1.SharingTimeSlicing
	}
	return carvev1.SharingNone
}

// MetadataPatch returns a JSON merge patch for a Node's metadata that sets
// the labels in want that differ from cur, removes the labels of cur that
// want lacks and carve owns (carvev1.Owns: its own carve.dev/ keys, and
// the keys prev, the node record the node carries, lists as written by
// carve), and sets the annotations in wantAnnotations that differ from
// curAnnotations. A label carve does not own is never in the patch unless
// want sets it. It returns nil when nothing would change, and an error when
// want holds a key carve may not write (carvev1.MayWrite).
func MetadataPatch(cur, want map[string]string, prev *carvev1.NodeRecord, curAnnotations, wantAnnotations map[string]string) ([]byte, error) {
	labels := map[string]*string{}
	for k, v := range want {
		if !carvev1.MayWrite(k) {
			return nil, fmt.Errorf("metadata patch: label %s is not one carve may write", k)
		}
		if c, ok := cur[k]; !ok || c != v {
			labels[k] = &v
		}
	}
	for k := range cur {
		if _, keep := want[k]; !keep && carvev1.Owns(prev, k) {
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
