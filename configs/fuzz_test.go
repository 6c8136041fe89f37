package configs

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/robfig/cron/v3"

	carvev1 "github.com/carve-dev/carve/api/v1"
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
	} {
		f.Add([]byte(src))
	}
	g := catalogue()
	node := dgxH100()
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
	})
}

// fuzzSelectFile has windows in zones with and without clock changes, that
// cross midnight, overlap, chain and apply to some nodes or all.
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
  - {name: tokyo-evening, schedule: "0 20 * * 1-5", duration: 10h, timeZone: Asia/Tokyo, profile: b}
  - {name: hourly, schedule: "15 * * * *", duration: 20m, profile: c, nodeSelector: {pool: research}}
  - {name: ny-weekly, schedule: "0 1 * * 0", duration: 30h, timeZone: America/New_York, profile: a}
  - {name: utc-chain, schedule: "*/30 6-7 * * *", duration: 45m, profile: b}
`

// oracleActive decides whether a window in a zone without clock changes is
// active, with robfig/cron evaluated in the zone itself.
func oracleActive(t *testing.T, w Window, at time.Time) (bool, bool) {
	t.Helper()
	if w.TimeZone != "UTC" && w.TimeZone != "Asia/Tokyo" {
		return false, false
	}
	loc, err := time.LoadLocation(w.TimeZone)
	if err != nil {
		t.Fatal(err)
	}
	s, err := cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow).Parse(w.Schedule)
	if err != nil {
		t.Fatal(err)
	}
	s.(*cron.SpecSchedule).Location = loc
	start := s.Next(at.Add(-w.Duration))
	return !start.IsZero() && !start.After(at), true
}

func FuzzSelect(f *testing.F) {
	f.Add(int64(0), int64(0), uint8(0))
	f.Add(int64(86400*88+3600), int64(5), uint8(1))    // spring change in Berlin, 2025
	f.Add(int64(86400*298+1800), int64(999), uint8(1)) // autumn change in Berlin
	f.Add(int64(86400*66+7*3600), int64(0), uint8(2))  // New York spring change
	f.Add(int64(86400*150+6*3600+1800), int64(-1), uint8(3))
	f.Add(int64(-1), int64(1e9-1), uint8(255))
	file, err := Parse([]byte(fuzzSelectFile))
	if err != nil {
		f.Fatal(err)
	}
	labelSets := []map[string]string{
		nil,
		{"pool": "inference"},
		{"pool": "research"},
		{"pool": "inference", carvev1.LabelProfile: "b"},
		{"pool": "research", carvev1.LabelProfile: "nope"},
	}
	const span = int64(6 * 366 * 86400) // 2025 to 2030
	epoch := utc(2025, 1, 1, 0, 0)
	f.Fuzz(func(t *testing.T, secs, nanos int64, labelBits uint8) {
		secs %= span
		if secs < 0 {
			secs += span
		}
		nanos %= int64(time.Second)
		if nanos < 0 {
			nanos += int64(time.Second)
		}
		now := epoch.Add(time.Duration(secs)*time.Second + time.Duration(nanos))
		labels := labelSets[int(labelBits)%len(labelSets)]
		s, err := file.Select(labels, now)
		if s.Source == SourceWindow {
			var w *Window
			for i := range file.Windows {
				if file.Windows[i].Name == s.Window {
					w = &file.Windows[i]
				}
			}
			if w == nil || !w.active(now) || !selectorMatches(w.NodeSelector, labels) {
				t.Fatalf("Select at %s chose window %q, which is not active for %v", now, s.Window, labels)
			}
			if active, ok := oracleActive(t, *w, now); ok && !active {
				t.Fatalf("Select at %s chose window %q; robfig/cron says it is not active", now, s.Window)
			}
		}
		for i, w := range file.Windows {
			if s.Source == SourceWindow && w.Name == s.Window {
				break
			}
			if active, ok := oracleActive(t, w, now); ok && active && selectorMatches(w.NodeSelector, labels) {
				t.Fatalf("Select at %s = %+v, but window %d (%s) is active and listed first", now, s, i, w.Name)
			}
		}
		next := file.NextChange(labels, now)
		if next.IsZero() {
			return
		}
		if !next.After(now) {
			t.Fatalf("NextChange(%s) = %s, not after now", now, next)
		}
		before, errBefore := file.Select(labels, next.Add(-time.Nanosecond))
		if diff := cmp.Diff(s, before); diff != "" || (err == nil) != (errBefore == nil) {
			t.Fatalf("Select at %s (error %v) and at NextChange-1ns %s (error %v) differ (-now +before):\n%s", now, err, next, errBefore, diff)
		}
	})
}
