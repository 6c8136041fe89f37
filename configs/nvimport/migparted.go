package nvimport

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/internal/textfmt"
	"github.com/carve-dev/carve/partition"
)

// Field names of mig-parted's configuration format (version v1).
const (
	mpVersion      = "version"
	mpConfigs      = "mig-configs"
	mpDeviceFilter = "device-filter"
	mpDevices      = "devices"
	mpMIGEnabled   = "mig-enabled"
	mpMIGDevices   = "mig-devices"
)

// migSpec is a parsed mig-parted configuration.
type migSpec struct {
	// source names the document in messages.
	source string
	// configs maps each mig-configs name to its items.
	configs map[string][]migItem
}

// migItem is one item of a mig-configs entry: the MIG layout of the GPUs
// it selects.
type migItem struct {
	path string
	// filter holds the device-filter's PCI IDs as written; empty for none.
	filter []filterID
	// all is devices: all; else idx lists the GPU indices.
	all bool
	idx []int
	// migOn is mig-enabled; mig the instances to make (counts above 0).
	migOn bool
	mig   map[string]int
	// ciProfiles lists the MIG profile names that make a compute instance
	// smaller than its GPU instance ("1c.2g.20gb"), which carve cannot.
	ciProfiles []string
}

// filterID is one PCI device ID of a device-filter.
type filterID struct {
	text, path string
}

// migProfileRE matches MIG profile names as mig-parted takes them: an
// optional compute-instance part, the GPU instance's slices and memory,
// then attributes ("1g.10gb", "1c.2g.20gb", "1g.24gb+me.all", "2g.48gb-me").
var migProfileRE = regexp.MustCompile(`^(?:([0-9]+)c\.)?([0-9]+)g\.[0-9]+gb((?:[+-][a-z]+(?:\.[a-z]+)*)*)$`)

// parseMigParted reads a mig-parted configuration as strictly as mig-parted
// does: unknown fields and wrong types are errors.
func parseMigParted(ps *problems, doc document) *migSpec {
	d := &decoder{ps: ps, source: doc.source}
	spec := &migSpec{source: doc.source, configs: map[string][]migItem{}}
	top, ok := d.mapping("", doc.tree)
	if !ok {
		return spec
	}
	for _, k := range slices.Sorted(maps.Keys(top)) {
		if k != mpVersion && k != mpConfigs {
			d.errorf(k, "unknown field; a mig-parted configuration has %s and %s", mpVersion, mpConfigs)
		}
	}
	switch v, ok := top[mpVersion]; {
	case !ok:
		d.errorf(mpVersion, "required: v1")
	default:
		if s, ok := d.str(mpVersion, v); ok && s != "v1" {
			d.errorf(mpVersion, "%q: only v1 is known", s)
		}
	}
	raw, ok := top[mpConfigs]
	if !ok {
		d.errorf(mpConfigs, "required: the named MIG configurations")
		return spec
	}
	cfgs, ok := d.mapping(mpConfigs, raw)
	if !ok {
		return spec
	}
	switch {
	case len(cfgs) == 0:
		d.errorf(mpConfigs, "must hold at least one configuration")
	case len(cfgs) > maxMigConfigs:
		d.errorf(mpConfigs, "%d configurations: more than the %d this importer takes", len(cfgs), maxMigConfigs)
		return spec
	}
	for _, name := range slices.Sorted(maps.Keys(cfgs)) {
		p := textfmt.Field(mpConfigs, name)
		l, ok := d.list(p, cfgs[name])
		if !ok {
			continue
		}
		switch {
		case len(l) == 0:
			d.errorf(p, "must hold at least one item")
			continue
		case len(l) > maxEntries:
			d.errorf(p, "%d items: more than the %d this importer takes", len(l), maxEntries)
			continue
		}
		items := make([]migItem, 0, len(l))
		for i, v := range l {
			items = append(items, d.migItem(textfmt.Item(p, i), v))
		}
		spec.configs[name] = items
	}
	return spec
}

func (d *decoder) migItem(p string, v any) migItem {
	it := migItem{path: p}
	m, ok := d.mapping(p, v)
	if !ok {
		return it
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		switch k {
		case mpDeviceFilter, mpDevices, mpMIGEnabled, mpMIGDevices:
		default:
			d.errorf(textfmt.Field(p, k), "unknown field; an item has %s, %s, %s and %s", mpDeviceFilter, mpDevices, mpMIGEnabled, mpMIGDevices)
		}
	}
	if raw, ok := m[mpDeviceFilter]; ok {
		it.filter = d.deviceFilter(textfmt.Field(p, mpDeviceFilter), raw)
	}
	if raw, ok := m[mpDevices]; !ok {
		d.errorf(textfmt.Field(p, mpDevices), "required: all, or a list of GPU indices")
	} else {
		it.all, it.idx = d.devices(textfmt.Field(p, mpDevices), raw)
	}
	if raw, ok := m[mpMIGEnabled]; !ok {
		d.errorf(textfmt.Field(p, mpMIGEnabled), "required: true or false")
	} else {
		it.migOn, _ = d.boolean(textfmt.Field(p, mpMIGEnabled), raw)
	}
	raw, has := m[mpMIGDevices]
	mp := textfmt.Field(p, mpMIGDevices)
	switch {
	case it.migOn && !has:
		d.errorf(mp, "required when mig-enabled is true ({} for MIG on with no instances)")
	case it.migOn:
		it.mig, it.ciProfiles = d.migDevices(mp, raw)
	case has && raw != nil:
		if mm, ok := raw.(map[string]any); !ok || len(mm) > 0 {
			d.errorf(mp, "must be empty when mig-enabled is false")
		}
	}
	return it
}

func (d *decoder) deviceFilter(p string, v any) []filterID {
	switch x := v.(type) {
	case string:
		if x == "" {
			return nil
		}
		return []filterID{{text: x, path: p}}
	case []any:
		if len(x) > maxListLen {
			d.errorf(p, "%d PCI device IDs: more than the %d this importer takes", len(x), maxListLen)
			return nil
		}
		out := make([]filterID, 0, len(x))
		for i, raw := range x {
			if s, ok := d.str(textfmt.Item(p, i), raw); ok {
				out = append(out, filterID{text: s, path: textfmt.Item(p, i)})
			}
		}
		return out
	}
	d.errorf(p, "must be a PCI device ID such as \"0x233010DE\", or a list of them; not %s", textfmt.Kind(v))
	return nil
}

func (d *decoder) devices(p string, v any) (all bool, idx []int) {
	switch x := v.(type) {
	case string:
		if x == "all" {
			return true, nil
		}
		d.errorf(p, "must be all or a list of GPU indices, not %q", x)
		return false, nil
	case []any:
		if len(x) > maxListLen {
			d.errorf(p, "%d GPU indices: more than the %d this importer takes", len(x), maxListLen)
			return false, nil
		}
		idx = []int{}
		for i, raw := range x {
			if n, ok := d.integer(textfmt.Item(p, i), raw, 0, maxGPUIndex); ok && !slices.Contains(idx, n) {
				idx = append(idx, n)
			}
		}
		slices.Sort(idx)
		return false, idx
	}
	d.errorf(p, "must be all or a list of GPU indices, not %s", textfmt.Kind(v))
	return false, nil
}

// migDevices reads the instances of an item. Counts of 0 mean none and are
// left out; compute-instance names whose compute slices equal the GPU
// instance's ("1c.1g.10gb") are written as carve names them ("1g.10gb").
func (d *decoder) migDevices(p string, v any) (mig map[string]int, ci []string) {
	mig = map[string]int{}
	if v == nil {
		return mig, nil
	}
	m, ok := d.mapping(p, v)
	if !ok {
		return mig, nil
	}
	if len(m) > maxMIGProfiles {
		d.errorf(p, "%d MIG profiles: more than the %d this importer takes", len(m), maxMIGProfiles)
		return mig, nil
	}
	total, bad := 0, false
	for _, name := range slices.Sorted(maps.Keys(m)) {
		np := textfmt.Field(p, name)
		n, ok := d.integer(np, m[name], 0, maxMIGCount)
		if !ok {
			bad = true
			continue
		}
		sm := migProfileRE.FindStringSubmatch(name)
		if sm == nil {
			d.errorf(np, "%q is not a MIG profile name such as 1g.10gb or 1g.10gb+me", name)
			bad = true
			continue
		}
		carveName := name
		if sm[1] != "" {
			c, _ := strconv.Atoi(sm[1])
			g, _ := strconv.Atoi(sm[2])
			switch {
			case c > g:
				d.errorf(np, "%q: a compute instance cannot have more slices than its GPU instance", name)
				bad = true
				continue
			case c < g:
				ci = append(ci, name)
			default:
				carveName = strings.TrimPrefix(name, sm[1]+"c.")
			}
		}
		total += n
		if n > 0 {
			mig[carveName] += n
		}
	}
	if len(m) > 0 && total == 0 && !bad {
		d.errorf(p, "every count is 0; use {} for MIG on with no instances")
	}
	return mig, ci
}

// baseProfile is one mig-configs entry converted, before any sharing.
type baseProfile struct {
	name    string
	entries []outEntry
}

// cand is one carve entry in the making: the GPUs of one item that are of
// one model (or of any model, without a device filter).
type cand struct {
	src      int
	all      bool
	idx      []int
	model    string   // catalogue key; "" for any model
	ids      []uint32 // the filter's PCI IDs of that model; nil without a filter
	mig      map[string]int
	dropped  bool
	overrode int // the later item that overrides this one entirely, or -1
}

// convert turns one mig-configs entry into a profile. It returns false,
// with a note, when the profile must be left out.
func (c *converter) convert(name string, items []migItem) (baseProfile, bool) {
	src := c.spec.source
	p := textfmt.Field(mpConfigs, name)
	var cands []*cand
	left := 0
	for i, it := range items {
		if len(it.ciProfiles) > 0 {
			c.note(Note{Source: src, Path: textfmt.Field(it.path, mpMIGDevices), Message: fmt.Sprintf(
				"profile %s left out: %s make compute instances smaller than their GPU instance; carve makes one compute instance per GPU instance, using all of it",
				name, strings.Join(it.ciProfiles, ", "))})
			return baseProfile{}, false
		}
		if !it.all && len(it.idx) == 0 {
			c.note(Note{Source: src, Path: textfmt.Field(it.path, mpDevices), Message: "[] selects no GPU; item left out"})
			continue
		}
		var mig map[string]int
		if it.migOn {
			mig = it.mig
		}
		base := cand{src: i, all: it.all, idx: it.idx, mig: mig, overrode: -1}
		if len(it.filter) == 0 {
			cands = append(cands, &base)
			left++
			continue
		}
		models := c.filterModels(it)
		if len(models) == 0 {
			c.note(Note{Source: src, Path: textfmt.Field(it.path, mpDeviceFilter), Message: "item left out: carve's catalogue knows none of its GPUs, " +
				"so no model filter can stand for them; GPUs that no entry selects are whole, MIG off, under carve (add an entry with the model key carve reports for them by hand)"})
			continue
		}
		left++
		for _, m := range models {
			cd := base
			cd.model, cd.ids = m.key, m.ids
			cands = append(cands, &cd)
		}
	}
	if left == 0 {
		c.note(Note{Source: src, Path: p, Message: fmt.Sprintf("profile %s left out: none of its items could be carried over", name)})
		return baseProfile{}, false
	}
	if blocked := c.resolveOverlaps(name, items, cands); blocked {
		return baseProfile{}, false
	}
	b := baseProfile{name: name}
	coversAll := false
	for _, cd := range cands {
		if cd.model == "" && cd.all {
			coversAll = true
		}
		if cd.dropped {
			if cd.overrode >= 0 {
				c.note(Note{Source: src, Path: items[cd.src].path, Message: fmt.Sprintf(
					"never takes effect: item %d selects all of its GPUs and mig-parted applies the last item that selects a GPU; left out", cd.overrode)})
			}
			continue
		}
		e := configs.Entry{Model: cd.model, MIG: cd.mig}
		if cd.all {
			e.GPUs.All = true
		} else {
			e.GPUs.Indices = cd.idx
		}
		b.entries = append(b.entries, outEntry{Entry: e, src: cd.src})
	}
	if !coversAll {
		c.note(Note{Source: src, Path: p, Message: "mig-parted leaves the GPUs that no item selects as they are; carve makes them whole GPUs, MIG off"})
	}
	return b, true
}

// filterModel is a catalogue model a device filter names, with the
// filter's IDs of it.
type filterModel struct {
	key string
	ids []uint32
}

// filterModels maps an item's device filter onto catalogue models, in the
// order the filter first names them, noting the IDs the catalogue does not
// know, subsystem IDs (which a model filter cannot express), and the boards
// a model filter selects beyond the filter's IDs.
func (c *converter) filterModels(it migItem) []filterModel {
	src := c.spec.source
	var out []filterModel
	for _, f := range it.filter {
		primary, sub, hasSub := strings.Cut(strings.TrimSpace(f.text), ":")
		id, err := parsePCIID(primary)
		if err != nil {
			c.note(Note{Source: src, Path: f.path, Message: fmt.Sprintf("%q is not a PCI device ID such as 0x233010DE (mig-parted matches no GPU with it); left out", f.text)})
			continue
		}
		m, ok := partition.ModelForPCIDeviceID(id)
		if !ok {
			c.note(Note{Source: src, Path: f.path, Message: fmt.Sprintf("%s is not a GPU carve's catalogue knows; left out of the model filters", partition.FormatPCIDeviceID(id))})
			continue
		}
		if hasSub {
			c.note(Note{Source: src, Path: f.path, Message: fmt.Sprintf("subsystem ID %s left out: carve's model filter %s selects every board of the model", sub, m.Key)})
		}
		i := slices.IndexFunc(out, func(fm filterModel) bool { return fm.key == m.Key })
		if i < 0 {
			out = append(out, filterModel{key: m.Key})
			i = len(out) - 1
		}
		if !slices.Contains(out[i].ids, id) {
			out[i].ids = append(out[i].ids, id)
		}
	}
	for _, fm := range out {
		m, _ := partition.LookupModel(fm.key)
		var extra []string
		for _, id := range m.PCIDeviceIDs {
			if !slices.Contains(fm.ids, id) {
				extra = append(extra, partition.FormatPCIDeviceID(id))
			}
		}
		if len(extra) > 0 {
			c.note(Note{Source: src, Path: textfmt.Field(it.path, mpDeviceFilter), Message: fmt.Sprintf(
				"model filter %s also selects %s, boards of the same model the filter does not list", fm.key, strings.Join(extra, ", "))})
		}
	}
	return out
}

// parsePCIID reads a PCI device ID: eight hex digits with or without 0x,
// or any number mig-parted reads (strconv base 0).
func parsePCIID(s string) (uint32, error) {
	if id, err := partition.ParsePCIDeviceID(s); err == nil {
		return id, nil
	}
	n, err := strconv.ParseUint(strings.TrimSpace(s), 0, 32)
	return uint32(n), err
}

// resolveOverlaps makes the candidates select disjoint GPUs, as carve
// requires, with mig-parted's meaning: a GPU several items select gets the
// last of them. An earlier candidate loses the GPUs a later one selects;
// a whole-GPU candidate without a filter may simply go, since carve makes
// the GPUs no entry selects whole anyway. It returns true, with a note,
// when carve cannot express the result (the profile is then left out).
func (c *converter) resolveOverlaps(name string, items []migItem, cands []*cand) bool {
	for _, a := range cands {
		for _, b := range cands {
			if b.src <= a.src || a.dropped || !overlap(a, b) {
				continue
			}
			switch {
			case covers(b, a) && b.all:
				a.dropped, a.overrode = true, b.src
			case a.mig == nil:
				a.dropped = true
			case covers(b, a) && !a.all:
				a.idx = slices.DeleteFunc(slices.Clone(a.idx), func(i int) bool { return slices.Contains(b.idx, i) })
				if len(a.idx) == 0 {
					a.dropped, a.overrode = true, b.src
				}
			default:
				c.note(Note{Source: c.spec.source, Path: items[a.src].path, Message: fmt.Sprintf(
					"profile %s left out: item %d selects some of the same GPUs%s; mig-parted gives them item %d's layout, and carve cannot say \"the other GPUs\" of an entry",
					name, b.src, sameGPUs(a, b), b.src)})
				return true
			}
		}
	}
	return false
}

// overlap reports whether two candidates may select one GPU.
func overlap(a, b *cand) bool {
	if a.model != "" && b.model != "" && a.model != b.model {
		return false
	}
	if a.all || b.all {
		return true
	}
	for _, i := range a.idx {
		if slices.Contains(b.idx, i) {
			return true
		}
	}
	return false
}

// covers reports whether every GPU of a's model scope that b's indices
// name gets b's layout: b has no filter, or the same model and every PCI
// ID of a's (or the same layout, so that the boards b's filter lacks do
// not matter).
func covers(b, a *cand) bool {
	switch {
	case b.model == "":
		return true
	case a.model != b.model:
		return false
	}
	for _, id := range a.ids {
		if !slices.Contains(b.ids, id) {
			return sameMIG(a.mig, b.mig)
		}
	}
	return true
}

func sameMIG(a, b map[string]int) bool {
	if (a == nil) != (b == nil) || len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// sameGPUs describes what two overlapping candidates share.
func sameGPUs(a, b *cand) string {
	var parts []string
	if !a.all && !b.all {
		var common []int
		for _, i := range a.idx {
			if slices.Contains(b.idx, i) {
				common = append(common, i)
			}
		}
		parts = append(parts, textfmt.GPUs(common))
	}
	switch {
	case a.model != "":
		parts = append(parts, "of model "+a.model)
	case b.model != "":
		parts = append(parts, "of model "+b.model)
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, " ") + ")"
}
