package configs

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Files an attacker or a careless edit may produce: each entry selecting
// the same GPUs, model filters that all overlap, thousands of windows.
// Their problems are reported once per place, so the count stays linear
// in the entries (it was one per pair: 999000 for 2000 entries), and the
// work is bounded (no wall-clock assertions; make fuzz and the
// benchmarks watch the time).
func TestHostileFilesProblemsPerPlace(t *testing.T) {
	const n = 2000
	repeat := func(head, item string) string {
		var b strings.Builder
		b.WriteString(head)
		for i := range n {
			b.WriteString(strings.ReplaceAll(item, "$i", fmt.Sprint(i)))
		}
		return b.String()
	}
	tests := []struct {
		name     string
		src      string
		problems int    // exactly this many
		last     string // the last problem
	}{
		{"every entry selects every GPU", repeat("version: v1\nprofiles:\n  p:\n", "    - gpus: all\n      timeSlicing: {replicas: 2}\n"),
			n - 1, "profiles.p[1999]: unreachable: profiles.p[0] (gpus: all, no model filter) already selects every GPU"},
		{"every entry selects GPU 0", repeat("version: v1\nprofiles:\n  p:\n", "    - gpus: [0, 1]\n      model: H100-80GB\n"),
			n - 1, "profiles.p[1999].gpus: GPUs 0-1 are also selected by profiles.p[0]; a GPU may be selected by one entry only"},
		{"model filters no model matches: unverified, not problems", repeat("version: v1\nprofiles:\n  p:\n", "    - gpus: all\n      model: GPU-$i\n      mig: {1g.10gb: 1}\n"),
			0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if len(tt.src) > MaxFileBytes {
				t.Fatalf("test file of %d bytes is over the limit", len(tt.src))
			}
			f, err := Parse([]byte(tt.src))
			if err == nil {
				err = f.Validate(catalogue(), nil)
			}
			var problems []Problem
			if cerr, ok := errors.AsType[*Error](err); ok {
				problems = cerr.Problems
			} else if err != nil {
				t.Fatal(err)
			}
			if len(problems) != tt.problems {
				t.Fatalf("%d problems, want %d", len(problems), tt.problems)
			}
			if tt.last != "" && problems[len(problems)-1].String() != tt.last {
				t.Errorf("last problem %q, want %q", problems[len(problems)-1], tt.last)
			}
			if err == nil {
				return
			}
			if lines := strings.Count(err.Error(), "\n") + 1; lines > maxErrorLines+1 {
				t.Errorf("Error() has %d lines, want at most %d", lines, maxErrorLines+1)
			}
		})
	}
}

// Model filters that are written differently and match the same model
// (H100-80GB and "H100 80GB HBM3" both match the H100-80GB): reported once per entry
// after the first, naming the first and the model.
func TestHostileModelOverlapsOncePerEntry(t *testing.T) {
	var b strings.Builder
	b.WriteString("version: v1\nprofiles:\n  p:\n")
	for i := range 2 * (MaxGPUIndex + 1) { // GPU k selected by entries 2k and 2k+1
		model := "H100-80GB"
		if i%2 == 1 {
			model = "H100 80GB HBM3"
		}
		fmt.Fprintf(&b, "    - gpus: [%d]\n      model: %s\n      mig: {1g.10gb: 1}\n", i/2, model)
	}
	f := mustParse(t, b.String())
	err := f.Validate(catalogue(), nil)
	cerr, ok := errors.AsType[*Error](err)
	if !ok {
		t.Fatalf("Validate = %v, want problems", err)
	}
	// Parse's check already reports equal filters; Validate adds the
	// entries whose different filters meet on a model.
	want := "profiles.p[1].gpus: on H100-80GB, GPU 0 is also selected by profiles.p[0] (both model filters match H100-80GB)"
	if len(cerr.Problems) != MaxGPUIndex+1 || cerr.Problems[0].String() != want {
		t.Errorf("%d problems, first %q; want one per odd entry (%d), first %q", len(cerr.Problems), cerr.Problems[0], MaxGPUIndex+1, want)
	}
}

// The defects of meaning: YAML 1.1 words as names, a second document,
// numbers that are not finite, keys that are not strings, a syntax error
// without a place, a file over the limit.
func TestHostileParse(t *testing.T) {
	t.Run("on, off and yes are profile names", func(t *testing.T) {
		f := mustParse(t, "version: v1\ndefaultProfile: on\nprofiles:\n  on: []\n  off: []\n  yes: []\n")
		if diff := cmp.Diff([]string{"off", "on", "yes"}, sortedKeys(f.Profiles)); diff != "" || f.DefaultProfile != "on" {
			t.Errorf("profiles (-want +got):\n%s default %q", diff, f.DefaultProfile)
		}
	})
	tests := []struct {
		name, src string
		want      []string
	}{
		{"a second document", "version: v1\nprofiles: {a: []}\n---\nprofiles: {b: []}\n", []string{"line 3: a second YAML document (after ---); the file must hold exactly one"}},
		{"infinite replicas", "version: v1\nprofiles:\n  a:\n    - gpus: all\n      timeSlicing: {replicas: .inf}\n", []string{"profiles.a[0].timeSlicing.replicas: line 5: the number .inf is not a finite number"}},
		{"NaN duration", "version: v1\nprofiles: {a: []}\ndrain: {timeout: .nan}\n", []string{"drain.timeout: line 3: the number .nan is not a finite number"}},
		{"a list as a key", "version: v1\nprofiles:\n  ? [a, b]\n  : []\n", []string{"profiles: line 3: a list is not a valid key here; keys are strings"}},
		{"a syntax error has a line", "version: v1\nprofiles: {a: [}\n", []string{"line 1: invalid YAML: did not find expected node content"}}, // the line yaml reports
		{"over the size limit", "version: v1\n#" + strings.Repeat("x", MaxFileBytes), []string{"the file is larger than 262144 bytes (256 KiB), the most carve reads"}},
		{"a GPU index beyond any node", "version: v1\nprofiles:\n  a:\n    - gpus: [0, 100000]\n", []string{"profiles.a[0].gpus[1]: GPU index 100000 is beyond 255; no node has that many GPUs"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.src))
			cerr, ok := errors.AsType[*Error](err)
			if !ok {
				t.Fatalf("Parse = %v, want problems", err)
			}
			var got []string
			for _, p := range cerr.Problems {
				got = append(got, p.String())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

// A model filter on an entry without MIG that matches no GPU known here is
// a note (it selected nothing without a word); one that names a GPU
// without MIG, or a MIG-capable one, is not.
func TestSharingModelFilterChecked(t *testing.T) {
	f := mustParse(t, `version: v1
profiles:
  p:
    - gpus: [0]
      model: H10O
      timeSlicing: {replicas: 2}
    - gpus: [1]
      model: L4
      timeSlicing: {replicas: 2}
    - gpus: [2]
      model: H100
      timeSlicing: {replicas: 2}
`)
	unverified, err := f.Check(catalogue(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(unverified) != 1 || unverified[0].Path != "profiles.p[0].model" || !strings.Contains(unverified[0].Message, `"H10O" matches no GPU model known here`) {
		t.Errorf("unverified %v, want one for profiles.p[0].model", unverified)
	}
}

// Thousands of windows, and a window that is always active: the timeline
// covers the whole span (the always-active window is one span, not cut
// short), and NextChange finds no change; a timeline too busy to finish
// within its budget of cron evaluations says where it stops.
func TestHostileWindows(t *testing.T) {
	var b strings.Builder
	b.WriteString("version: v1\nprofiles: {p: [], q: []}\nwindows:\n  - {name: always, schedule: \"* * * * *\", duration: 2m, profile: p}\n")
	for i := range 2000 {
		fmt.Fprintf(&b, "  - {name: w%d, schedule: \"%d * * * *\", duration: 1h, profile: q}\n", i, i%60)
	}
	f := mustParse(t, b.String())
	from := utc(2026, 1, 1, 0, 0)
	spans, cut := f.Timeline(nil, from, 30*24*time.Hour)
	if !cut.IsZero() || len(spans) != 1 || spans[0].Window != "always" || !spans[0].End.Equal(from.Add(30*24*time.Hour)) {
		t.Errorf("timeline %v cut at %s; want one span of the always-active window over the whole month", spans, cut)
	}
	if next := f.NextChange(nil, from); !next.IsZero() && !next.After(from.Add(24*time.Hour)) {
		t.Errorf("NextChange = %s; want none, or a safe instant well ahead", next)
	}

	busy := mustParse(t, "version: v1\nprofiles: {p: [], q: []}\nwindows:\n"+
		"  - {name: a, schedule: \"* * * * *\", duration: 30s, profile: p}\n"+
		"  - {name: b, schedule: \"* * * * *\", duration: 45s, profile: q}\n")
	spans, cut = busy.timeline(nil, from, 366*24*time.Hour, 10_000)
	if cut.IsZero() || !spans[len(spans)-1].End.Equal(cut) || !cut.After(from) {
		t.Errorf("busy timeline: %d spans, cut %s; want a cut where the last span ends", len(spans), cut)
	}
}
