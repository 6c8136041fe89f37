package nvimport

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/internal/textfmt"
)

// Field names of NVIDIA's device plugin config (version v1).
const (
	dpVersion      = "version"
	dpFlags        = "flags"
	dpResources    = "resources"
	dpSharing      = "sharing"
	dpImex         = "imex"
	dpMIGStrategy  = "migStrategy"
	dpPlugin       = "plugin"
	dpTimeSlicing  = "timeSlicing"
	dpMPS          = "mps"
	dpRenameByDef  = "renameByDefault"
	dpFailRequests = "failRequestsGreaterThanOne"
	dpName         = "name"
	dpRename       = "rename"
	dpDevices      = "devices"
	dpReplicas     = "replicas"
)

// The device plugin's MIG strategies.
const (
	strategyNone   = "none"
	strategySingle = "single"
	strategyMixed  = "mixed"
)

// dpConfig is the sharing one device plugin config asks for.
type dpConfig struct {
	// name names the config: its ConfigMap data key, or its file's base
	// name without extension.
	name, source string
	// gpuReplicas are the replicas of nvidia.com/gpu (0: not shared).
	gpuReplicas int
	gpuPath     string
	// migReplicas are the replicas by MIG resource name
	// ("nvidia.com/mig-1g.10gb"), and where each was given.
	migReplicas map[string]int
	migPaths    map[string]string
	// rename is renameByDefault, failMany failRequestsGreaterThanOne.
	rename, failMany bool
	// strategy is flags.migStrategy ("" when not given).
	strategy, strategyPath string
}

// parseDevicePluginFiles reads every device plugin config of the files.
func parseDevicePluginFiles(ps *problems, files []File) []*dpConfig {
	var out []*dpConfig
	from := map[string]string{}
	for _, f := range files {
		docs, _, ok := readFile(ps, f)
		if !ok {
			continue
		}
		for _, doc := range docs {
			if len(out) == maxDevicePlugin {
				ps.errorf(doc.source, "", "more than %d device plugin configs", maxDevicePlugin)
				return out
			}
			if prev, dup := from[doc.name]; dup {
				ps.errorf(doc.source, "", "a device plugin config named %s also comes from %s; names must differ", doc.name, prev)
				continue
			}
			from[doc.name] = doc.source
			out = append(out, parseDevicePlugin(ps, doc))
		}
	}
	return out
}

// pickDefault returns the config whose sharing the profiles get under their
// own names (see Options.DefaultDevicePlugin).
func pickDefault(ps *problems, dps []*dpConfig, want string) *dpConfig {
	names := make([]string, len(dps))
	for i, dp := range dps {
		if dp.name == want {
			return dp
		}
		names[i] = dp.name
	}
	switch {
	case want == "" && len(dps) == 1:
		return dps[0]
	case want == "":
		return nil
	case len(dps) == 0:
		ps.errorf("", "", "--device-plugin-default %s: no device plugin config given", want)
	default:
		ps.errorf("", "", "--device-plugin-default %s: no device plugin config of that name (have: %s)", want, strings.Join(names, ", "))
	}
	return nil
}

// parseDevicePlugin reads one device plugin config. What the device plugin
// itself refuses is an error; what it ignores, and what carve has no
// counterpart for, is a note.
func parseDevicePlugin(ps *problems, doc document) *dpConfig {
	d := &decoder{ps: ps, source: doc.source}
	dp := &dpConfig{name: doc.name, source: doc.source, migReplicas: map[string]int{}, migPaths: map[string]string{}}
	top, ok := d.mapping("", doc.tree)
	if !ok {
		return dp
	}
	for _, k := range slices.Sorted(maps.Keys(top)) {
		v := top[k]
		switch k {
		case dpVersion:
			if s, ok := d.str(k, v); ok && s != "" && s != "v1" {
				d.errorf(k, "%q: only v1 is known", s)
			}
		case dpFlags:
			d.dpFlags(dp, v)
		case dpSharing:
			d.dpSharing(dp, v)
		case dpResources:
			if v != nil {
				d.notef(k, "not carried over: the device plugin ignores custom resource names too; carve advertises nvidia.com/gpu and nvidia.com/mig-<profile>")
			}
		case dpImex:
			if v != nil {
				d.notef(k, "not carried over: IMEX channels are no part of a carve profile")
			}
		default:
			d.notef(k, "unknown field; ignored, as the device plugin ignores it")
		}
	}
	return dp
}

func (d *decoder) dpFlags(dp *dpConfig, v any) {
	if v == nil {
		return
	}
	m, ok := d.mapping(dpFlags, v)
	if !ok {
		return
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		p, v := textfmt.Field(dpFlags, k), m[k]
		switch {
		case v == nil:
		case k == dpMIGStrategy:
			s, ok := d.str(p, v)
			switch {
			case !ok:
			case s == strategyNone || s == strategySingle || s == strategyMixed:
				dp.strategy, dp.strategyPath = s, p
			default:
				d.errorf(p, "%q: want none, single or mixed", s)
			}
		case k == dpPlugin:
			d.dpPluginFlags(p, v)
		default:
			d.notef(p, "not carried over: a device plugin setting with no counterpart in a carve profile")
		}
	}
}

func (d *decoder) dpPluginFlags(p string, v any) {
	m, ok := d.mapping(p, v)
	if !ok {
		return
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fp, v := textfmt.Field(p, k), m[k]
		if v == nil {
			continue
		}
		switch k {
		case "deviceListStrategy":
			var list []string
			switch x := v.(type) {
			case string:
				list = []string{x}
			case []any:
				for _, s := range x {
					list = append(list, fmt.Sprint(s))
				}
			}
			for _, s := range list {
				switch s {
				case "envvar":
				case "cdi-annotations", "cdi-cri":
					d.notef(fp, "%s: not part of a carve profile: carve-agent --cdi answers Allocate with CDI device names too", s)
				default:
					d.notef(fp, "%s: not carried over: carve answers Allocate with NVIDIA_VISIBLE_DEVICES (and CDI device names with carve-agent --cdi)", s)
				}
			}
		case "deviceIDStrategy":
			if v != "uuid" {
				d.notef(fp, "%v: not carried over: carve's device IDs are GPU and MIG device UUIDs", v)
			}
		default:
			d.notef(fp, "not carried over: a device plugin setting with no counterpart in a carve profile")
		}
	}
}

func (d *decoder) dpSharing(dp *dpConfig, v any) {
	if v == nil {
		return
	}
	m, ok := d.mapping(dpSharing, v)
	if !ok {
		return
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		p, v := textfmt.Field(dpSharing, k), m[k]
		switch {
		case v == nil:
		case k == dpTimeSlicing:
			d.dpTimeSlicing(dp, p, v)
		case k == dpMPS:
			d.notef(p, "not carried over: carve shares devices by time-slicing only, not through MPS; the devices MPS would share are not shared")
		default:
			d.notef(p, "unknown field; ignored, as the device plugin ignores it")
		}
	}
}

func (d *decoder) dpTimeSlicing(dp *dpConfig, p string, v any) {
	m, ok := d.mapping(p, v)
	if !ok {
		return
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		switch k {
		case dpRenameByDef, dpFailRequests, dpResources:
		default:
			d.notef(textfmt.Field(p, k), "unknown field; ignored, as the device plugin ignores it")
		}
	}
	if raw, ok := m[dpRenameByDef]; ok {
		dp.rename, _ = d.boolean(textfmt.Field(p, dpRenameByDef), raw)
	}
	if raw, ok := m[dpFailRequests]; ok && raw != nil {
		dp.failMany, _ = d.boolean(textfmt.Field(p, dpFailRequests), raw)
	}
	rp := textfmt.Field(p, dpResources)
	raw, ok := m[dpResources]
	if !ok {
		d.errorf(rp, "required: the resources to share")
		return
	}
	l, ok := d.list(rp, raw)
	if !ok {
		return
	}
	if len(l) == 0 {
		d.errorf(rp, "must name at least one resource")
	}
	for i, v := range l {
		d.dpResource(dp, textfmt.Item(rp, i), v)
	}
}

func (d *decoder) dpResource(dp *dpConfig, p string, v any) {
	m, ok := d.mapping(p, v)
	if !ok {
		return
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		switch k {
		case dpName, dpRename, dpDevices, dpReplicas:
		default:
			d.notef(textfmt.Field(p, k), "unknown field; ignored, as the device plugin ignores it")
		}
	}
	var name string
	if raw, ok := m[dpName]; !ok {
		d.errorf(textfmt.Field(p, dpName), "required: the resource to share, e.g. nvidia.com/gpu")
	} else if s, ok := d.str(textfmt.Field(p, dpName), raw); ok {
		name = s
		if !strings.Contains(name, "/") {
			name = "nvidia.com/" + name
		}
	}
	replicas := 0
	if raw, ok := m[dpReplicas]; !ok {
		d.errorf(textfmt.Field(p, dpReplicas), "required: how many times each device is advertised, at least 2")
	} else {
		replicas, _ = d.integer(textfmt.Field(p, dpReplicas), raw, 2, carvev1.MaxReplicas)
	}
	if raw, ok := m[dpRename]; ok && raw != nil {
		if s, ok := d.str(textfmt.Field(p, dpRename), raw); ok && name != "" {
			switch {
			case dp.rename && s != name+carvev1.SharedSuffix:
				d.notef(textfmt.Field(p, dpRename), "%s: ignored, as the device plugin ignores it: with renameByDefault the shared devices are advertised as %s", s, name+carvev1.SharedSuffix)
			case !dp.rename && s != "":
				d.notef(textfmt.Field(p, dpRename), "%s: ignored, as the device plugin ignores it: without renameByDefault the shared devices keep their name", s)
			}
		}
	}
	if raw, ok := m[dpDevices]; ok && raw != "all" {
		d.notef(textfmt.Field(p, dpDevices), "ignored, as the device plugin ignores it: every device of %s is shared", name)
	}
	if name == "" || replicas == 0 {
		return
	}
	switch {
	case name == carvev1.GPUResource:
		if dp.gpuPath != "" {
			d.errorf(p, "%s is also shared at %s", name, dp.gpuPath)
			return
		}
		dp.gpuReplicas, dp.gpuPath = replicas, p
	case strings.HasPrefix(name, carvev1.MIGResourcePrefix):
		if prev, dup := dp.migPaths[name]; dup {
			d.errorf(p, "%s is also shared at %s", name, prev)
			return
		}
		dp.migReplicas[name], dp.migPaths[name] = replicas, p
	default:
		d.notef(textfmt.Field(p, dpName), "%s: not carried over: carve advertises nvidia.com/gpu and nvidia.com/mig-<profile> only", name)
	}
}

// share makes an output profile of a base profile with the sharing a device
// plugin config (nil: none) asks for.
func (c *converter) share(b baseProfile, dp *dpConfig, name string) *profileOut {
	out := &profileOut{name: name, base: b.name, dp: dp}
	coversAll := false
	for _, e := range b.entries {
		ne := e
		ne.Entry = configs.Entry{GPUs: e.GPUs, Model: e.Model, MIG: e.MIG}
		if e.Model == "" && e.GPUs.All {
			coversAll = true
		}
		if dp != nil {
			ne.TimeSlicing = dp.timeSlicing(e.MIG)
		}
		out.entries = append(out.entries, ne)
	}
	if dp != nil && dp.gpuReplicas > 0 && !coversAll {
		c.note(Note{Source: dp.source, Path: dp.gpuPath, Message: fmt.Sprintf(
			"in profile %s, the GPUs that no entry selects are whole and not shared under carve; the device plugin shares every nvidia.com/gpu (give them an entry to share them)", name)})
	}
	return out
}

// timeSlicing is the sharing of an entry with these MIG instances (nil:
// MIG off), or nil for none.
func (dp *dpConfig) timeSlicing(mig map[string]int) *configs.TimeSlicing {
	ts := &configs.TimeSlicing{RenameShared: dp.rename, FailRequestsGreaterThanOne: dp.failMany}
	switch {
	case mig == nil && dp.gpuReplicas > 0:
		ts.Replicas.Count = dp.gpuReplicas
	case len(mig) == 0: // MIG off and no nvidia.com/gpu sharing, or no instances
		return nil
	case dp.strategy == strategySingle && dp.gpuReplicas > 0:
		// Under the single strategy MIG devices are nvidia.com/gpu.
		ts.Replicas.Count = dp.gpuReplicas
	default:
		per := map[string]int{}
		for p := range mig {
			if r, ok := dp.migReplicas[carvev1.ResourceName(p, false)]; ok {
				per[p] = r
			}
		}
		if len(per) == 0 {
			return nil
		}
		ts.Replicas.PerProfile = per
	}
	return ts
}

// dpMIGNotes notes, per device plugin config, what its MIG strategy means
// under carve, and the MIG resources it shares that no imported profile
// makes.
func (c *converter) dpMIGNotes(bases []baseProfile) {
	made := map[string]bool{} // MIG resource names the profiles make
	for _, b := range bases {
		for _, e := range b.entries {
			for p := range e.MIG {
				made[carvev1.ResourceName(p, false)] = true
			}
		}
	}
	for _, dp := range c.dps {
		switch dp.strategy {
		case strategyNone:
			c.note(Note{Source: dp.source, Path: dp.strategyPath, Message: "none: carve advertises the MIG devices of GPUs with MIG on as nvidia.com/mig-<profile>, as the mixed strategy does"})
		case strategySingle:
			msg := "single: carve advertises MIG devices as nvidia.com/mig-<profile>, as the mixed strategy does, not as nvidia.com/gpu"
			if dp.gpuReplicas > 0 {
				msg += "; the nvidia.com/gpu sharing is applied to them, as single does"
			}
			c.note(Note{Source: dp.source, Path: dp.strategyPath, Message: msg})
		case "":
			if dp.gpuReplicas > 0 && len(made) > 0 {
				c.note(Note{Source: dp.source, Path: textfmt.Field(dpFlags, dpMIGStrategy), Message: "not set: taken as mixed: the nvidia.com/gpu sharing applies to whole GPUs; MIG devices are shared as their nvidia.com/mig-<profile> resources say"})
			}
		}
		for _, r := range slices.Sorted(maps.Keys(dp.migReplicas)) {
			if !made[r] {
				c.note(Note{Source: dp.source, Path: dp.migPaths[r], Message: fmt.Sprintf("%s: no imported profile makes such MIG devices; nothing to share", r)})
			}
		}
	}
}
