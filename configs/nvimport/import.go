package nvimport

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/internal/textfmt"
	"github.com/carve-dev/carve/partition"
)

// MaxFileSize bounds each file the importer reads: NVIDIA's published
// default MIG configuration is about 15 KiB.
const MaxFileSize = 1 << 20

// Bounds on the counts the inputs may hold; beyond them a file is refused
// rather than converted into something no node could use.
const (
	maxMigConfigs     = 1024 // mig-configs entries
	maxEntries        = 64   // items of one mig-configs entry
	maxListLen        = 256  // devices, device-filter, resources lists
	maxGPUIndex       = 255  // a GPU index in devices
	maxMIGCount       = 128  // instances of one MIG profile, as carve's own bound
	maxMIGProfiles    = 64   // MIG profiles of one item
	maxDevicePlugin   = 64   // device plugin configs in all
	maxOutputProfiles = 4096 // profiles written
)

// File is one input file.
type File struct {
	// Name names the file in messages, e.g. its base name "config.yaml".
	Name string
	// Data is its content.
	Data []byte
}

// Options are the optional inputs of MigParted.
type Options struct {
	// DevicePlugin are files holding NVIDIA device plugin configs: a
	// config file (named after the file, without its extension) or a
	// ConfigMap manifest whose every data key is a named config.
	DevicePlugin []File
	// DefaultDevicePlugin names the device plugin config whose sharing the
	// profiles get under their mig-parted names; the other configs give
	// variants named "<profile>_<config>". Empty: the only config when
	// there is exactly one, else none (the profiles under their own names
	// share nothing).
	DefaultDevicePlugin string
}

// Note is one thing the import reports: a place in an input and what
// became of it.
type Note struct {
	// Source names the input: "config.yaml", or "cm.yaml[config.yaml]" for a
	// data key of a ConfigMap manifest; "" for the command line.
	Source string
	// Path is the YAML path inside it, e.g.
	// "mig-configs.all-balanced[0].device-filter[2]"; "" for the whole input.
	Path string
	// Message says what happened there.
	Message string
}

// String returns "source: path: message", leaving out what is empty.
func (n Note) String() string {
	var parts []string
	if n.Source != "" {
		parts = append(parts, n.Source)
	}
	if n.Path != "" {
		parts = append(parts, n.Path)
	}
	return strings.Join(append(parts, n.Message), ": ")
}

// Error is input the importer refuses: every problem, each at its place.
type Error struct {
	// Problems are the problems, in the order of the inputs.
	Problems []Note
}

// Error returns one line per problem.
func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// Result is a converted configuration.
type Result struct {
	// YAML is the carve profile file.
	YAML []byte
	// Profiles are the names of its profiles, sorted.
	Profiles []string
	// Notes are what could not be carried over as it was, in the order of
	// the inputs.
	Notes []Note
}

// MigParted converts a mig-parted configuration, and the device plugin
// configs of opts, into a carve profile file. The error is an *Error when
// the inputs are not valid configurations of their kind, or when nothing of
// them could be carried over.
func MigParted(migParted File, opts Options) (*Result, error) {
	ps := &problems{}
	doc, ok := unwrapOne(ps, migParted, "config.yaml")
	var spec *migSpec
	if ok {
		spec = parseMigParted(ps, doc)
	}
	dps := parseDevicePluginFiles(ps, opts.DevicePlugin)
	var def *dpConfig
	if ps.ok() {
		def = pickDefault(ps, dps, opts.DefaultDevicePlugin)
	}
	if !ps.ok() {
		return nil, &Error{Problems: ps.errs}
	}
	c := &converter{notes: ps.notes, spec: spec, dps: dps, def: def}
	return c.run()
}

// problems collects the errors and notes of reading the inputs.
type problems struct {
	errs  []Note
	notes []Note
}

func (ps *problems) errorf(source, path, format string, args ...any) {
	ps.errs = append(ps.errs, Note{Source: source, Path: path, Message: fmt.Sprintf(format, args...)})
}

func (ps *problems) notef(source, path, format string, args ...any) {
	ps.notes = append(ps.notes, Note{Source: source, Path: path, Message: fmt.Sprintf(format, args...)})
}

func (ps *problems) ok() bool { return len(ps.errs) == 0 }

// document is one configuration: a file, or one data key of a ConfigMap
// manifest.
type document struct {
	// source names it in messages.
	source string
	// name is the data key, or the file's base name without extension.
	name string
	// tree is the decoded YAML.
	tree any
}

// decodeYAML decodes YAML strictly (duplicate keys are errors) into a tree
// of map[string]any, []any, string, json.Number, bool and nil.
func decodeYAML(data []byte) (any, error) {
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), "error converting YAML to JSON: ")
		msg = strings.TrimPrefix(msg, "yaml: ")
		return nil, errors.New(strings.TrimSpace(strings.TrimPrefix(msg, "unmarshal errors:")))
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, err
	}
	return tree, nil
}

// readFile decodes a file, and when it is a ConfigMap manifest, each of its
// data keys. ok is false when it cannot be read (a problem is recorded).
func readFile(ps *problems, f File) (docs []document, configMap bool, ok bool) {
	if len(f.Data) > MaxFileSize {
		ps.errorf(f.Name, "", "%d bytes: larger than the %d bytes a configuration may have", len(f.Data), MaxFileSize)
		return nil, false, false
	}
	tree, err := decodeYAML(f.Data)
	if err != nil {
		ps.errorf(f.Name, "", "invalid YAML: %v", err)
		return nil, false, false
	}
	m, isMap := tree.(map[string]any)
	if !isMap || m["kind"] != "ConfigMap" {
		base := path.Base(f.Name)
		return []document{{source: f.Name, name: strings.TrimSuffix(base, path.Ext(base)), tree: tree}}, false, true
	}
	data, isMap := m["data"].(map[string]any)
	if !isMap || len(data) == 0 {
		ps.errorf(f.Name, "data", "a ConfigMap with the configuration under a data key is expected; this one has no data")
		return nil, true, false
	}
	for _, key := range slices.Sorted(maps.Keys(data)) {
		src := fmt.Sprintf("%s[%s]", f.Name, key)
		s, isString := data[key].(string)
		if !isString {
			ps.errorf(f.Name, "data."+key, "must be a string holding YAML, not %s", textfmt.Kind(data[key]))
			continue
		}
		t, err := decodeYAML([]byte(s))
		if err != nil {
			ps.errorf(src, "", "invalid YAML: %v", err)
			continue
		}
		docs = append(docs, document{source: src, name: key, tree: t})
	}
	return docs, true, ps.ok()
}

// unwrapOne reads a file holding one configuration: the file itself, or
// the data key of a ConfigMap manifest (its only one, or the one named
// preferred).
func unwrapOne(ps *problems, f File, preferred string) (document, bool) {
	docs, configMap, ok := readFile(ps, f)
	if !ok {
		return document{}, false
	}
	if !configMap || len(docs) == 1 {
		return docs[0], true
	}
	for _, d := range docs {
		if d.name == preferred {
			return d, true
		}
	}
	keys := make([]string, len(docs))
	for i, d := range docs {
		keys[i] = d.name
	}
	ps.errorf(f.Name, "data", "holds %s; which one is the configuration? (expected a single key, or %s)", strings.Join(keys, ", "), preferred)
	return document{}, false
}

// decoder reads one document's tree, recording problems at their paths.
type decoder struct {
	ps     *problems
	source string
}

func (d *decoder) errorf(path, format string, args ...any) {
	d.ps.errorf(d.source, path, format, args...)
}

func (d *decoder) notef(path, format string, args ...any) {
	d.ps.notef(d.source, path, format, args...)
}

// mapping returns v as a mapping, or records a problem.
func (d *decoder) mapping(p string, v any) (map[string]any, bool) {
	m, ok := v.(map[string]any)
	if !ok {
		d.errorf(p, "must be a mapping, not %s", textfmt.Kind(v))
	}
	return m, ok
}

// list returns v as a list of at most maxListLen items, or records a problem.
func (d *decoder) list(p string, v any) ([]any, bool) {
	l, ok := v.([]any)
	switch {
	case !ok:
		d.errorf(p, "must be a list, not %s", textfmt.Kind(v))
	case len(l) > maxListLen:
		d.errorf(p, "%d items: more than the %d this importer takes", len(l), maxListLen)
		ok = false
	}
	return l, ok
}

func (d *decoder) str(p string, v any) (string, bool) {
	s, ok := v.(string)
	if !ok {
		d.errorf(p, "must be a string, not %s", textfmt.Kind(v))
	}
	return s, ok
}

func (d *decoder) boolean(p string, v any) (bool, bool) {
	b, ok := v.(bool)
	if !ok {
		d.errorf(p, "must be true or false, not %s", textfmt.Kind(v))
	}
	return b, ok
}

// integer returns v as a whole number in [lo, hi], or records a problem.
func (d *decoder) integer(p string, v any, lo, hi int) (int, bool) {
	n, ok := v.(json.Number)
	if !ok {
		d.errorf(p, "must be a whole number, not %s", textfmt.Kind(v))
		return 0, false
	}
	i, err := strconv.ParseInt(n.String(), 10, 64)
	switch {
	case err != nil:
		d.errorf(p, "must be a whole number, not %s", n)
		return 0, false
	case i < int64(lo):
		d.errorf(p, "%d is less than %d", i, lo)
		return 0, false
	case i > int64(hi):
		d.errorf(p, "%d is more than %d", i, hi)
		return 0, false
	}
	return int(i), true
}

// converter turns the parsed inputs into the profile file.
type converter struct {
	spec  *migSpec
	dps   []*dpConfig
	def   *dpConfig
	notes []Note
}

// profileOut is one profile of the output and where it comes from.
type profileOut struct {
	name string
	// base is the mig-configs name it was made from.
	base string
	// dp is the device plugin config whose sharing it carries, or nil.
	dp      *dpConfig
	entries []outEntry
}

// outEntry is one entry of the output with the mig-parted item it comes
// from.
type outEntry struct {
	configs.Entry
	// src is the index of the item in its mig-configs entry.
	src int
}

func (c *converter) note(n Note) { c.notes = append(c.notes, n) }

func (c *converter) run() (*Result, error) {
	var bases []baseProfile
	for _, name := range slices.Sorted(maps.Keys(c.spec.configs)) {
		if b, ok := c.convert(name, c.spec.configs[name]); ok {
			bases = append(bases, b)
		}
	}
	var outs []*profileOut
	names := map[string]string{} // profile name -> what made it
	for _, b := range bases {
		outs = append(outs, c.share(b, c.def, b.name))
		for _, dp := range c.dps {
			if dp == c.def {
				continue
			}
			outs = append(outs, c.share(b, dp, b.name+"_"+dp.name))
		}
	}
	if len(outs) > maxOutputProfiles {
		return nil, &Error{Problems: append(slices.Clip(c.notes), Note{
			Message: fmt.Sprintf("%d profiles (mig-configs x device plugin configs): more than the %d this importer writes", len(outs), maxOutputProfiles),
		})}
	}
	var errs []Note
	for _, p := range outs {
		what := fmt.Sprintf("%s: mig-configs.%s", c.spec.source, p.base)
		if p.dp != nil && p.dp != c.def {
			what += " with device plugin config " + p.dp.name
		}
		if prev, dup := names[p.name]; dup {
			errs = append(errs, Note{Message: fmt.Sprintf("profile %s would be made twice: from %s and from %s; rename a mig-configs entry or a device plugin config", p.name, prev, what)})
		}
		names[p.name] = what
	}
	if len(errs) > 0 {
		return nil, &Error{Problems: errs}
	}
	c.dpMIGNotes(bases)
	outs = c.check(outs)
	if len(outs) == 0 {
		return nil, &Error{Problems: append(slices.Clip(c.notes), Note{Source: c.spec.source, Message: "nothing could be carried over: no profile is left"})}
	}
	res := &Result{YAML: c.render(outs), Notes: c.ordered(dedupe(c.notes))}
	for _, p := range outs {
		res.Profiles = append(res.Profiles, p.name)
	}
	sort.Strings(res.Profiles)
	return res, nil
}

// check parses and validates the profiles as carvectl validate does,
// leaves out every profile carve rejects (with a note naming the problem
// and the mig-parted item it comes from), and notes the entries that can
// only be checked on a node (MIG profiles of GPU models carve's catalogue
// lacks).
func (c *converter) check(outs []*profileOut) []*profileOut {
	geo := partition.NewGeometry(partition.Catalogue())
	for range len(outs) + 1 {
		if len(outs) == 0 {
			return nil
		}
		f, err := configs.Parse(c.render(outs))
		var unverified []configs.Problem
		if err == nil {
			unverified, err = f.Check(geo, nil)
		}
		if err == nil {
			for _, p := range unverified {
				if out, e, ok := locate(outs, p.Path); ok {
					c.note(Note{Source: c.spec.source, Path: c.itemPath(out, e), Message: "not checked here: " + p.Message})
				}
			}
			return outs
		}
		var cerr *configs.Error
		if !errors.As(err, &cerr) {
			c.note(Note{Source: c.spec.source, Message: fmt.Sprintf("nothing written: checking the converted file failed: %v", err)})
			return nil
		}
		drop := map[*profileOut]bool{}
		for _, p := range cerr.Problems {
			out, e, ok := locate(outs, p.Path)
			if !ok {
				// A problem outside any profile is a bug of the importer.
				c.note(Note{Source: c.spec.source, Message: fmt.Sprintf("nothing written: the converted file is invalid: %s", p)})
				return nil
			}
			drop[out] = true
			c.note(Note{Source: c.spec.source, Path: c.itemPath(out, e), Message: fmt.Sprintf("profile %s left out: carve rejects it: %s", out.name, p)})
		}
		outs = slices.DeleteFunc(outs, func(p *profileOut) bool { return drop[p] })
	}
	return outs
}

// locate finds the output profile and entry index a carve path names
// ("profiles.NAME[2].mig"); the entry is -1 when the path names the profile
// only.
func locate(outs []*profileOut, p string) (*profileOut, int, bool) {
	rest, ok := strings.CutPrefix(p, "profiles.")
	if !ok {
		return nil, 0, false
	}
	// Longest name first: a profile name may contain dots.
	var best *profileOut
	bestName := ""
	for _, out := range outs {
		name := out.name
		if name == "" {
			name = `""` // as configs writes an empty key in paths
		}
		if strings.HasPrefix(rest, name) && (len(rest) == len(name) || rest[len(name)] == '.' || rest[len(name)] == '[') {
			if best == nil || len(name) > len(bestName) {
				best, bestName = out, name
			}
		}
	}
	if best == nil {
		return nil, 0, false
	}
	rest = rest[len(bestName):]
	if !strings.HasPrefix(rest, "[") {
		return best, -1, true
	}
	end := strings.IndexByte(rest, ']')
	i, err := strconv.Atoi(rest[1:max(end, 1)])
	if end < 0 || err != nil || i < 0 || i >= len(best.entries) {
		return best, -1, true
	}
	return best, i, true
}

// itemPath is the mig-parted path of an output entry, or of its profile
// when e is -1.
func (c *converter) itemPath(out *profileOut, e int) string {
	p := textfmt.Field("mig-configs", out.base)
	if e < 0 {
		return p
	}
	return textfmt.Item(p, out.entries[e].src)
}

// ordered sorts notes by input: the mig-parted configuration first, then
// the device plugin configs in the order given; each input's notes keep
// their order.
func (c *converter) ordered(notes []Note) []Note {
	rank := map[string]int{c.spec.source: 0}
	for i, dp := range c.dps {
		rank[dp.source] = i + 1
	}
	slices.SortStableFunc(notes, func(a, b Note) int { return rank[a.Source] - rank[b.Source] })
	return notes
}

// dedupe drops repeated notes, keeping the first.
func dedupe(notes []Note) []Note {
	seen := map[Note]bool{}
	out := make([]Note, 0, len(notes))
	for _, n := range notes {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// render writes the profile file.
func (c *converter) render(outs []*profileOut) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# carve profiles imported by `carvectl import mig-parted` from %s.\n", c.spec.source)
	if len(c.dps) > 0 {
		if c.def != nil {
			fmt.Fprintf(&b, "# Profiles under their mig-parted names share as device plugin config %s (%s) says.\n", c.def.name, c.def.source)
		} else {
			b.WriteString("# Profiles under their mig-parted names share nothing.\n")
		}
		for _, dp := range c.dps {
			if dp != c.def {
				fmt.Fprintf(&b, "# Profiles named <profile>_%s share as device plugin config %s (%s) says.\n", dp.name, dp.name, dp.source)
			}
		}
	}
	b.WriteString("# Check it on your machines before use: carvectl validate -f FILE --gpus ...\n")
	b.WriteString("version: v1\nprofiles:\n")
	for _, p := range outs {
		if len(p.entries) == 0 {
			fmt.Fprintf(&b, "  %s: []\n", scalar(p.name))
			continue
		}
		fmt.Fprintf(&b, "  %s:\n", scalar(p.name))
		for _, e := range p.entries {
			writeEntry(&b, e.Entry)
		}
	}
	return b.Bytes()
}

func writeEntry(b *bytes.Buffer, e configs.Entry) {
	if e.GPUs.All {
		b.WriteString("    - gpus: all\n")
	} else {
		idx := make([]string, len(e.GPUs.Indices))
		for i, n := range e.GPUs.Indices {
			idx[i] = strconv.Itoa(n)
		}
		fmt.Fprintf(b, "    - gpus: [%s]\n", strings.Join(idx, ", "))
	}
	if e.Model != "" {
		fmt.Fprintf(b, "      model: %s\n", scalar(e.Model))
	}
	if e.MIG != nil {
		fmt.Fprintf(b, "      mig: %s\n", flowMap(e.MIG))
	}
	if ts := e.TimeSlicing; ts != nil {
		var parts []string
		if ts.Replicas.PerProfile != nil {
			parts = append(parts, "replicas: "+flowMap(ts.Replicas.PerProfile))
		} else {
			parts = append(parts, fmt.Sprintf("replicas: %d", ts.Replicas.Count))
		}
		if ts.RenameShared {
			parts = append(parts, "renameShared: true")
		}
		if ts.FailRequestsGreaterThanOne {
			parts = append(parts, "failRequestsGreaterThanOne: true")
		}
		fmt.Fprintf(b, "      timeSlicing: {%s}\n", strings.Join(parts, ", "))
	}
}

// flowMap writes {a: 1, b: 2} with the keys sorted.
func flowMap(m map[string]int) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s: %d", scalar(k), m[k]))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// scalar writes a string as a plain YAML scalar where that reads back as
// the same string, else double-quoted.
func scalar(s string) string {
	plain := s != ""
	for i, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
			i > 0 && strings.ContainsRune(".-_+", r)
		plain = plain && ok
	}
	if plain {
		// YAML 1.1 reads these, and numbers, as something else.
		switch strings.ToLower(s) {
		case "y", "n", "yes", "no", "on", "off", "true", "false", "null":
			plain = false
		}
		if _, err := strconv.ParseFloat(s, 64); err == nil {
			plain = false
		}
		if _, err := strconv.ParseInt(s, 0, 64); err == nil {
			plain = false
		}
	}
	if plain {
		return s
	}
	// Go's escapes are YAML's too (\n, \", \xXX, \uXXXX).
	return strconv.Quote(s)
}
