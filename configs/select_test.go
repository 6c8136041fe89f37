package configs

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	carvev1 "github.com/carve-dev/carve/api/v1"
)

// selectFile has windows that cross midnight, overlap, and apply to all
// nodes or to some, rules and a default. Times are UTC.
const selectFile = `version: v1
defaultProfile: full
profiles:
  full: [{gpus: all}]
  shared: [{gpus: all, timeSlicing: {replicas: 4}}]
  mig: [{gpus: all, mig: {}}]
  night: [{gpus: all, timeSlicing: {replicas: 2}}]
rules:
  - nodeSelector: {pool: research}
    profile: mig
  - nodeSelector: {pool: research, zone: a}
    profile: shared
windows:
  - name: night
    schedule: "0 22 * * *"
    duration: 8h
    nodeSelector: {pool: inference}
    profile: night
  - name: noon
    schedule: "0 12 * * *"
    duration: 1h
    profile: shared
  - name: overlap
    schedule: "30 12 * * *"
    duration: 1h
    profile: mig
`

func sel(profile, source, window string, rule int) Selection {
	return Selection{Profile: profile, Source: source, Window: window, Rule: rule}
}

func TestSelectPrecedence(t *testing.T) {
	f := mustParse(t, selectFile)
	inference := map[string]string{"pool": "inference"}
	research := map[string]string{"pool": "research", "zone": "a"}
	pinned := map[string]string{"pool": "inference", carvev1.LabelProfile: "mig"}
	day := func(h, m int) time.Time { return utc(2025, 6, 2, h, m) }
	tests := []struct {
		name   string
		labels map[string]string
		at     time.Time
		want   Selection
	}{
		{"window crossing midnight, evening", inference, day(23, 0), sel("night", SourceWindow, "night", -1)},
		{"window crossing midnight, next morning", inference, utc(2025, 6, 3, 5, 59), sel("night", SourceWindow, "night", -1)},
		{"window over", inference, utc(2025, 6, 3, 6, 0), sel("full", SourceDefault, "", -1)},
		{"before the window", inference, day(21, 59), sel("full", SourceDefault, "", -1)},
		{"window selector does not match", research, day(23, 0), sel("mig", SourceRule, "", 0)},
		{"window beats the label", pinned, day(23, 0), sel("night", SourceWindow, "night", -1)},
		{"label beats rules", map[string]string{"pool": "research", carvev1.LabelProfile: "night"}, day(10, 0), sel("night", SourceLabel, "", -1)},
		{"label outside windows", pinned, day(10, 0), sel("mig", SourceLabel, "", -1)},
		{"empty label counts as absent", map[string]string{carvev1.LabelProfile: ""}, day(10, 0), sel("full", SourceDefault, "", -1)},
		{"first matching rule", research, day(10, 0), sel("mig", SourceRule, "", 0)},
		{"rule needs every label", map[string]string{"zone": "a"}, day(10, 0), sel("full", SourceDefault, "", -1)},
		{"default", nil, day(10, 0), sel("full", SourceDefault, "", -1)},
		{"window without selector applies to all nodes", nil, day(12, 15), sel("shared", SourceWindow, "noon", -1)},
		{"overlapping windows: the first listed wins", research, day(12, 45), sel("shared", SourceWindow, "noon", -1)},
		{"second window after the first ends", nil, day(13, 15), sel("mig", SourceWindow, "overlap", -1)},
		{"second window over", nil, day(13, 30), sel("full", SourceDefault, "", -1)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := f.Select(tc.labels, tc.at)
			if err != nil {
				t.Fatalf("Select: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Select mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSelectUnknownLabelIsAnError(t *testing.T) {
	f := mustParse(t, selectFile)
	labels := map[string]string{carvev1.LabelProfile: "shraed", "pool": "inference"}
	s, err := f.Select(labels, utc(2025, 6, 2, 10, 0))
	var uerr *UnknownProfileError
	if !errors.As(err, &uerr) || uerr.Name != "shraed" {
		t.Fatalf("Select = %+v, %v; want *UnknownProfileError", s, err)
	}
	if diff := cmp.Diff(sel("", SourceNone, "", -1), s); diff != "" {
		t.Errorf("selection on error (-want +got):\n%s", diff)
	}
	for _, frag := range []string{"carve.dev/profile=shraed", "did you mean shared?", "known profiles: full, mig, night, shared"} {
		if !strings.Contains(err.Error(), frag) {
			t.Errorf("%q lacks %q", err, frag)
		}
	}
	// A window in force is chosen before the label is looked at.
	if s, err := f.Select(labels, utc(2025, 6, 2, 23, 0)); err != nil || s.Window != "night" {
		t.Errorf("in the window: %+v, %v", s, err)
	}
}

func TestSelectProfileLabel(t *testing.T) {
	f := mustParse(t, selectFile)
	f.ProfileLabel = "nvidia.com/mig.config"
	at := utc(2025, 6, 2, 10, 0)
	tests := []struct {
		name   string
		labels map[string]string
		want   Selection
		err    string
	}{
		{"the configured label pins", map[string]string{"nvidia.com/mig.config": "mig"}, sel("mig", SourceLabel, "", -1), ""},
		{"carve.dev/profile no longer pins", map[string]string{carvev1.LabelProfile: "mig"}, sel("full", SourceDefault, "", -1), ""},
		{"an unknown value names the configured label", map[string]string{"nvidia.com/mig.config": "all-1g.5gb"}, sel("", SourceNone, "", -1), "node label nvidia.com/mig.config=all-1g.5gb: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := f.Select(tc.labels, at)
			if (err != nil) != (tc.err != "") || err != nil && !strings.HasPrefix(err.Error(), tc.err) {
				t.Fatalf("Select error %v, want one starting %q", err, tc.err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Select mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSelectNone(t *testing.T) {
	f := mustParse(t, "version: v1\nprofiles: {full: []}\nrules: [{nodeSelector: {a: b}, profile: full}]\n")
	s, err := f.Select(map[string]string{"a": "c"}, utc(2025, 1, 1, 0, 0))
	if err != nil {
		t.Errorf("Select: %v", err)
	}
	if diff := cmp.Diff(sel("", SourceNone, "", -1), s); diff != "" {
		t.Errorf("Select mismatch, want none (-want +got):\n%s", diff)
	}
}

func TestSelectDST(t *testing.T) {
	f := mustParse(t, `version: v1
profiles: {full: [], night: []}
windows:
  - name: two
    schedule: "0 2 * * *"
    duration: 1h
    timeZone: Europe/Berlin
    profile: night
`)
	tests := []struct {
		at   time.Time
		want string
	}{
		{utc(2025, 3, 29, 1, 30), "two"}, // 02:30 CET
		{utc(2025, 3, 30, 0, 59), ""},    // 01:59 CET
		{utc(2025, 3, 30, 1, 0), "two"},  // 03:00 CEST: 02:00 was skipped
		{utc(2025, 3, 30, 1, 59), "two"}, // 03:59 CEST
		{utc(2025, 3, 30, 2, 0), ""},     // 04:00 CEST
		{utc(2025, 10, 26, 0, 0), "two"}, // 02:00 CEST
		{utc(2025, 10, 26, 0, 59), "two"},
		{utc(2025, 10, 26, 1, 0), ""},  // 02:00 CET: no second start
		{utc(2025, 10, 26, 1, 30), ""}, // 02:30 CET
		{utc(2025, 10, 27, 1, 30), "two"},
	}
	for _, tc := range tests {
		s, err := f.Select(nil, tc.at)
		if err != nil {
			t.Fatal(err)
		}
		if s.Window != tc.want {
			t.Errorf("Select at %s = %+v, want window %q", tc.at, s, tc.want)
		}
	}
	if got := f.NextChange(nil, utc(2025, 10, 26, 0, 30)); !got.Equal(utc(2025, 10, 26, 1, 0)) {
		t.Errorf("NextChange in the autumn window = %s", got)
	}
	if got := f.NextChange(nil, utc(2025, 10, 26, 1, 0)); !got.Equal(utc(2025, 10, 27, 1, 0)) {
		t.Errorf("NextChange after the autumn window = %s, want 02:00 CET the next day", got)
	}
	if got := f.NextChange(nil, utc(2025, 3, 29, 12, 0)); !got.Equal(utc(2025, 3, 30, 1, 0)) {
		t.Errorf("NextChange before the spring change = %s, want the jump", got)
	}
}

func TestNextChange(t *testing.T) {
	f := mustParse(t, selectFile)
	inference := map[string]string{"pool": "inference"}
	day := func(h, m int) time.Time { return utc(2025, 6, 2, h, m) }
	tests := []struct {
		name   string
		labels map[string]string
		at     time.Time
		want   time.Time
	}{
		{"next window start", nil, day(10, 0), day(12, 0)},
		{"a start that changes nothing is skipped", nil, day(12, 10), day(13, 0)},
		{"end of the second window", nil, day(13, 0), day(13, 30)},
		{"exactly at a start, the next change", nil, day(12, 0), day(13, 0)},
		{"night window start", inference, day(18, 0), day(22, 0)},
		{"night window end, after midnight", inference, day(23, 0), utc(2025, 6, 3, 6, 0)},
		{"after the night, the noon window", inference, utc(2025, 6, 3, 6, 0), utc(2025, 6, 3, 12, 0)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := f.NextChange(tc.labels, tc.at)
			if !got.Equal(tc.want) {
				t.Errorf("NextChange = %s, want %s", got, tc.want)
			}
			before, _ := f.Select(tc.labels, got.Add(-time.Nanosecond))
			now, _ := f.Select(tc.labels, tc.at)
			after, _ := f.Select(tc.labels, got)
			if diff := cmp.Diff(now, before); diff != "" {
				t.Errorf("selection just before %s differs from the one at now (-now +before):\n%s", got, diff)
			}
			if cmp.Equal(now, after) {
				t.Errorf("selection at %s = %+v, the same as at now", got, after)
			}
		})
	}
}

func TestNextChangeNever(t *testing.T) {
	f := mustParse(t, `version: v1
profiles: {full: []}
defaultProfile: full
windows:
  - {name: w, schedule: "0 1 * * *", duration: 1h, nodeSelector: {pool: x}, profile: full}
`)
	if got := f.NextChange(map[string]string{"pool": "y"}, utc(2025, 1, 1, 0, 0)); !got.IsZero() {
		t.Errorf("NextChange without a matching window = %s, want zero", got)
	}
	// The window applies, but selects what the default selects: only its
	// name changes, and that counts (carve.dev/window label).
	if got := f.NextChange(map[string]string{"pool": "x"}, utc(2025, 1, 1, 0, 0)); !got.Equal(utc(2025, 1, 1, 1, 0)) {
		t.Errorf("NextChange = %s", got)
	}
}

func TestNextChangeAlwaysActiveWindow(t *testing.T) {
	// Back-to-back occurrences: the window never ends, so the answer never
	// changes. NextChange gives up after a bound and returns an instant at
	// which the answer is still the same.
	f := mustParse(t, `version: v1
profiles: {full: []}
windows:
  - {name: always, schedule: "* * * * *", duration: 2m, profile: full}
`)
	now := utc(2025, 1, 1, 0, 0)
	got := f.NextChange(nil, now)
	if got.IsZero() || !got.After(now) {
		t.Fatalf("NextChange = %s", got)
	}
	a, _ := f.Select(nil, now)
	b, _ := f.Select(nil, got)
	if diff := cmp.Diff(sel("full", SourceWindow, "always", -1), a); diff != "" {
		t.Errorf("selection at now (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("selection changed at %s (-now +then):\n%s", got, diff)
	}
}

func TestInMaintenance(t *testing.T) {
	none := mustParse(t, "version: v1\nprofiles: {full: []}\n")
	if active, next := none.InMaintenance(utc(2025, 1, 1, 0, 0)); !active || !next.IsZero() {
		t.Errorf("no maintenance: %v %s, want true, zero", active, next)
	}
	f := mustParse(t, `version: v1
profiles: {full: []}
maintenance:
  - {schedule: "0 2 * * *", duration: 2h}
  - {schedule: "0 3 * * *", duration: 2h}
  - {schedule: "0 23 * * 0", duration: 2h, timeZone: Europe/Berlin}
`)
	tests := []struct {
		at     time.Time
		active bool
		next   time.Time
	}{
		{utc(2025, 6, 2, 1, 0), false, utc(2025, 6, 2, 2, 0)},
		{utc(2025, 6, 2, 2, 30), true, utc(2025, 6, 2, 5, 0)}, // overlapping windows join
		{utc(2025, 6, 2, 5, 0), false, utc(2025, 6, 3, 2, 0)},
		// Sunday 23:00 CEST = 21:00 UTC, for 2h, across midnight.
		{utc(2025, 6, 1, 20, 0), false, utc(2025, 6, 1, 21, 0)},
		{utc(2025, 6, 1, 22, 30), true, utc(2025, 6, 1, 23, 0)},
	}
	for _, tc := range tests {
		active, next := f.InMaintenance(tc.at)
		if active != tc.active || !next.Equal(tc.next) {
			t.Errorf("InMaintenance(%s) = %v, %s; want %v, %s", tc.at, active, next, tc.active, tc.next)
		}
	}
}

func TestTimeline(t *testing.T) {
	f := mustParse(t, selectFile)
	inference := map[string]string{"pool": "inference"}
	from := utc(2025, 6, 2, 0, 0)
	got, cut := f.Timeline(inference, from, 30*time.Hour)
	if !cut.IsZero() {
		t.Errorf("timeline cut at %s", cut)
	}
	span := func(h1, h2 int, profile, source, window string) Span {
		return Span{Start: from.Add(time.Duration(h1) * time.Minute), End: from.Add(time.Duration(h2) * time.Minute),
			Profile: profile, Source: source, Window: window}
	}
	h := 60
	want := []Span{
		span(0, 6*h, "night", SourceWindow, "night"), // since 22:00 the day before
		span(6*h, 12*h, "full", SourceDefault, ""),
		span(12*h, 13*h, "shared", SourceWindow, "noon"),
		span(13*h, 13*h+30, "mig", SourceWindow, "overlap"),
		span(13*h+30, 22*h, "full", SourceDefault, ""),
		span(22*h, 30*h, "night", SourceWindow, "night"),
	}
	if diff := cmp.Diff(want, got, exactTime); diff != "" {
		t.Errorf("Timeline mismatch (-want +got):\n%s", diff)
	}
	if got, _ := f.Timeline(inference, from, 0); got != nil {
		t.Errorf("empty timeline = %v", got)
	}
	// A label naming an unknown profile shows as an error outside windows.
	bad, _ := f.Timeline(map[string]string{carvev1.LabelProfile: "x"}, utc(2025, 6, 2, 11, 0), 2*time.Hour)
	if len(bad) != 2 || bad[0].Error == "" || bad[0].Source != SourceNone || bad[1].Window != "noon" || bad[1].Error != "" {
		t.Errorf("timeline with a bad label = %s", spansString(bad))
	}
}

func TestTimelineDSTAndLocation(t *testing.T) {
	f := mustParse(t, `version: v1
profiles: {full: [], night: []}
defaultProfile: full
windows:
  - {name: nightly, schedule: "0 22 * * *", duration: 6h, timeZone: Europe/Berlin, profile: night}
`)
	berlin := mustZone(t, "Europe/Berlin")
	from := time.Date(2025, 10, 25, 12, 0, 0, 0, berlin)
	got, _ := f.Timeline(nil, from, 24*time.Hour)
	if len(got) != 3 {
		t.Fatalf("Timeline = %s", spansString(got))
	}
	// 22:00 CEST + 6h of elapsed time = 03:00 CET, not 04:00.
	if want := time.Date(2025, 10, 25, 22, 0, 0, 0, berlin); !got[1].Start.Equal(want) {
		t.Errorf("night starts %s, want %s", got[1].Start, want)
	}
	if want := time.Date(2025, 10, 26, 3, 0, 0, 0, berlin); !got[1].End.Equal(want) {
		t.Errorf("night ends %s, want %s", got[1].End, want)
	}
	if got[1].End.Location() != berlin || got[2].End.Location() != berlin {
		t.Errorf("span times are not in from's location")
	}
}

// exactTime makes cmp compare times as == does: the same instant, location
// and monotonic reading, where cmp would call time.Time.Equal, which looks
// at the instant only.
var exactTime = cmp.Comparer(func(a, b time.Time) bool {
	return a == b //nolint:revive,staticcheck // == on purpose, see above
})

func spansString(spans []Span) string {
	var b strings.Builder
	for _, s := range spans {
		b.WriteString(s.Start.Format(time.RFC3339) + " .. " + s.End.Format(time.RFC3339) + " " + s.Profile + " " + s.Source + " " + s.Window + " " + s.Error + "\n")
	}
	return b.String()
}
