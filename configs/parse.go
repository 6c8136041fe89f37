package configs

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/internal/textfmt"
	"github.com/carve-dev/carve/internal/yamltree"
)

// MaxFileBytes is the largest profile file Parse reads: 256 KiB, a
// hundred times what a fleet's profiles take, and a quarter of what a
// ConfigMap may hold. A larger file is refused before it is parsed.
const MaxFileBytes = 256 << 10

// MaxGPUIndex is the largest GPU index an entry may list.
const MaxGPUIndex = 255

// maxMIGCount bounds the instances of one MIG profile in an entry; no GPU
// holds nearly as many, and the bound keeps absurd numbers away from the
// placement search.
const maxMIGCount = 128

// maxInt bounds the whole numbers the file may hold.
const maxInt = math.MaxInt32

// Field names of the format.
const (
	fieldVersion        = "version"
	fieldDefaultProfile = "defaultProfile"
	fieldProfiles       = "profiles"
	fieldRules          = "rules"
	fieldWindows        = "windows"
	fieldMaintenance    = "maintenance"
	fieldDrain          = "drain"
	fieldGPUs           = "gpus"
	fieldModel          = "model"
	fieldMIG            = "mig"
	fieldTimeSlicing    = "timeSlicing"
	fieldDynamic        = "dynamic"
	fieldReplicas       = "replicas"
	fieldRenameShared   = "renameShared"
	fieldFailRequests   = "failRequestsGreaterThanOne"
	fieldNodeSelector   = "nodeSelector"
	fieldProfile        = "profile"
	fieldName           = "name"
	fieldSchedule       = "schedule"
	fieldDuration       = "duration"
	fieldTimeZone       = "timeZone"
	fieldPolicy         = "policy"
	fieldTimeout        = "timeout"
)

// Parse decodes a profiles.yaml strictly and checks everything that needs
// no hardware knowledge: the format (unknown fields, types, duplicate keys),
// value ranges, cron schedules, time zones, references to profiles, and GPU
// index lists. It reports every problem at once as an *Error; on error the
// returned File is nil. Defaults are filled in: time zones "UTC", drain
// policy wait, drain timeout 30m, rollout DefaultRollout (a window's own
// rollout takes the fields it does not give from the file's).
func Parse(data []byte) (*File, error) {
	var ps problems
	if len(data) > MaxFileBytes {
		ps.add("", "the file is larger than %d bytes (%d KiB), the most carve reads", MaxFileBytes, MaxFileBytes/1024)
		return nil, ps.err()
	}
	tree, yps, err := yamltree.Decode(data)
	for _, p := range yps {
		ps.add(p.Path, "%s", p.Message)
	}
	if err != nil && !errors.Is(err, yamltree.ErrEmpty) {
		ps.add("", "%v", err)
	}
	if len(ps.list) > 0 {
		return nil, ps.err()
	}
	d := &decoder{ps: &ps}
	f := d.file(tree)
	if err := ps.err(); err != nil {
		return nil, err
	}
	return f, nil
}

// decoder turns the generic tree of the decoded YAML into a File, noting a
// problem, with its path, for everything it cannot take.
type decoder struct {
	ps *problems
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// fields checks that v is a mapping whose keys are all known, reports the
// unknown ones, and returns the mapping.
func (d *decoder) fields(path string, v any, known ...string) (map[string]any, bool) {
	m, ok := v.(map[string]any)
	if !ok {
		d.ps.add(path, "must be a mapping, not %s", textfmt.Kind(v))
		return nil, false
	}
	for _, k := range sortedKeys(m) {
		if slices.Contains(known, k) {
			continue
		}
		if s := suggest(k, known); s != "" {
			d.ps.add(textfmt.Field(path, k), "unknown field (did you mean %s?)", s)
		} else {
			d.ps.add(textfmt.Field(path, k), "unknown field (known fields here: %s)", strings.Join(known, ", "))
		}
	}
	return m, true
}

func (d *decoder) str(path string, v any) (string, bool) {
	s, ok := v.(string)
	if !ok {
		switch v.(type) {
		case json.Number, bool:
			d.ps.add(path, "must be a string, not %s (quote it)", textfmt.Kind(v))
		default:
			d.ps.add(path, "must be a string, not %s", textfmt.Kind(v))
		}
	}
	return s, ok
}

// nonEmpty decodes a string that must not be empty.
func (d *decoder) nonEmpty(path string, v any) (string, bool) {
	s, ok := d.str(path, v)
	if ok && strings.TrimSpace(s) == "" {
		d.ps.add(path, "must not be empty")
		return "", false
	}
	return s, ok
}

func (d *decoder) integer(path string, v any) (int, bool) {
	n, ok := v.(json.Number)
	if !ok {
		d.ps.add(path, "must be a whole number, not %s", textfmt.Kind(v))
		return 0, false
	}
	i, err := strconv.ParseInt(n.String(), 10, 64)
	if err != nil {
		f, ferr := n.Float64()
		if ferr != nil || f != math.Trunc(f) || math.Abs(f) > maxInt {
			d.ps.add(path, "must be a whole number, not %s", n)
			return 0, false
		}
		i = int64(f)
	}
	if i > maxInt || i < -maxInt {
		d.ps.add(path, "%s is out of range", n)
		return 0, false
	}
	return int(i), true
}

func (d *decoder) boolean(path string, v any) (bool, bool) {
	b, ok := v.(bool)
	if !ok {
		d.ps.add(path, "must be true or false, not %s", textfmt.Kind(v))
	}
	return b, ok
}

func (d *decoder) duration(path string, v any) (time.Duration, bool) {
	s, ok := v.(string)
	if !ok {
		d.ps.add(path, "must be a duration such as 10h or 90m, not %s", textfmt.Kind(v))
		return 0, false
	}
	dur, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		d.ps.add(path, "invalid duration %q: want a Go duration such as 10h, 90m or 1h30m (days as hours: 24h)", s)
		return 0, false
	}
	if dur <= 0 {
		d.ps.add(path, "must be positive, not %s", s)
		return 0, false
	}
	return dur, true
}

func (d *decoder) list(path string, v any) ([]any, bool) {
	l, ok := v.([]any)
	if !ok {
		d.ps.add(path, "must be a list, not %s", textfmt.Kind(v))
	}
	return l, ok
}

func (d *decoder) file(tree any) *File {
	f := &File{Drain: Drain{Policy: DrainWait, Timeout: DefaultDrainTimeout}, Rollout: DefaultRollout}
	if tree == nil {
		d.ps.add("", "the file is empty; want at least version: %s and profiles", Version)
		return f
	}
	m, ok := d.fields("", tree, fieldVersion, fieldDefaultProfile, fieldProfiles, fieldRules, fieldWindows, fieldMaintenance, fieldDrain, fieldRollout)
	if !ok {
		return f
	}
	if raw, ok := m[fieldVersion]; !ok {
		d.ps.add(fieldVersion, "required; set version: %s", Version)
	} else if s, ok := d.str(fieldVersion, raw); ok {
		if s != Version {
			d.ps.add(fieldVersion, "unsupported version %q; this carve reads version %s", s, Version)
		}
		f.Version = s
	}
	profilesOK := false
	if raw, ok := m[fieldProfiles]; !ok {
		d.ps.add(fieldProfiles, "required: at least one profile")
	} else {
		f.Profiles, profilesOK = d.profiles(fieldProfiles, raw)
	}
	if raw, ok := m[fieldDefaultProfile]; ok {
		if s, ok := d.nonEmpty(fieldDefaultProfile, raw); ok {
			f.DefaultProfile = s
		}
	}
	if raw, ok := m[fieldRules]; ok {
		f.Rules = d.rules(fieldRules, raw)
	}
	if raw, ok := m[fieldRollout]; ok {
		f.Rollout = d.rollout(fieldRollout, raw).over(DefaultRollout)
	}
	if raw, ok := m[fieldWindows]; ok {
		f.Windows = d.windows(fieldWindows, raw, f.Rollout)
	}
	if raw, ok := m[fieldMaintenance]; ok {
		f.Maintenance = d.maintenance(fieldMaintenance, raw)
	}
	if raw, ok := m[fieldDrain]; ok {
		f.Drain = d.drain(fieldDrain, raw)
	}
	if profilesOK {
		d.references(f)
	}
	return f
}

// references checks that every name used as a profile names one.
func (d *decoder) references(f *File) {
	known := sortedKeys(f.Profiles)
	check := func(path, name string) {
		if name == "" {
			return // reported where it was decoded
		}
		if _, ok := f.Profiles[name]; !ok {
			d.ps.add(path, "%s", unknownProfileMessage(name, known))
		}
	}
	check(fieldDefaultProfile, f.DefaultProfile)
	for i, r := range f.Rules {
		check(textfmt.Field(textfmt.Item(fieldRules, i), fieldProfile), r.Profile)
	}
	for i, w := range f.Windows {
		check(textfmt.Field(textfmt.Item(fieldWindows, i), fieldProfile), w.Profile)
	}
}

func (d *decoder) profiles(path string, v any) (map[string]Profile, bool) {
	m, ok := v.(map[string]any)
	if !ok {
		d.ps.add(path, "must be a mapping of profile names to lists of entries, not %s", textfmt.Kind(v))
		return nil, false
	}
	if len(m) == 0 {
		d.ps.add(path, "must define at least one profile")
	}
	out := make(map[string]Profile, len(m))
	for _, name := range sortedKeys(m) {
		p := textfmt.Field(path, name)
		if msg := checkName(name); msg != "" {
			d.ps.add(p, "invalid profile name: %s", msg)
		}
		l, ok := m[name].([]any)
		if !ok {
			d.ps.add(p, "must be a list of entries (use [] for whole GPUs everywhere), not %s", textfmt.Kind(m[name]))
			out[name] = nil
			continue
		}
		entries := make(Profile, len(l))
		for i, raw := range l {
			entries[i] = d.entry(textfmt.Item(p, i), raw)
		}
		d.overlaps(p, entries)
		out[name] = entries
	}
	return out, true
}

func (d *decoder) entry(path string, v any) Entry {
	var e Entry
	m, ok := d.fields(path, v, fieldGPUs, fieldModel, fieldMIG, fieldTimeSlicing, fieldDynamic)
	if !ok {
		return e
	}
	if raw, ok := m[fieldGPUs]; !ok {
		d.ps.add(textfmt.Field(path, fieldGPUs), "required: all, or a list of GPU indices such as [0, 1]")
	} else {
		e.GPUs = d.gpus(textfmt.Field(path, fieldGPUs), raw)
	}
	if raw, ok := m[fieldModel]; ok {
		p := textfmt.Field(path, fieldModel)
		if s, ok := d.nonEmpty(p, raw); ok {
			if len(modelWords(s)) == 0 {
				d.ps.add(p, "%q names no GPU model; write e.g. H100-80GB", s)
			} else {
				e.Model = s
			}
		}
	}
	if raw, ok := m[fieldMIG]; ok {
		e.MIG = d.mig(textfmt.Field(path, fieldMIG), raw)
	}
	if raw, ok := m[fieldTimeSlicing]; ok {
		e.TimeSlicing = d.timeSlicing(textfmt.Field(path, fieldTimeSlicing), raw, e.MIG)
	}
	if raw, ok := m[fieldDynamic]; ok {
		p := textfmt.Field(path, fieldDynamic)
		e.Dynamic = d.dynamic(p, raw)
		if _, ok := m[fieldMIG]; ok {
			d.ps.add(p, "dynamic excludes mig: the MIG instances of a dynamic GPU are made for the claims given its devices; keep one of them")
		}
		if _, ok := m[fieldTimeSlicing]; ok {
			d.ps.add(p, "dynamic excludes timeSlicing: each MIG device of a dynamic GPU is made for one claim; keep one of them")
		}
	}
	return e
}

// dynamic decodes the on-demand MIG of an entry: {} for every MIG profile
// of the model, or {profiles: [...]} for some.
func (d *decoder) dynamic(path string, v any) *Dynamic {
	if v == nil {
		d.ps.add(path, "must be a mapping: {} for every MIG profile of the GPU's model, or {profiles: [1g.10gb, ...]} for some")
		return &Dynamic{}
	}
	m, ok := d.fields(path, v, fieldProfiles)
	if !ok {
		return &Dynamic{}
	}
	raw, ok := m[fieldProfiles]
	if !ok {
		return &Dynamic{}
	}
	p := textfmt.Field(path, fieldProfiles)
	l, ok := d.list(p, raw)
	if !ok {
		return &Dynamic{}
	}
	if len(l) == 0 {
		d.ps.add(p, "must name at least one MIG profile; leave profiles out to offer every profile of the GPU's model")
	}
	dyn := &Dynamic{Profiles: make([]string, 0, len(l))}
	first := make(map[string]int, len(l))
	for i, item := range l {
		ip := textfmt.Item(p, i)
		name, ok := d.nonEmpty(ip, item)
		switch {
		case !ok:
		case strings.HasPrefix(name, "nvidia.com/mig-"):
			d.ps.add(ip, "write the MIG profile name alone, e.g. %s", strings.TrimPrefix(name, "nvidia.com/mig-"))
		default:
			if j, dup := first[name]; dup {
				d.ps.add(ip, "%s is listed twice (also %s)", name, textfmt.Item(p, j))
				continue
			}
			first[name] = i
			dyn.Profiles = append(dyn.Profiles, name)
		}
	}
	return dyn
}

func (d *decoder) gpus(path string, v any) GPUSelector {
	switch x := v.(type) {
	case string:
		if x == "all" {
			return GPUSelector{All: true}
		}
		d.ps.add(path, "must be all or a list of GPU indices, not %q", x)
	case []any:
		if len(x) == 0 {
			d.ps.add(path, "must list at least one GPU index, or be all")
			return GPUSelector{}
		}
		seen := make(map[int]bool, len(x))
		idx := make([]int, 0, len(x))
		for i, raw := range x {
			p := textfmt.Item(path, i)
			n, ok := d.integer(p, raw)
			switch {
			case !ok:
			case n < 0:
				d.ps.add(p, "GPU index %d is negative", n)
			case n > MaxGPUIndex:
				d.ps.add(p, "GPU index %d is beyond %d; no node has that many GPUs", n, MaxGPUIndex)
			case seen[n]:
				d.ps.add(p, "GPU %d is listed twice", n)
			default:
				seen[n] = true
				idx = append(idx, n)
			}
		}
		return GPUSelector{Indices: idx}
	case json.Number:
		d.ps.add(path, "must be all or a list of GPU indices, not %s (write [%s] for one GPU)", textfmt.Kind(v), x)
	default:
		d.ps.add(path, "must be all or a list of GPU indices, not %s", textfmt.Kind(v))
	}
	return GPUSelector{}
}

// mig decodes the MIG instances of an entry. The returned map holds every
// profile name given, even those with a bad count, so that later checks
// see the names.
func (d *decoder) mig(path string, v any) map[string]int {
	m, ok := v.(map[string]any)
	if !ok {
		d.ps.add(path, "must be a mapping of MIG profile to instance count such as {1g.10gb: 7}, or {} for MIG on with no instances; not %s", textfmt.Kind(v))
		return map[string]int{}
	}
	out := make(map[string]int, len(m))
	for _, name := range sortedKeys(m) {
		p := textfmt.Field(path, name)
		out[name] = 0
		if strings.TrimSpace(name) == "" {
			d.ps.add(p, "empty MIG profile name")
			continue
		}
		if rest, ok := strings.CutPrefix(name, "nvidia.com/mig-"); ok {
			d.ps.add(p, "write the MIG profile name alone, e.g. %s", rest)
			continue
		}
		n, ok := d.integer(p, m[name])
		switch {
		case !ok:
		case n < 1:
			d.ps.add(p, "instance count must be at least 1, not %d (leave the profile out for none)", n)
		case n > maxMIGCount:
			d.ps.add(p, "%d instances are more than any GPU holds", n)
		default:
			out[name] = n
		}
	}
	return out
}

func (d *decoder) timeSlicing(path string, v any, mig map[string]int) *TimeSlicing {
	m, ok := d.fields(path, v, fieldReplicas, fieldRenameShared, fieldFailRequests)
	if !ok {
		return nil
	}
	ts := &TimeSlicing{}
	if raw, ok := m[fieldReplicas]; !ok {
		d.ps.add(textfmt.Field(path, fieldReplicas), "required: a number of replicas, or a number per MIG profile")
	} else {
		ts.Replicas = d.replicas(textfmt.Field(path, fieldReplicas), raw, mig)
	}
	if raw, ok := m[fieldRenameShared]; ok {
		ts.RenameShared, _ = d.boolean(textfmt.Field(path, fieldRenameShared), raw)
	}
	if raw, ok := m[fieldFailRequests]; ok {
		ts.FailRequestsGreaterThanOne, _ = d.boolean(textfmt.Field(path, fieldFailRequests), raw)
	}
	return ts
}

func (d *decoder) replicaCount(path string, v any) (int, bool) {
	n, ok := d.integer(path, v)
	switch {
	case !ok:
		return 0, false
	case n < 1:
		d.ps.add(path, "replicas must be at least 1, not %d", n)
		return 0, false
	case n > carvev1.MaxReplicas:
		d.ps.add(path, "%d replicas exceed the limit of %d per device", n, carvev1.MaxReplicas)
		return 0, false
	}
	return n, true
}

func (d *decoder) replicas(path string, v any, mig map[string]int) Replicas {
	switch x := v.(type) {
	case json.Number:
		n, _ := d.replicaCount(path, x)
		return Replicas{Count: n}
	case map[string]any:
		if mig == nil {
			d.ps.add(path, "replicas per MIG profile need mig on this entry; give one number to share whole GPUs")
			return Replicas{PerProfile: map[string]int{}}
		}
		if len(x) == 0 {
			d.ps.add(path, "must name at least one MIG profile of the entry's mig")
		}
		out := make(map[string]int, len(x))
		for _, name := range sortedKeys(x) {
			p := textfmt.Field(path, name)
			if _, ok := mig[name]; !ok {
				have := "none"
				if len(mig) > 0 {
					have = strings.Join(sortedKeys(mig), ", ")
				}
				d.ps.add(p, "%s is not among this entry's MIG profiles (mig has: %s)", name, have)
				continue
			}
			if n, ok := d.replicaCount(p, x[name]); ok {
				out[name] = n
			}
		}
		return Replicas{PerProfile: out}
	default:
		d.ps.add(path, "must be a number, or a mapping of MIG profile to number, not %s", textfmt.Kind(v))
	}
	return Replicas{}
}

func (d *decoder) rules(path string, v any) []Rule {
	l, ok := d.list(path, v)
	if !ok {
		return nil
	}
	out := make([]Rule, len(l))
	for i, raw := range l {
		p := textfmt.Item(path, i)
		m, ok := d.fields(p, raw, fieldNodeSelector, fieldProfile)
		if !ok {
			continue
		}
		if sel, ok := m[fieldNodeSelector]; !ok {
			d.ps.add(textfmt.Field(p, fieldNodeSelector), "required: the labels a node must carry")
		} else {
			out[i].NodeSelector = d.selector(textfmt.Field(p, fieldNodeSelector), sel, true)
		}
		out[i].Profile = d.profileRef(p, m)
	}
	return out
}

// profileRef decodes the required profile field of a rule or window.
func (d *decoder) profileRef(path string, m map[string]any) string {
	raw, ok := m[fieldProfile]
	if !ok {
		d.ps.add(textfmt.Field(path, fieldProfile), "required")
		return ""
	}
	s, _ := d.nonEmpty(textfmt.Field(path, fieldProfile), raw)
	return s
}

func (d *decoder) selector(path string, v any, required bool) map[string]string {
	m, ok := v.(map[string]any)
	if !ok {
		d.ps.add(path, "must be a mapping of label keys to values, not %s", textfmt.Kind(v))
		return nil
	}
	if required && len(m) == 0 {
		d.ps.add(path, "must name at least one label")
	}
	out := make(map[string]string, len(m))
	for _, k := range sortedKeys(m) {
		p := textfmt.Field(path, k)
		if msg := checkLabelKey(k); msg != "" {
			d.ps.add(p, "invalid label key: %s", msg)
		}
		s, ok := d.str(p, m[k])
		if !ok {
			continue
		}
		if msg := checkLabelValue(s); msg != "" {
			d.ps.add(p, "invalid label value %q: %s", s, msg)
		}
		out[k] = s
	}
	return out
}

func (d *decoder) windows(path string, v any, rollout Rollout) []Window {
	l, ok := d.list(path, v)
	if !ok {
		return nil
	}
	out := make([]Window, len(l))
	names := make(map[string]int, len(l))
	for i, raw := range l {
		p := textfmt.Item(path, i)
		m, ok := d.fields(p, raw, fieldName, fieldSchedule, fieldDuration, fieldTimeZone, fieldNodeSelector, fieldProfile, fieldRollout)
		if !ok {
			continue
		}
		w := &out[i]
		if raw, ok := m[fieldName]; !ok {
			d.ps.add(textfmt.Field(p, fieldName), "required")
		} else if s, ok := d.nonEmpty(textfmt.Field(p, fieldName), raw); ok {
			if msg := checkName(s); msg != "" {
				d.ps.add(textfmt.Field(p, fieldName), "invalid window name: %s", msg)
			}
			if first, dup := names[s]; dup {
				d.ps.add(textfmt.Field(p, fieldName), "duplicate window name %q (also %s)", s, textfmt.Item(path, first))
			} else {
				names[s] = i
			}
			w.Name = s
		}
		w.Recurrence = d.recurrence(p, m)
		if sel, ok := m[fieldNodeSelector]; ok {
			w.NodeSelector = d.selector(textfmt.Field(p, fieldNodeSelector), sel, false)
		}
		w.Profile = d.profileRef(p, m)
		if raw, ok := m[fieldRollout]; ok {
			r := d.rollout(textfmt.Field(p, fieldRollout), raw).over(rollout)
			w.Rollout = &r
		}
	}
	return out
}

func (d *decoder) maintenance(path string, v any) []Recurrence {
	l, ok := d.list(path, v)
	if !ok {
		return nil
	}
	out := make([]Recurrence, len(l))
	for i, raw := range l {
		p := textfmt.Item(path, i)
		m, ok := d.fields(p, raw, fieldSchedule, fieldDuration, fieldTimeZone)
		if !ok {
			continue
		}
		out[i] = d.recurrence(p, m)
	}
	return out
}

// recurrence decodes the schedule, duration and timeZone fields of a
// window or maintenance window.
func (d *decoder) recurrence(path string, m map[string]any) Recurrence {
	r := Recurrence{TimeZone: "UTC"}
	loc := time.UTC
	if raw, ok := m[fieldTimeZone]; ok {
		p := textfmt.Field(path, fieldTimeZone)
		if s, ok := d.nonEmpty(p, raw); ok {
			l, err := loadZone(s)
			if err != nil {
				d.ps.add(p, "%v", err)
			} else {
				loc = l
			}
			r.TimeZone = s
		}
	}
	if raw, ok := m[fieldSchedule]; !ok {
		d.ps.add(textfmt.Field(path, fieldSchedule), "required: a cron expression with 5 fields (%s)", cronFieldNames)
	} else if s, ok := d.nonEmpty(textfmt.Field(path, fieldSchedule), raw); ok {
		c, err := compileSchedule(s, loc)
		if err != nil {
			d.ps.add(textfmt.Field(path, fieldSchedule), "%q: %v", s, err)
		}
		r.Schedule, r.sched = s, c
	}
	if raw, ok := m[fieldDuration]; !ok {
		d.ps.add(textfmt.Field(path, fieldDuration), "required: how long each occurrence lasts, e.g. 2h")
	} else if dur, ok := d.duration(textfmt.Field(path, fieldDuration), raw); ok {
		if dur > MaxDuration {
			d.ps.add(textfmt.Field(path, fieldDuration), "%s is longer than the maximum of %s (one week)", dur, MaxDuration)
		}
		r.Duration = dur
	}
	return r
}

func (d *decoder) drain(path string, v any) Drain {
	dr := Drain{Policy: DrainWait, Timeout: DefaultDrainTimeout}
	m, ok := d.fields(path, v, fieldPolicy, fieldTimeout)
	if !ok {
		return dr
	}
	if raw, ok := m[fieldPolicy]; ok {
		if s, ok := d.str(textfmt.Field(path, fieldPolicy), raw); ok {
			switch p := DrainPolicy(s); p {
			case DrainWait, DrainEvict, DrainFail:
				dr.Policy = p
			default:
				d.ps.add(textfmt.Field(path, fieldPolicy), "unknown policy %q; want wait, evict or fail", s)
			}
		}
	}
	if raw, ok := m[fieldTimeout]; ok {
		if t, ok := d.duration(textfmt.Field(path, fieldTimeout), raw); ok {
			dr.Timeout = t
		}
	}
	return dr
}

// checkName checks a profile or window name, which the agent writes as a
// label value: "" when it is fine, else why not.
func checkName(s string) string {
	if s == "" {
		return "must not be empty"
	}
	return checkLabelValue(s)
}

// checkLabelValue checks a Kubernetes label value by apimachinery's rules:
// "" when it is fine, else why not in a few words.
func checkLabelValue(s string) string {
	switch {
	case len(validation.IsValidLabelValue(s)) == 0:
		return ""
	case len(s) > validation.LabelValueMaxLength:
		return fmt.Sprintf("longer than %d characters", validation.LabelValueMaxLength)
	}
	return "must be letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
}

// checkLabelKey checks a Kubernetes label key ([prefix/]name) by
// apimachinery's rules: "" when it is fine, else which part is wrong.
func checkLabelKey(k string) string {
	if len(validation.IsQualifiedName(k)) == 0 {
		return ""
	}
	prefix, name, hasPrefix := strings.Cut(k, "/")
	if !hasPrefix {
		name = prefix
	} else if len(validation.IsDNS1123Subdomain(prefix)) > 0 {
		return fmt.Sprintf("prefix %q must be a lower-case DNS subdomain", prefix)
	}
	return fmt.Sprintf("name %q must be 1-63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit", name)
}
