package configs

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// specExample is a profile file using every field of the format (docs/profiles.md).
const specExample = `
version: v1
defaultProfile: full
profiles:
  full:                       # whole GPUs, no sharing, MIG off
    - gpus: all
  shared-4:
    - gpus: all
      timeSlicing: {replicas: 4}
  balanced:
    - gpus: all
      model: H100-80GB        # optional filter on the GPU model
      mig: {1g.10gb: 2, 2g.20gb: 1, 3g.40gb: 1}
      timeSlicing:
        replicas: {1g.10gb: 2}    # per MIG profile, or one number for all
  split:
    - gpus: [0, 1, 2, 3]
      mig: {1g.10gb: 7}
    - gpus: [4, 5, 6, 7]
      timeSlicing: {replicas: 2, renameShared: true}   # advertise nvidia.com/gpu.shared
  hybrid:
    - gpus: [0, 1, 2, 3]
      mig: {1g.10gb: 7}
    - gpus: [4, 5, 6, 7]
      dynamic: {profiles: [1g.10gb, 3g.40gb, 7g.80gb]}  # MIG devices made for DRA claims; {} for every profile
rules:                        # choose by node labels when no label pins a profile
  - nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
    profile: balanced
windows:                      # scheduled repartition windows
  - name: nightly-training
    schedule: "0 20 * * 1-5"  # cron, 5 fields, window start
    duration: 10h
    timeZone: Europe/Berlin
    nodeSelector: {pool: inference}
    profile: full
maintenance:                  # when disruptive changes may run; absent = any time
  - schedule: "0 2 * * *"
    duration: 2h
drain:
  policy: wait                # wait | evict | fail, for pods holding devices a change removes
  timeout: 30m
rollout:                      # how many nodes may be in a disruptive change at once
  maxUnavailable: 1           # a count or a percentage ("10%"); default 1
  maxFailures: 1              # failed nodes on this revision that halt further disruptive changes
`

// ignoreSchedule leaves the compiled schedule of a Recurrence (and so of a
// Window) out of cmp comparisons; tests that care check it apart.
var ignoreSchedule = cmpopts.IgnoreUnexported(Recurrence{})

func mustParse(t testing.TB, src string) *File {
	t.Helper()
	f, err := Parse([]byte(src))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return f
}

func TestParseSpecExample(t *testing.T) {
	f := mustParse(t, specExample)
	want := &File{
		Version:        "v1",
		DefaultProfile: "full",
		Profiles: map[string]Profile{
			"full":     {{GPUs: GPUSelector{All: true}}},
			"shared-4": {{GPUs: GPUSelector{All: true}, TimeSlicing: &TimeSlicing{Replicas: Replicas{Count: 4}}}},
			"balanced": {{
				GPUs:  GPUSelector{All: true},
				Model: "H100-80GB",
				MIG:   map[string]int{"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
				TimeSlicing: &TimeSlicing{
					Replicas: Replicas{PerProfile: map[string]int{"1g.10gb": 2}},
				},
			}},
			"split": {
				{GPUs: GPUSelector{Indices: []int{0, 1, 2, 3}}, MIG: map[string]int{"1g.10gb": 7}},
				{GPUs: GPUSelector{Indices: []int{4, 5, 6, 7}}, TimeSlicing: &TimeSlicing{Replicas: Replicas{Count: 2}, RenameShared: true}},
			},
			"hybrid": {
				{GPUs: GPUSelector{Indices: []int{0, 1, 2, 3}}, MIG: map[string]int{"1g.10gb": 7}},
				{GPUs: GPUSelector{Indices: []int{4, 5, 6, 7}}, Dynamic: &Dynamic{Profiles: []string{"1g.10gb", "3g.40gb", "7g.80gb"}}},
			},
		},
		Rules: []Rule{{NodeSelector: map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, Profile: "balanced"}},
		Windows: []Window{{
			Name:         "nightly-training",
			Recurrence:   Recurrence{Schedule: "0 20 * * 1-5", Duration: 10 * time.Hour, TimeZone: "Europe/Berlin"},
			NodeSelector: map[string]string{"pool": "inference"},
			Profile:      "full",
		}},
		Maintenance: []Recurrence{{Schedule: "0 2 * * *", Duration: 2 * time.Hour, TimeZone: "UTC"}},
		Drain:       Drain{Policy: DrainWait, Timeout: 30 * time.Minute},
		Rollout:     Rollout{MaxUnavailable: Bound{N: 1}, MaxFailures: 1},
	}
	if diff := cmp.Diff(want, f, ignoreSchedule); diff != "" {
		t.Errorf("Parse(spec example) mismatch (-want +got):\n%s", diff)
	}
	for _, w := range f.Windows {
		if w.sched == nil {
			t.Errorf("window %s: schedule not compiled", w.Name)
		}
	}
}

func TestParseExampleFile(t *testing.T) {
	data, err := os.ReadFile("examples/profiles.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f := mustParse(t, string(data))
	for _, name := range []string{"full", "balanced", "all-1g", "shared-4", "split"} {
		if _, ok := f.Profiles[name]; !ok {
			t.Errorf("example lacks profile %s", name)
		}
	}
	if len(f.Rules) == 0 || len(f.Windows) < 2 {
		t.Errorf("example lacks rules or day/night windows: %+v", f)
	}
	// Disruptive changes run at once by default; the maintenance windows
	// are a commented-out block that must be valid once uncommented.
	if len(f.Maintenance) != 0 {
		t.Errorf("example restricts disruptive changes to maintenance windows: %+v", f.Maintenance)
	}
	if m := mustParse(t, uncommentBlock(t, string(data), "# maintenance:")); len(m.Maintenance) != 2 {
		t.Errorf("the commented maintenance block gives %d windows, want 2", len(m.Maintenance))
	}
	if diff := cmp.Diff(Drain{Policy: DrainWait, Timeout: 20 * time.Minute}, f.Drain); diff != "" {
		t.Errorf("drain (-want +got):\n%s", diff)
	}
	if err := f.Validate(catalogue(), nil); err != nil {
		t.Errorf("Validate(catalogue): %v", err)
	}
	if err := f.Validate(catalogue(), dgxH100()); err != nil {
		t.Errorf("Validate(dgx-h100): %v", err)
	}
}

func TestParseDefaults(t *testing.T) {
	f := mustParse(t, `
version: v1
profiles:
  full: []
  mig-on:
    - gpus: [1, 0]
      mig: {}
windows:
  - name: w
    schedule: "0 1 * * *"
    duration: 1h
    profile: full
`)
	if diff := cmp.Diff(Drain{Policy: DrainWait, Timeout: DefaultDrainTimeout}, f.Drain); diff != "" {
		t.Errorf("drain defaults (-want +got):\n%s", diff)
	}
	wantWindows := []Window{{Name: "w", Recurrence: Recurrence{Schedule: "0 1 * * *", Duration: time.Hour, TimeZone: "UTC"}, Profile: "full"}}
	if diff := cmp.Diff(wantWindows, f.Windows, ignoreSchedule); diff != "" {
		t.Errorf("window defaults (-want +got):\n%s", diff)
	}
	// cmp tells an empty profile or MIG map from a nil one, which would mean
	// something else (no profile; MIG off).
	wantProfiles := map[string]Profile{
		"full":   {},
		"mig-on": {{GPUs: GPUSelector{Indices: []int{1, 0}}, MIG: map[string]int{}}},
	}
	if diff := cmp.Diff(wantProfiles, f.Profiles); diff != "" {
		t.Errorf("profiles (-want +got):\n%s", diff)
	}
}

// base is a valid file the error cases below extend.
const base = `version: v1
profiles:
  full:
    - gpus: all
  balanced:
    - gpus: all
      mig: {1g.10gb: 2, 3g.40gb: 1}
`

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		// want holds "path: message fragment" per expected problem; the
		// problems must be exactly these, in this order.
		want []string
	}{
		{"misspelt field names its path", `version: v1
profiles:
  balanced:
    - gpus: all
      timeslicing: {replicas: 2}
`, []string{"profiles.balanced[0].timeslicing: unknown field (did you mean timeSlicing?)"}},
		{"unknown top-level field", base + "defaultprofile: full\nextra: 1\n", []string{
			"defaultprofile: unknown field (did you mean defaultProfile?)",
			"extra: unknown field (known fields here: version, defaultProfile, profiles, rules, windows, maintenance, drain, rollout)",
		}},
		{"unknown field deep in windows", base + `windows:
  - name: w
    schedule: "0 1 * * *"
    duration: 1h
    profile: full
    nodeselector: {a: b}
`, []string{"windows[0].nodeselector: unknown field (did you mean nodeSelector?)"}},
		{"duplicate key", `version: v1
profiles:
  full:
    - gpus: all
  full:
    - gpus: all
`, []string{`profiles.full: line 5: key "full" given twice (first on line 3)`}},
		{"two duplicate keys, each at its place", "version: v1\nversion: v1\nprofiles: {a: []}\nprofiles: {a: []}\n", []string{
			`profiles: line 4: key "profiles" given twice (first on line 3)`,
			`version: line 2: key "version" given twice (first on line 1)`,
		}},
		{"not YAML", "version: [v1\n", []string{"line 1: invalid YAML: did not find expected ',' or ']'"}},
		{"tab indentation", "version: v1\nprofiles:\n  a:\n  - gpus: all\n\tmig: {}\n", []string{"line 4: invalid YAML: found a tab character that violates indentation"}},
		{"empty file", "", []string{"the file is empty"}},
		{"top level is a list", "- a\n", []string{"must be a mapping, not a list"}},
		{"version missing and profiles missing", "defaultProfile: x\n", []string{
			"profiles: required",
			"version: required; set version: v1",
		}},
		{"wrong version", strings.Replace(base, "v1", "v2", 1), []string{`version: unsupported version "v2"; this carve reads version v1`}},
		{"version as number", strings.Replace(base, "v1", "1", 1), []string{"version: must be a string, not the number 1 (quote it)"}},
		{"no profiles", "version: v1\nprofiles: {}\n", []string{"profiles: must define at least one profile"}},
		{"profile not a list", "version: v1\nprofiles:\n  full:\n", []string{"profiles.full: must be a list of entries"}},
		{"bad profile name", "version: v1\nprofiles:\n  Big GPUs: []\n", []string{"profiles.Big GPUs: invalid profile name"}},
		{"gpus missing", "version: v1\nprofiles:\n  p:\n    - mig: {}\n", []string{"profiles.p[0].gpus: required"}},
		{"gpus bad string", "version: v1\nprofiles:\n  p:\n    - gpus: All\n", []string{`profiles.p[0].gpus: must be all or a list of GPU indices, not "All"`}},
		{"gpus number", "version: v1\nprofiles:\n  p:\n    - gpus: 3\n", []string{"profiles.p[0].gpus: must be all or a list of GPU indices, not the number 3 (write [3] for one GPU)"}},
		{"gpus empty list", "version: v1\nprofiles:\n  p:\n    - gpus: []\n", []string{"profiles.p[0].gpus: must list at least one GPU index"}},
		{"gpus bad items", "version: v1\nprofiles:\n  p:\n    - gpus: [0, -1, 0, x, 1.5]\n", []string{
			"profiles.p[0].gpus[1]: GPU index -1 is negative",
			"profiles.p[0].gpus[2]: GPU 0 is listed twice",
			`profiles.p[0].gpus[3]: must be a whole number, not the string "x"`,
			"profiles.p[0].gpus[4]: must be a whole number, not 1.5",
		}},
		{"model empty", "version: v1\nprofiles:\n  p:\n    - gpus: all\n      model: ''\n", []string{"profiles.p[0].model: must not be empty"}},
		{"model only nvidia", "version: v1\nprofiles:\n  p:\n    - gpus: all\n      model: NVIDIA\n", []string{`profiles.p[0].model: "NVIDIA" names no GPU model`}},
		{"mig null", "version: v1\nprofiles:\n  p:\n    - gpus: all\n      mig:\n", []string{"profiles.p[0].mig: must be a mapping of MIG profile to instance count"}},
		{"mig counts", "version: v1\nprofiles:\n  p:\n    - gpus: all\n      mig: {1g.10gb: 0, 2g.20gb: two, 3g.40gb: 1000, nvidia.com/mig-4g.40gb: 1}\n", []string{
			"profiles.p[0].mig.1g.10gb: instance count must be at least 1, not 0",
			`profiles.p[0].mig.2g.20gb: must be a whole number, not the string "two"`,
			"profiles.p[0].mig.3g.40gb: 1000 instances are more than any GPU holds",
			"profiles.p[0].mig.nvidia.com/mig-4g.40gb: write the MIG profile name alone, e.g. 4g.40gb",
		}},
		{"replicas bounds", `version: v1
profiles:
  a:
    - gpus: [0]
      timeSlicing: {replicas: 0}
    - gpus: [1]
      timeSlicing: {replicas: 2000}
    - gpus: [2]
      timeSlicing: {renameShared: true}
    - gpus: [3]
      timeSlicing: {replicas: 1.5}
`, []string{
			"profiles.a[0].timeSlicing.replicas: replicas must be at least 1, not 0",
			"profiles.a[1].timeSlicing.replicas: 2000 replicas exceed the limit of 1024 per device",
			"profiles.a[2].timeSlicing.replicas: required",
			"profiles.a[3].timeSlicing.replicas: must be a whole number, not 1.5",
		}},
		{"replicas per profile", `version: v1
profiles:
  a:
    - gpus: [0]
      timeSlicing: {replicas: {1g.10gb: 2}}
    - gpus: [1]
      mig: {1g.10gb: 3}
      timeSlicing: {replicas: {2g.20gb: 2, 1g.10gb: 1025}}
    - gpus: [2]
      mig: {}
      timeSlicing: {replicas: {1g.10gb: 2}}
    - gpus: [3]
      mig: {1g.10gb: 1}
      timeSlicing: {replicas: {}}
`, []string{
			"profiles.a[0].timeSlicing.replicas: replicas per MIG profile need mig on this entry",
			"profiles.a[1].timeSlicing.replicas.1g.10gb: 1025 replicas exceed the limit of 1024",
			"profiles.a[1].timeSlicing.replicas.2g.20gb: 2g.20gb is not among this entry's MIG profiles (mig has: 1g.10gb)",
			"profiles.a[2].timeSlicing.replicas.1g.10gb: 1g.10gb is not among this entry's MIG profiles (mig has: none)",
			"profiles.a[3].timeSlicing.replicas: must name at least one MIG profile",
		}},
		{"booleans", `version: v1
profiles:
  a:
    - gpus: all
      timeSlicing: {replicas: 2, renameShared: "yes", failRequestsGreaterThanOne: 1}
`, []string{
			`profiles.a[0].timeSlicing.failRequestsGreaterThanOne: must be true or false, not the number 1`,
			`profiles.a[0].timeSlicing.renameShared: must be true or false, not the string "yes"`,
		}},
		{"overlapping entries", `version: v1
profiles:
  a:
    - gpus: [0, 1, 2]
    - gpus: [2, 3]
      mig: {}
    - gpus: [1, 2, 5]
      model: H100
  b:
    - gpus: all
    - gpus: [7]
  c:
    - gpus: all
      model: H100-80GB
    - gpus: [1]
      model: h100 80gb
    - gpus: [1]
      model: A100
    - gpus: all
      model: A30
`, []string{
			"profiles.a[1].gpus: GPU 2 is also selected by profiles.a[0]",
			"profiles.a[2].gpus: GPUs 1-2 are also selected by profiles.a[0]", // once per entry: the first it overlaps
			"profiles.b[1]: unreachable: profiles.b[0] (gpus: all, no model filter) already selects every GPU",
			"profiles.c[1].gpus: GPU 1 is also selected by profiles.c[0]",
		}},
		{"unknown profiles listed with the known ones", base + `defaultProfile: ful
rules:
  - nodeSelector: {pool: a}
    profile: nope
windows:
  - name: w
    schedule: "0 1 * * *"
    duration: 1h
    profile: Balanced
`, []string{
			`defaultProfile: unknown profile "ful" (did you mean full?); known profiles: balanced, full`,
			`rules[0].profile: unknown profile "nope"; known profiles: balanced, full`,
			`windows[0].profile: unknown profile "Balanced" (did you mean balanced?); known profiles: balanced, full`,
		}},
		{"rules", base + `rules:
  - nodeSelector: {}
    profile: full
  - profile: full
  - nodeSelector: {pool: a}
  - nodeSelector: {gpu.count: 8, ready: true, "bad key!": x, pool: "bad value!"}
    profile: full
  - full
`, []string{
			"rules[0].nodeSelector: must name at least one label",
			"rules[1].nodeSelector: required",
			"rules[2].profile: required",
			`rules[3].nodeSelector.bad key!: invalid label key: name "bad key!"`,
			"rules[3].nodeSelector.gpu.count: must be a string, not the number 8 (quote it)",
			`rules[3].nodeSelector.pool: invalid label value "bad value!"`,
			"rules[3].nodeSelector.ready: must be a string, not the boolean true (quote it)",
			`rules[4]: must be a mapping, not the string "full"`,
		}},
		{"windows", base + `windows:
  - name: six-fields
    schedule: "0 0 1 * * *"
    duration: 1h
    profile: full
  - name: tz-prefix
    schedule: "CRON_TZ=Europe/Berlin 0 1 * * *"
    duration: 1h
    profile: full
  - name: bad-zone
    schedule: "0 1 * * *"
    duration: 1h
    timeZone: Mars/Olympus
    profile: full
  - name: bad-cron
    schedule: "61 1 * * *"
    duration: 0s
    profile: full
  - name: too-long
    schedule: "0 1 * * *"
    duration: 200h
    profile: full
  - name: days
    schedule: "0 1 * * *"
    duration: 1d
    profile: full
  - name: days
    schedule: "0 0 30 2 *"
    duration: 1h
    profile: full
  - schedule: "@daily"
    duration: 1h
    timeZone: Local
    nodeSelector:
    profile: full
  - name: "not a label value"
    schedule: "0 1 * * *"
    duration: 90
    profile: full
  - name: number-dur
    schedule: "0 1 * * *"
    profile: full
    duration: 1h
    nodeSelector: {pool: inference}
  - name: x
    duration: 1h
    profile: full
`, []string{
			`windows[0].schedule: "0 0 1 * * *": want 5 cron fields (minute hour day-of-month month day-of-week), got 6`,
			`windows[1].schedule: "CRON_TZ=Europe/Berlin 0 1 * * *": time zone prefixes are not supported; give the zone in timeZone`,
			`windows[2].timeZone: unknown time zone "Mars/Olympus"`,
			"windows[3].duration: must be positive, not 0s",
			`windows[3].schedule: "61 1 * * *": invalid cron expression: end of range (61) above maximum (59)`,
			"windows[4].duration: 200h0m0s is longer than the maximum of 168h0m0s (one week)",
			`windows[5].duration: invalid duration "1d": want a Go duration such as 10h, 90m or 1h30m (days as hours: 24h)`,
			`windows[6].name: duplicate window name "days" (also windows[5])`,
			`windows[6].schedule: "0 0 30 2 *": schedule never fires`,
			"windows[7].name: required",
			"windows[7].nodeSelector: must be a mapping of label keys to values, not null",
			`windows[7].schedule: "@daily": want 5 cron fields (minute hour day-of-month month day-of-week), got 1`,
			"windows[7].timeZone: time zone Local depends on the machine",
			"windows[8].duration: must be a duration such as 10h or 90m, not the number 90",
			"windows[8].name: invalid window name",
			"windows[10].schedule: required",
		}},
		{"maintenance and drain", base + `maintenance:
  - schedule: "0 2 * * *"
  - schedule: "0 2 * *"
    duration: 2h
    name: nightly
drain:
  policy: delete
  timeout: 0s
  grace: 1m
`, []string{
			"drain.grace: unknown field",
			`drain.policy: unknown policy "delete"; want wait, evict or fail`,
			"drain.timeout: must be positive, not 0s",
			"maintenance[0].duration: required",
			"maintenance[1].name: unknown field",
			`maintenance[1].schedule: "0 2 * *": want 5 cron fields`,
		}},
		{"label keys and values", base + `windows:
  - name: w
    schedule: "0 1 * * *"
    duration: 1h
    profile: full
    nodeSelector:
      Example.com/pool: a
      example.com/: a
      -bad.com/x: a
      ok.example.com/long: ` + strings.Repeat("v", 64) + `
      "": a
`, []string{
			`windows[0].nodeSelector."": invalid label key: name "" must be 1-63`,
			`windows[0].nodeSelector.-bad.com/x: invalid label key: prefix "-bad.com" must be a lower-case DNS subdomain`,
			`windows[0].nodeSelector.Example.com/pool: invalid label key: prefix "Example.com" must be a lower-case DNS subdomain`,
			`windows[0].nodeSelector.example.com/: invalid label key: name "" must be 1-63`,
			`windows[0].nodeSelector.ok.example.com/long: invalid label value "vvvv`,
		}},
		{"sections of the wrong type", base + "rules: {a: b}\nwindows: x\nmaintenance: 3\ndrain: []\n", []string{
			"drain: must be a mapping, not a list",
			"maintenance: must be a list, not the number 3",
			"rules: must be a list, not a mapping",
			`windows: must be a list, not the string "x"`,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse([]byte(tc.src))
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", f)
			}
			if f != nil {
				t.Errorf("Parse returned a file with its error")
			}
			var perr *Error
			if !errors.As(err, &perr) {
				t.Fatalf("error %T is not *Error: %v", err, err)
			}
			got := perr.Problems
			if len(got) != len(tc.want) {
				t.Fatalf("got %d problems, want %d:\n%v", len(got), len(tc.want), err)
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(got[i].String(), w) && !strings.Contains(got[i].String(), w) {
					t.Errorf("problem %d = %q, want it to contain %q", i, got[i].String(), w)
				}
				if path, _, ok := strings.Cut(w, ": "); ok && !strings.Contains(path, " ") && got[i].Path != path {
					t.Errorf("problem %d path = %q, want %q", i, got[i].Path, path)
				}
			}
			if err.Error() != joinProblems(got) {
				t.Errorf("Error() = %q", err.Error())
			}
		})
	}
}

func joinProblems(ps []Problem) string {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p.String())
	}
	return b.String()
}

func TestErrorSortsPathsNumerically(t *testing.T) {
	var ps problems
	ps.add("windows[10].schedule", "b")
	ps.add("windows[2].schedule", "a")
	ps.add("", "whole file")
	ps.add("defaultProfile", "x")
	ps.add("windows[2].schedule", "a") // duplicate
	ps.add("profiles.p[1].gpus[12]", "y")
	ps.add("profiles.p[1].gpus[3]", "z")
	err := ps.err()
	want := "whole file\ndefaultProfile: x\nprofiles.p[1].gpus[3]: z\nprofiles.p[1].gpus[12]: y\nwindows[2].schedule: a\nwindows[10].schedule: b"
	if err == nil || err.Error() != want {
		t.Errorf("got\n%v\nwant\n%s", err, want)
	}
	var empty problems
	if empty.err() != nil {
		t.Errorf("no problems must give a nil error")
	}
}

func TestParseKeepsEveryProblemDeterministic(t *testing.T) {
	src := base + `rules:
  - nodeSelector: {a: b}
    profile: x
  - nodeSelector: {a: b}
    profile: y
windows:
  - {name: a, schedule: "bad", duration: 1h, profile: z}
`
	_, err1 := Parse([]byte(src))
	for range 20 {
		_, err2 := Parse([]byte(src))
		if err1 == nil || err2 == nil || err1.Error() != err2.Error() {
			t.Fatalf("non-deterministic errors:\n%v\n---\n%v", err1, err2)
		}
	}
	perr, ok := errors.AsType[*Error](err1)
	if !ok {
		t.Fatalf("error %T, want *Error", err1)
	}
	if n := len(perr.Problems); n != 4 {
		t.Errorf("got %d problems, want 4:\n%v", n, err1)
	}
}

func TestMatchModel(t *testing.T) {
	h100 := GPUModel{Key: "H100-80GB", Product: "NVIDIA H100 80GB HBM3"}
	a100 := GPUModel{Key: "A100-40GB", Product: "NVIDIA A100-SXM4-40GB"}
	h200 := GPUModel{Key: "H200-141GB", Product: "NVIDIA H200"}
	tests := []struct {
		filter string
		model  GPUModel
		want   bool
	}{
		{"H100-80GB", h100, true},
		{"h100_80gb", h100, true},
		{"H100 80GB", h100, true},
		{"NVIDIA H100 80GB HBM3", h100, true},
		{"NVIDIA-H100-80GB-HBM3", h100, true},
		{"nvidia_h100", h100, true},
		{"H100", h100, true},
		{"HBM3", h100, true},
		{"H10", h100, false},
		{"H100-40GB", h100, false},
		{"80GB-H100", h100, false},
		{"A100", h100, false},
		{"A100", a100, true},
		{"A100-40GB", a100, true},
		{"NVIDIA-A100-SXM4-40GB", a100, true},
		{"A100-SXM4", a100, true},
		{"A100-80GB", a100, false},
		{"H200-141GB", h200, true},
		{"NVIDIA-H200", h200, true},
		{"H200-141GB", h100, false},
		{"", h100, true},
		{"NVIDIA", a100, true},
	}
	for _, tc := range tests {
		if got := MatchModel(tc.filter, tc.model); got != tc.want {
			t.Errorf("MatchModel(%q, %s) = %v, want %v", tc.filter, tc.model.Key, got, tc.want)
		}
	}
}

func TestParseCompactExample(t *testing.T) {
	f := mustParse(t, compactExample)
	if err := f.Validate(catalogue(), dgxH100()); err != nil {
		t.Fatal(err)
	}
}

// uncommentBlock removes "# " from the line that is start and the comment
// lines after it, up to the first line that is not a comment.
func uncommentBlock(t *testing.T, data, start string) string {
	t.Helper()
	lines := strings.Split(data, "\n")
	in, found := false, false
	for i, l := range lines {
		if l == start {
			in, found = true, true
		}
		if in && !strings.HasPrefix(l, "#") {
			in = false
		}
		if in {
			lines[i] = strings.TrimPrefix(l, "# ")
		}
	}
	if !found {
		t.Fatalf("no line %q", start)
	}
	return strings.Join(lines, "\n")
}
