package configs

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/internal/textfmt"
	"github.com/carve-dev/carve/partition"
)

// compactExample is a small but complete file: the fuzzer minimizes every
// input that finds new code, which takes long for large seeds.
const compactExample = `version: v1
defaultProfile: full
profiles:
  full: [{gpus: all}]
  bal: [{gpus: all, model: H100, mig: {1g.10gb: 2, 3g.40gb: 1}, timeSlicing: {replicas: {1g.10gb: 2}}}]
  split: [{gpus: [0, 1], mig: {}}, {gpus: [2], timeSlicing: {replicas: 2, renameShared: true}}]
rules: [{nodeSelector: {pool: a}, profile: bal}]
windows: [{name: nightly, schedule: "0 20 * * 1-5", duration: 10h, timeZone: Europe/Berlin, profile: full}]
maintenance: [{schedule: "0 2 * * *", duration: 2h}]
drain: {policy: evict, timeout: 5m}
`

// FuzzParse checks, besides that Parse never panics and is deterministic,
// that every file it accepts
//
//   - round-trips: written back as YAML (marshalFile) and parsed again, it
//     gives the same File;
//   - resolves to MIG sets that fit: a profile that validates without a
//     node has, in every entry, MIG instances that fit each catalogue model
//     its filter matches (or, without a filter, at least one model), and a
//     profile that validates on a node resolves there to MIG sets that fit
//     each GPU's model, both by independentFit, which does not use
//     partition.Place.
func FuzzParse(f *testing.F) {
	for _, src := range []string{
		compactExample,
		base,
		"",
		"version: v1\n",
		"version: v1\nprofiles: {full: []}\n",
		"version: v1\nprofiles:\n  p:\n    - gpus: [0, 0, -1]\n      mig: {1g.10gb: 0}\n",
		"version: v1\nprofiles:\n  p:\n    - gpus: all\n    - gpus: all\n",
		"version: v1\nprofiles:\n  p:\n    - gpus: all\n      timeslicing: {replicas: 2}\n",
		"version: v1\nprofiles:\n  p:\n    - gpus: [1]\n      timeSlicing: {replicas: {1g.10gb: 2}}\n",
		"version: v1\nprofiles: {p: []}\nwindows:\n  - {name: w, schedule: 'CRON_TZ=UTC 0 1 * * *', duration: 1h, profile: p}\n",
		"version: v1\nprofiles: {p: []}\nwindows:\n  - {name: w, schedule: '*/0 * * * *', duration: 1h, profile: p}\n",
		"version: v1\nprofiles: {p: []}\nmaintenance:\n  - {schedule: '0 0 31 2 *', duration: 169h, timeZone: Nowhere}\n",
		"version: v1\nprofiles: {p: []}\ndrain: {policy: evict, timeout: 1h}\n",
		"a: &a [*a]\n",
		"version: v1\nprofiles:\n  p: []\n  p: []\n",
		"[1, 2",
		"version: v1\nprofiles: {p: [{gpus: all, mig: {1g.10gb: 99999999999999999999}}]}\n",
		// Full MIG sets, and sets one instance beyond them.
		"version: v1\nprofiles: {p: [{gpus: all, model: H100-80GB, mig: {1g.10gb: 7}}], q: [{gpus: [1], mig: {3g.40gb: 2}}]}\n",
		"version: v1\nprofiles: {p: [{gpus: all, model: A30, mig: {1g.6gb: 2, 2g.12gb: 1}}], q: [{gpus: [0], mig: {1g.20gb: 4}}]}\n",
		"version: v1\nprofiles: {p: [{gpus: all, mig: {2g.20gb: 3, 1g.10gb: 1}}], q: [{gpus: all, mig: {4g.40gb: 1, 3g.40gb: 1}}]}\n",
		"version: v1\nprofiles: {p: [{gpus: all, model: H200, mig: {1g.18gb+me: 1, 1g.18gb: 6}}]}\n",
		"version: v1\nprofiles: {p: [{gpus: all, model: H100-80GB, mig: {1g.10gb: 8}}], q: [{gpus: [1], mig: {3g.40gb: 3}}]}\n",
		"version: v1\nprofiles: {p: [{gpus: all, model: A30, mig: {1g.6gb: 2, 2g.12gb: 2}}], q: [{gpus: [0], mig: {1g.20gb: 5}}]}\n",
		"version: v1\nprofiles: {p: [{gpus: all, mig: {2g.20gb: 4, 1g.10gb: 1}}], q: [{gpus: all, mig: {4g.40gb: 2}}]}\n",
		// Dynamic GPUs: every profile, some, and what is refused.
		"version: v1\nprofiles: {h: [{gpus: [0, 1], mig: {1g.10gb: 7}}, {gpus: [2, 3], dynamic: {profiles: [1g.10gb, 3g.40gb, 7g.80gb]}}], d: [{gpus: all, model: A30, dynamic: {}}]}\n",
		"version: v1\nprofiles: {p: [{gpus: all, mig: {}, dynamic: {profiles: [1g.5gb, 1g.5gb, 2g.100gb]}, timeSlicing: {replicas: 2}}]}\n",
	} {
		f.Add([]byte(src))
	}
	examples, err := filepath.Glob(filepath.Join("examples", "*.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	if len(examples) == 0 {
		f.Fatal("no examples/*.yaml to seed the corpus with")
	}
	for _, path := range examples {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		if _, err := Parse(data); err != nil {
			f.Fatalf("%s: %v", path, err)
		}
		f.Add(data)
	}
	g := catalogue()
	node := dgxH100()
	nodes := fuzzNodes()
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data)
		if err != nil {
			if file != nil {
				t.Fatal("Parse returned a file with an error")
			}
			if _, err2 := Parse(data); err2 == nil || err2.Error() != err.Error() {
				t.Fatalf("Parse is not deterministic:\n%v\n---\n%v", err, err2)
			}
			return
		}
		again, err := Parse(data)
		if err != nil {
			t.Fatalf("second Parse failed: %v", err)
		}
		if diff := cmp.Diff(file, again, ignoreSchedule); diff != "" {
			t.Fatalf("second Parse differs (-first +second):\n%s", diff)
		}
		for _, gpus := range [][]GPU{nil, node} {
			e1, e2 := file.Validate(g, gpus), again.Validate(g, gpus)
			if (e1 == nil) != (e2 == nil) || (e1 != nil && e1.Error() != e2.Error()) {
				t.Fatalf("Validate is not deterministic:\n%v\n---\n%v", e1, e2)
			}
		}
		now := utc(2025, 3, 30, 0, 30)
		for name := range file.Profiles {
			if file.ProfileHash(name) != again.ProfileHash(name) {
				t.Fatalf("ProfileHash(%s) differs", name)
			}
			if as, err := file.Resolve(name, node); err == nil && len(as) != len(node) {
				t.Fatalf("Resolve(%s) gave %d assignments for %d GPUs", name, len(as), len(node))
			}
		}
		s, err := file.Select(map[string]string{carvev1.LabelProfile: file.DefaultProfile}, now)
		if err == nil && s.Source != SourceNone {
			if _, ok := file.Profiles[s.Profile]; !ok {
				t.Fatalf("Select chose unknown profile %q", s.Profile)
			}
		}
		file.InMaintenance(now)

		out, err := marshalFile(file)
		if err != nil {
			t.Fatalf("marshalling the parsed file: %v", err)
		}
		back, err := Parse(out)
		if err != nil {
			t.Fatalf("the parsed file, written back, does not parse: %v\n%s", err, out)
		}
		if diff := cmp.Diff(file, back, ignoreSchedule); diff != "" {
			t.Fatalf("the parsed file, written back and parsed again, differs (-first +again):\n%s\nwritten:\n%s", diff, out)
		}
		checkMIGFits(t, file, g, nodes)
	})
}

// fuzzNode is a node FuzzParse resolves profiles on.
type fuzzNode struct {
	name string
	gpus []GPU
}

// fuzzNodes are a DGX H100, and a node with one GPU of every catalogue
// model.
func fuzzNodes() []fuzzNode {
	var mixed []GPU
	for i, m := range partition.Catalogue() {
		mixed = append(mixed, GPU{Index: i, Model: m.Key, Product: m.Product, MIGCapable: true})
	}
	return []fuzzNode{{"a DGX H100", dgxH100()}, {"a node of every catalogue model", mixed}}
}

// marshalFile writes a File as profiles.yaml, with every field it holds
// (defaults included) and none it does not.
func marshalFile(f *File) ([]byte, error) {
	doc := map[string]any{fieldVersion: f.Version}
	if f.DefaultProfile != "" {
		doc[fieldDefaultProfile] = f.DefaultProfile
	}
	profiles := make(map[string]any, len(f.Profiles))
	for name, p := range f.Profiles {
		entries := make([]any, 0, len(p))
		for _, e := range p {
			m := map[string]any{}
			if e.GPUs.All {
				m[fieldGPUs] = "all"
			} else {
				m[fieldGPUs] = e.GPUs.Indices
			}
			if e.Model != "" {
				m[fieldModel] = e.Model
			}
			if e.MIG != nil {
				m[fieldMIG] = e.MIG
			}
			if ts := e.TimeSlicing; ts != nil {
				tm := map[string]any{fieldReplicas: ts.Replicas.Count}
				if ts.Replicas.PerProfile != nil {
					tm[fieldReplicas] = ts.Replicas.PerProfile
				}
				if ts.RenameShared {
					tm[fieldRenameShared] = true
				}
				if ts.FailRequestsGreaterThanOne {
					tm[fieldFailRequests] = true
				}
				m[fieldTimeSlicing] = tm
			}
			if dyn := e.Dynamic; dyn != nil {
				dm := map[string]any{}
				if dyn.Profiles != nil {
					dm[fieldProfiles] = dyn.Profiles
				}
				m[fieldDynamic] = dm
			}
			entries = append(entries, m)
		}
		profiles[name] = entries
	}
	doc[fieldProfiles] = profiles
	recurrence := func(r Recurrence) map[string]any {
		return map[string]any{fieldSchedule: r.Schedule, fieldDuration: r.Duration.String(), fieldTimeZone: r.TimeZone}
	}
	if f.Rules != nil {
		rules := make([]any, 0, len(f.Rules))
		for _, r := range f.Rules {
			rules = append(rules, map[string]any{fieldNodeSelector: r.NodeSelector, fieldProfile: r.Profile})
		}
		doc[fieldRules] = rules
	}
	if f.Windows != nil {
		windows := make([]any, 0, len(f.Windows))
		for _, w := range f.Windows {
			m := recurrence(w.Recurrence)
			m[fieldName], m[fieldProfile] = w.Name, w.Profile
			if w.NodeSelector != nil {
				m[fieldNodeSelector] = w.NodeSelector
			}
			if w.Rollout != nil {
				m[fieldRollout] = rolloutDoc(*w.Rollout)
			}
			windows = append(windows, m)
		}
		doc[fieldWindows] = windows
	}
	if f.Maintenance != nil {
		maint := make([]any, 0, len(f.Maintenance))
		for _, r := range f.Maintenance {
			maint = append(maint, recurrence(r))
		}
		doc[fieldMaintenance] = maint
	}
	doc[fieldDrain] = map[string]any{fieldPolicy: string(f.Drain.Policy), fieldTimeout: f.Drain.Timeout.String()}
	doc[fieldRollout] = rolloutDoc(f.Rollout)
	return yaml.Marshal(doc)
}

// rolloutDoc writes a rollout section back as YAML values.
func rolloutDoc(r Rollout) map[string]any {
	var bound any = r.MaxUnavailable.N
	if r.MaxUnavailable.Percent {
		bound = r.MaxUnavailable.String()
	}
	return map[string]any{fieldMaxUnavailable: bound, fieldMaxFailures: r.MaxFailures}
}

// checkMIGFits checks the MIG sets of every profile that validates, with
// independentFit: without a node, each entry's set on the catalogue models
// it may land on; on each node, the set Resolve gives each GPU.
func checkMIGFits(t *testing.T, file *File, g Geometry, nodes []fuzzNode) {
	t.Helper()
	models := partition.Catalogue()
	// Entries for models the catalogue lacks are unverified, not checked.
	unverified := map[string]bool{}
	places, _ := file.Check(g, nil)
	for _, p := range places {
		unverified[strings.TrimSuffix(strings.TrimSuffix(p.Path, "."+fieldMIG), "."+fieldModel)] = true
	}
	for _, name := range sortedKeys(file.Profiles) {
		if file.ValidateProfile(name, g, nil) == nil {
			for i, e := range file.Profiles[name] {
				if len(e.MIG) == 0 || unverified[textfmt.Item(textfmt.Field(fieldProfiles, name), i)] {
					continue
				}
				var why []string
				for _, m := range models {
					if e.Model != "" && !MatchModel(e.Model, GPUModel{Key: m.Key, Product: m.Product}) {
						continue
					}
					if w := independentFit(m, e.MIG); w != "" {
						why = append(why, w)
						if e.Model != "" {
							t.Fatalf("profile %s validates without a node, but entry %d (model %q) asks %v, which does not fit its model %s: %s",
								name, i, e.Model, e.MIG, m.Key, w)
						}
					} else if e.Model == "" {
						why = nil
						break
					}
				}
				if len(why) > 0 {
					t.Fatalf("profile %s validates without a node, but entry %d asks %v, which fits no catalogue model: %s",
						name, i, e.MIG, strings.Join(why, "; "))
				}
			}
		}
		for _, node := range nodes {
			if file.ValidateProfile(name, g, node.gpus) != nil {
				continue
			}
			as, err := file.Resolve(name, node.gpus)
			if err != nil && strings.Contains(err.Error(), "selects none of this node's GPUs") {
				continue // its model filters are for other nodes
			}
			if err != nil {
				t.Fatalf("profile %s validates on %s but does not resolve there: %v", name, node.name, err)
			}
			for _, a := range as {
				if a.MIG == nil {
					continue
				}
				gpu := node.gpus[slices.IndexFunc(node.gpus, func(g GPU) bool { return g.Index == a.GPU })]
				m, ok := partition.LookupModel(gpu.Model)
				if !ok {
					t.Fatalf("GPU %d: model %s is not in the catalogue", gpu.Index, gpu.Model)
				}
				if w := independentFit(m, a.MIG); w != "" {
					t.Fatalf("profile %s validates on %s, but resolves GPU %d (%s) to %v, which does not fit: %s",
						name, node.name, a.GPU, m.Key, a.MIG, w)
				}
			}
		}
	}
}

// independentFit checks, without partition.Place, that one GPU of model m
// holds the MIG instances in counts at once: each profile is one of the
// model's, within its maximum count; at most one +me instance; the compute
// and memory slices add up to no more than the GPU has; and a plain search
// puts every instance on one of its profile's placements, no two on a
// common memory slice. It returns "" when they fit, else why not.
func independentFit(m partition.Model, counts map[string]int) string {
	var inst []partition.GIProfile
	compute, memory, me := 0, 0, 0
	for _, name := range sortedKeys(counts) {
		n := counts[name]
		i := slices.IndexFunc(m.Profiles, func(p partition.GIProfile) bool { return p.Name == name })
		if i < 0 {
			return fmt.Sprintf("%s has no MIG profile %s", m.Key, name)
		}
		p := m.Profiles[i]
		if n > p.MaxCount {
			return fmt.Sprintf("%s x%d: at most %d on %s", name, n, p.MaxCount, m.Key)
		}
		compute += n * p.ComputeSlices
		memory += n * p.MemorySlices
		if p.MediaExtensions {
			me += n
		}
		for range n {
			inst = append(inst, p)
		}
	}
	switch {
	case me > 1:
		return fmt.Sprintf("%d +me instances", me)
	case compute > m.ComputeSlices:
		return fmt.Sprintf("%d of %d compute slices", compute, m.ComputeSlices)
	case memory > m.MemorySlices:
		return fmt.Sprintf("%d of %d memory slices", memory, m.MemorySlices)
	}
	// Largest first; instances of one profile take placements in
	// increasing order, so that no arrangement is tried twice.
	sort.SliceStable(inst, func(i, j int) bool { return inst[i].MemorySlices > inst[j].MemorySlices })
	var place func(i, from int, used uint64) bool
	place = func(i, from int, used uint64) bool {
		if i == len(inst) {
			return true
		}
		for k := from; k < len(inst[i].Placements); k++ {
			pl := inst[i].Placements[k]
			if pl.Start < 0 || pl.Start+pl.Size > m.MemorySlices {
				continue
			}
			mask := (uint64(1)<<pl.Size - 1) << pl.Start
			if used&mask != 0 {
				continue
			}
			next := 0
			if i+1 < len(inst) && inst[i+1].Name == inst[i].Name {
				next = k + 1
			}
			if place(i+1, next, used|mask) {
				return true
			}
		}
		return false
	}
	if !place(0, 0, 0) {
		return "no placement puts every instance on its own memory slices"
	}
	return ""
}

// fuzzSelectFile has windows in zones with and without clock changes, that
// start in the hour clocks skip or repeat, that fire every hour, that cross
// midnight, overlap, chain and apply to some nodes or all.
const fuzzSelectFile = `version: v1
defaultProfile: full
profiles:
  full: [{gpus: all}]
  a: []
  b: []
  c: []
rules:
  - nodeSelector: {pool: research}
    profile: c
windows:
  - {name: berlin-night, schedule: "30 2 * * *", duration: 90m, timeZone: Europe/Berlin, profile: a, nodeSelector: {pool: inference}}
  - {name: sydney-early, schedule: "0 2 * * *", duration: 3h, timeZone: Australia/Sydney, profile: c, nodeSelector: {pool: research}}
  - {name: tokyo-evening, schedule: "0 20 * * 1-5", duration: 10h, timeZone: Asia/Tokyo, profile: b}
  - {name: hourly, schedule: "15 * * * *", duration: 20m, profile: c, nodeSelector: {pool: research}}
  - {name: ny-hourly, schedule: "45 * * * *", duration: 10m, timeZone: America/New_York, profile: b, nodeSelector: {pool: inference}}
  - {name: ny-weekly, schedule: "0 1 * * 0", duration: 30h, timeZone: America/New_York, profile: a}
  - {name: berlin-sunday, schedule: "*/20 2-3 * * 0", duration: 15m, timeZone: Europe/Berlin, profile: b}
  - {name: sydney-or, schedule: "30 2 1,5 * 0", duration: 1h, timeZone: Australia/Sydney, profile: a}
  - {name: utc-chain, schedule: "*/30 6-7 * * *", duration: 45m, profile: b}
`

// The span FuzzSelect draws instants from, and how far the oracle looks
// for the next change: no window of fuzzSelectFile leaves the answer alone
// for longer.
const (
	fuzzSelectSpan    = 6 * 366 * 24 * time.Hour
	fuzzSelectHorizon = 48 * time.Hour
)

var fuzzSelectEpoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// oracleCron is a five-field cron expression as the oracle reads it,
// without robfig/cron: each field a list of *, n, a-b, */s, a-b/s or a/s.
// When both day fields are restricted (neither is *), a day matching either
// matches; else it must match both.
type oracleCron struct {
	minute, hour, dom, month, dow uint64
	domStar, dowStar              bool
}

func parseOracleCron(expr string) (oracleCron, error) {
	fields := strings.Fields(expr)
	if len(fields) != 5 {
		return oracleCron{}, fmt.Errorf("%q: want 5 fields", expr)
	}
	bounds := [5][2]int{{0, 59}, {0, 23}, {1, 31}, {1, 12}, {0, 6}}
	var masks [5]uint64
	for i, field := range fields {
		for part := range strings.SplitSeq(field, ",") {
			rng, stepText, hasStep := strings.Cut(part, "/")
			lo, hi, step := bounds[i][0], bounds[i][1], 1
			var err error
			if hasStep {
				if step, err = strconv.Atoi(stepText); err != nil || step < 1 {
					return oracleCron{}, fmt.Errorf("%q: bad step %q", expr, stepText)
				}
			}
			switch a, b, isRange := strings.Cut(rng, "-"); {
			case rng == "*":
			case isRange:
				lo, err = strconv.Atoi(a)
				if err == nil {
					hi, err = strconv.Atoi(b)
				}
			default:
				lo, err = strconv.Atoi(rng)
				if !hasStep {
					hi = lo
				}
			}
			if err != nil || lo < bounds[i][0] || hi > bounds[i][1] || lo > hi {
				return oracleCron{}, fmt.Errorf("%q: bad field %q", expr, part)
			}
			for v := lo; v <= hi; v += step {
				masks[i] |= 1 << v
			}
		}
	}
	return oracleCron{minute: masks[0], hour: masks[1], dom: masks[2], month: masks[3], dow: masks[4],
		domStar: fields[2] == "*", dowStar: fields[4] == "*"}, nil
}

// day reports whether the expression fires on the day of the wall-clock
// time w.
func (c oracleCron) day(w time.Time) bool {
	if c.month&(1<<int(w.Month())) == 0 {
		return false
	}
	dom, dow := c.dom&(1<<w.Day()) != 0, c.dow&(1<<int(w.Weekday())) != 0
	if c.domStar || c.dowStar {
		return dom && dow
	}
	return dom || dow
}

// wallOf returns the wall-clock reading of t in loc as a UTC time with
// the same fields.
func wallOf(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
}

func offsetAt(t time.Time, loc *time.Location) time.Duration {
	_, off := t.In(loc).Zone()
	return time.Duration(off) * time.Second
}

// oracleInstants returns the instants at which clocks in loc read the
// wall-clock time w (fields in UTC), earliest first: none when clocks skip
// it, two when they go back over it.
func oracleInstants(w time.Time, loc *time.Location) []time.Time {
	var out []time.Time
	for _, probe := range []time.Duration{-15 * time.Hour, 0, 15 * time.Hour} {
		at := w.Add(-offsetAt(w.Add(probe), loc))
		if wallOf(at, loc).Equal(w) && !slices.ContainsFunc(out, at.Equal) {
			out = append(out, at)
		}
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}

// oracleJump returns the instant clocks in loc jump over the wall-clock
// time w, which they skip: the first minute whose reading is later than w,
// walking from one that reads earlier.
func oracleJump(t testing.TB, w time.Time, loc *time.Location) time.Time {
	t.Helper()
	at := w.Add(-offsetAt(w.Add(15*time.Hour), loc))
	for range 24 * 60 {
		if wallOf(at, loc).After(w) {
			return at
		}
		at = at.Add(time.Minute)
	}
	t.Fatalf("no jump over %s in %s", w, loc)
	return time.Time{}
}

// oracleStarts lists the instants from..to (and a few hours around) at
// which a window starts, as the Recurrence documentation says: at each
// wall-clock time the expression names, read in loc; a start in the hour
// clocks skip happens when they jump, a start in the hour they repeat once,
// at its first occurrence; except for expressions that fire in every hour
// of the day, which start at every instant the clock reads such a time.
func oracleStarts(t testing.TB, expr string, loc *time.Location, from, to time.Time) []time.Time {
	t.Helper()
	c, err := parseOracleCron(expr)
	if err != nil {
		t.Fatal(err)
	}
	hourly := c.hour == 1<<24-1
	var out []time.Time
	last := wallOf(to, loc).Add(3 * time.Hour)
	for h := wallOf(from, loc).Truncate(time.Hour).Add(-3 * time.Hour); !h.After(last); h = h.Add(time.Hour) {
		if c.hour&(1<<h.Hour()) == 0 || !c.day(h) {
			continue
		}
		for m := range 60 {
			if c.minute&(1<<m) == 0 {
				continue
			}
			w := h.Add(time.Duration(m) * time.Minute)
			at := oracleInstants(w, loc)
			switch {
			case hourly:
				out = append(out, at...)
			case len(at) == 0:
				out = append(out, oracleJump(t, w, loc))
			default:
				out = append(out, at[0])
			}
		}
	}
	slices.SortFunc(out, time.Time.Compare)
	return slices.CompactFunc(out, time.Time.Equal)
}

// oracle answers Select's question for fuzzSelectFile from the window
// starts oracleStarts lists.
type oracle struct {
	file   *File
	starts [][]time.Time // per window
}

func newOracle(t testing.TB, file *File, from, to time.Time) *oracle {
	t.Helper()
	o := &oracle{file: file}
	for _, w := range file.Windows {
		loc, err := time.LoadLocation(w.TimeZone)
		if err != nil {
			t.Fatal(err)
		}
		o.starts = append(o.starts, oracleStarts(t, w.Schedule, loc, from.Add(-w.Duration), to))
	}
	return o
}

func labelsCarry(sel, labels map[string]string) bool {
	for k, v := range sel {
		if have, ok := labels[k]; !ok || have != v {
			return false
		}
	}
	return true
}

// active reports whether window i covers t: it started at s, t-d < s <= t.
func (o *oracle) active(i int, t time.Time) bool {
	s, d := o.starts[i], o.file.Windows[i].Duration
	k := sort.Search(len(s), func(k int) bool { return s[k].After(t.Add(-d)) })
	return k < len(s) && !s[k].After(t)
}

// selectAt returns the answer Select's documentation gives, and whether it
// is an error.
func (o *oracle) selectAt(labels map[string]string, t time.Time) (Selection, bool) {
	for i, w := range o.file.Windows {
		if labelsCarry(w.NodeSelector, labels) && o.active(i, t) {
			return Selection{Profile: w.Profile, Source: SourceWindow, Window: w.Name, Rule: -1}, false
		}
	}
	if v := labels[carvev1.LabelProfile]; v != "" {
		if _, ok := o.file.Profiles[v]; !ok {
			return Selection{Source: SourceNone, Rule: -1}, true
		}
		return Selection{Profile: v, Source: SourceLabel, Rule: -1}, false
	}
	for i, r := range o.file.Rules {
		if len(r.NodeSelector) > 0 && labelsCarry(r.NodeSelector, labels) {
			return Selection{Profile: r.Profile, Source: SourceRule, Rule: i}, false
		}
	}
	if o.file.DefaultProfile != "" {
		return Selection{Profile: o.file.DefaultProfile, Source: SourceDefault, Rule: -1}, false
	}
	return Selection{Source: SourceNone, Rule: -1}, false
}

// boundaries lists, in order, the instants in (from, to] at which a window
// the labels select starts or ends.
func (o *oracle) boundaries(labels map[string]string, from, to time.Time) []time.Time {
	var out []time.Time
	for i, w := range o.file.Windows {
		if !labelsCarry(w.NodeSelector, labels) {
			continue
		}
		s := o.starts[i]
		for k := sort.Search(len(s), func(k int) bool { return s[k].After(from.Add(-w.Duration)) }); k < len(s) && !s[k].After(to); k++ {
			for _, b := range []time.Time{s[k], s[k].Add(w.Duration)} {
				if b.After(from) && !b.After(to) {
					out = append(out, b)
				}
			}
		}
	}
	slices.SortFunc(out, time.Time.Compare)
	return slices.CompactFunc(out, time.Time.Equal)
}

// zoneTransitions lists the instants from..to at which clocks in loc
// change, found by walking hour by hour, then minute by minute.
func zoneTransitions(loc *time.Location, from, to time.Time) []time.Time {
	var out []time.Time
	off := offsetAt(from, loc)
	for h := from; h.Before(to); h = h.Add(time.Hour) {
		if offsetAt(h.Add(time.Hour), loc) == off {
			continue
		}
		for m := h.Add(time.Minute); ; m = m.Add(time.Minute) {
			if next := offsetAt(m, loc); next != off {
				out, off = append(out, m), next
				break
			}
		}
	}
	return out
}

// FuzzSelect checks Select and NextChange on fuzzSelectFile, at instants
// from 2025 to 2030 or within two days of a clock change, against an
// oracle that reads the schedules itself and maps wall-clock times to
// instants with the time package alone (walking the clock minute by
// minute; no robfig/cron, no ZoneBounds):
//
//   - Select's answer at the instant, just before NextChange and at it is
//     the oracle's;
//   - NextChange is the oracle's first change: the first start or end of a
//     window the node matches at which the answer differs, unless more than
//     maxChangeSteps such instants come first, where it is the last of
//     them (none of fuzzSelectFile's windows comes near that);
//   - as NextChange's documentation promises, Select's answer is the same
//     at every such instant before NextChange and just before it, and
//     different at NextChange (unless the bound was hit).
func FuzzSelect(f *testing.F) {
	f.Add(int64(0), int64(0), uint8(0))
	f.Add(int64(86400*88+3600), int64(5), uint8(1))    // spring change in Berlin, 2025
	f.Add(int64(86400*298+1800), int64(999), uint8(1)) // autumn change in Berlin
	f.Add(int64(86400*66+7*3600), int64(0), uint8(2))  // New York spring change
	f.Add(int64(86400*150+6*3600+1800), int64(-1), uint8(3))
	f.Add(int64(-1), int64(1e9-1), uint8(255))
	for k := range int64(8) {
		// Near the clock changes, in every zone and for every node.
		f.Add(k*4*86400+2*86400-3600*k, int64(0), uint8(0x80+k))
	}
	file, err := Parse([]byte(fuzzSelectFile))
	if err != nil {
		f.Fatal(err)
	}
	from, to := fuzzSelectEpoch.Add(-7*24*time.Hour), fuzzSelectEpoch.Add(fuzzSelectSpan+fuzzSelectHorizon+7*24*time.Hour)
	o := newOracle(f, file, from, to)
	var changes []time.Time
	for _, zone := range []string{"Europe/Berlin", "America/New_York", "Australia/Sydney"} {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			f.Fatal(err)
		}
		changes = append(changes, zoneTransitions(loc, fuzzSelectEpoch, fuzzSelectEpoch.Add(fuzzSelectSpan))...)
	}
	if len(changes) < 30 {
		f.Fatalf("found %d clock changes in six years of three zones", len(changes))
	}
	labelSets := []map[string]string{
		nil,
		{"pool": "inference"},
		{"pool": "research"},
		{"pool": "inference", carvev1.LabelProfile: "b"},
		{"pool": "research", carvev1.LabelProfile: "nope"},
	}
	f.Fuzz(func(t *testing.T, secs, nanos int64, mode uint8) {
		span := int64(fuzzSelectSpan / time.Second)
		secs %= span
		if secs < 0 {
			secs += span
		}
		nanos %= int64(time.Second)
		if nanos < 0 {
			nanos += int64(time.Second)
		}
		now := fuzzSelectEpoch.Add(time.Duration(secs)*time.Second + time.Duration(nanos))
		if mode&0x80 != 0 {
			const near = 4 * 86400
			change := changes[int(secs/near)%len(changes)]
			now = change.Add(time.Duration(secs%near-near/2)*time.Second + time.Duration(nanos))
		}
		labels := labelSets[int(mode&0x7f)%len(labelSets)]
		same := func(a Selection, aErr error, b Selection, bErr error) bool {
			return a == b && (aErr == nil) == (bErr == nil) && (aErr == nil || aErr.Error() == bErr.Error())
		}
		checkOracle := func(at time.Time, what string) {
			t.Helper()
			got, err := file.Select(labels, at)
			want, wantErr := o.selectAt(labels, at)
			if got != want || (err != nil) != wantErr {
				t.Fatalf("Select(%v) at %s (%s, %s) = %+v (error %v); the oracle says %+v (error: %t)",
					labels, what, at, at.In(time.UTC), got, err, want, wantErr)
			}
		}

		s, err := file.Select(labels, now)
		checkOracle(now, "now")
		next := file.NextChange(labels, now)

		horizon := now.Add(fuzzSelectHorizon)
		bounds := o.boundaries(labels, now, horizon)
		cur, curErr := o.selectAt(labels, now)
		var want time.Time
		for _, b := range bounds {
			if a, aErr := o.selectAt(labels, b); a != cur || aErr != curErr {
				want = b
				break
			}
		}
		switch {
		case want.IsZero() && !next.IsZero() && !next.After(horizon):
			t.Fatalf("NextChange(%v, %s) = %s; the oracle sees no change until %s", labels, now, next, horizon)
		case !want.IsZero() && !next.Equal(want):
			t.Fatalf("NextChange(%v, %s) = %s; the oracle's first change is at %s", labels, now, next, want)
		}

		checkTimeline(t, file, labels, now, 3*24*time.Hour)
		if next.IsZero() {
			return
		}
		if !next.After(now) {
			t.Fatalf("NextChange(%s) = %s, not after now", now, next)
		}
		for _, b := range bounds {
			if !b.Before(next) {
				break
			}
			if sb, errB := file.Select(labels, b); !same(s, err, sb, errB) {
				t.Fatalf("Select at %s (error %v) and at %s (error %v), a window boundary before NextChange %s, differ (-now +then):\n%s",
					now, err, b, errB, next, cmp.Diff(s, sb))
			}
		}
		before, errBefore := file.Select(labels, next.Add(-time.Nanosecond))
		if !same(s, err, before, errBefore) {
			t.Fatalf("Select at %s (error %v) and at NextChange-1ns %s (error %v) differ (-now +before):\n%s", now, err, next, errBefore, cmp.Diff(s, before))
		}
		if at, errAt := file.Select(labels, next); same(s, err, at, errAt) {
			t.Fatalf("Select at NextChange(%v, %s) = %s is %+v (error %v), as at now: the answer must change there", labels, now, next, at, errAt)
		}
		checkOracle(next.Add(-time.Nanosecond), "NextChange-1ns")
		checkOracle(next, "NextChange")
	})
}

// checkTimeline checks Timeline against Select: the spans cover [now,
// now+d) without gaps, Select agrees with each span at its start and just
// before its end, and consecutive spans differ.
func checkTimeline(t *testing.T, file *File, labels map[string]string, now time.Time, d time.Duration) {
	t.Helper()
	spans, cut := file.Timeline(labels, now, d)
	if !cut.IsZero() {
		t.Fatalf("Timeline(%v, %s) cut at %s", labels, now, cut)
	}
	at := now
	for k, sp := range spans {
		if !sp.Start.Equal(at) || !sp.End.After(sp.Start) {
			t.Fatalf("span %d [%s, %s) does not follow %s", k, sp.Start, sp.End, at)
		}
		for _, x := range []time.Time{sp.Start, sp.End.Add(-time.Nanosecond)} {
			s, err := file.Select(labels, x)
			errText := ""
			if err != nil {
				errText = err.Error()
			}
			if s.Profile != sp.Profile || s.Source != sp.Source || s.Window != sp.Window || errText != sp.Error {
				t.Fatalf("span %d %+v, but Select at %s = %+v (error %q)", k, sp, x, s, errText)
			}
		}
		if k > 0 && spans[k-1].Profile == sp.Profile && spans[k-1].Source == sp.Source && spans[k-1].Window == sp.Window && spans[k-1].Error == sp.Error {
			t.Fatalf("spans %d and %d hold the same selection", k-1, k)
		}
		at = sp.End
	}
	if !at.Equal(now.Add(d)) {
		t.Fatalf("timeline ends at %s, want %s", at, now.Add(d))
	}
}
