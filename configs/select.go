package configs

import (
	"fmt"
	"time"

	"github.com/carve-dev/carve/internal/textfmt"
)

// Budgets of cron evaluations for the sweeps over windows (sweep.go):
// NextChange and InMaintenance run on every pass of the agent, Timeline
// once per carvectl windows. Each is about a microsecond.
const (
	changeBudget   = 100_000
	timelineBudget = 2_000_000
)

// changeHorizon is how far NextChange and InMaintenance look ahead; cron
// schedules that do not fire within five years never fire.
const changeHorizon = 5 * 366 * 24 * time.Hour

// selectorMatches reports whether labels carry every key of sel with the
// same value. An empty or nil selector matches every node.
func selectorMatches(sel, labels map[string]string) bool {
	for k, v := range sel {
		if lv, ok := labels[k]; !ok || lv != v {
			return false
		}
	}
	return true
}

// Select returns the profile in force at now for a node with these labels,
// and why. The first of these wins:
//
//  1. an active window whose nodeSelector matches; among overlapping active
//     windows, the one listed first;
//  2. the node label PinLabel names, carve.dev/profile unless ProfileLabel
//     says otherwise (an empty value counts as absent; a value naming no
//     profile is an error wrapping *UnknownProfileError, not a
//     fall-through);
//  3. the first rule whose nodeSelector matches;
//  4. defaultProfile;
//  5. nothing: Source is SourceNone and the agent leaves the GPUs alone.
//
// Select reads no clock; it is a pure function of its arguments.
func (f *File) Select(labels map[string]string, now time.Time) (Selection, error) {
	for i := range f.Windows {
		w := &f.Windows[i]
		if !selectorMatches(w.NodeSelector, labels) {
			continue
		}
		if _, err := w.schedule(); err != nil {
			return Selection{Source: SourceNone, Rule: -1}, fmt.Errorf("%s: %w", textfmt.Item(fieldWindows, i), err)
		}
		if w.active(now) {
			return w.selection(), nil
		}
	}
	return f.selectWithoutWindows(labels)
}

// selection is what an active window selects.
func (w *Window) selection() Selection {
	return Selection{Profile: w.Profile, Source: SourceWindow, Window: w.Name, Rule: -1}
}

// selectWithoutWindows is Select when no window is active: steps 2-5.
func (f *File) selectWithoutWindows(labels map[string]string) (Selection, error) {
	if v := labels[f.PinLabel()]; v != "" {
		if _, ok := f.Profiles[v]; !ok {
			return Selection{Source: SourceNone, Rule: -1},
				fmt.Errorf("node label %s=%s: %w", f.PinLabel(), v, &UnknownProfileError{Name: v, Known: sortedKeys(f.Profiles)})
		}
		return Selection{Profile: v, Source: SourceLabel, Rule: -1}, nil
	}
	for i, r := range f.Rules {
		if len(r.NodeSelector) > 0 && selectorMatches(r.NodeSelector, labels) {
			return Selection{Profile: r.Profile, Source: SourceRule, Rule: i}, nil
		}
	}
	if f.DefaultProfile != "" {
		return Selection{Profile: f.DefaultProfile, Source: SourceDefault, Rule: -1}, nil
	}
	return Selection{Source: SourceNone, Rule: -1}, nil
}

// windowSweep is a sweep over the windows that apply to a node with
// these labels, from from up to horizon, and a function giving the
// selection while the first active one of them is the i-th (-1: none).
// Select stops at the first window whose schedule does not compile; so
// does this: that window stands for its error, active for good.
func (f *File) windowSweep(labels map[string]string, from, horizon time.Time, budget int) (*sweep, func(i int) selection) {
	var rs []*Recurrence
	var always []bool
	var sels []selection
	for i := range f.Windows {
		w := &f.Windows[i]
		if !selectorMatches(w.NodeSelector, labels) {
			continue
		}
		rs = append(rs, &w.Recurrence)
		if _, err := w.schedule(); err != nil {
			always = append(always, true)
			sels = append(sels, selection{Selection: Selection{Source: SourceNone, Rule: -1}, err: fmt.Errorf("%s: %w", textfmt.Item(fieldWindows, i), err).Error()})
			break
		}
		always = append(always, false)
		sels = append(sels, selection{Selection: w.selection()})
	}
	s, err := f.selectWithoutWindows(labels)
	base := selection{Selection: s}
	if err != nil {
		base.err = err.Error()
	}
	return newSweep(rs, always, from, horizon, budget), func(i int) selection {
		if i < 0 {
			return base
		}
		return sels[i]
	}
}

// selection is a Select answer, error included, comparable with ==.
type selection struct {
	Selection
	err string
}

// NextChange returns the earliest instant after now at which Select's
// answer for these labels can change, or the zero time when it never will
// (no window applies to the node, or none starts or ends within five
// years). Window starts and ends that leave the answer as it is (a window
// that starts while an earlier-listed one is active, occurrences that
// overlap) are skipped. The work is bounded: when windows change too often
// to look far enough, it returns the last instant it looked at, where the
// answer is still the same, so a timer set to it is always safe.
func (f *File) NextChange(labels map[string]string, now time.Time) time.Time {
	sw, sel := f.windowSweep(labels, now, now.Add(changeHorizon), changeBudget)
	cur := sel(sw.First())
	for {
		t, ok := sw.Advance()
		if !ok {
			return sw.Cut.In(now.Location()) // zero when the sweep ran out of changes
		}
		if sel(sw.First()) != cur {
			return t.In(now.Location())
		}
	}
}

// InMaintenance reports whether disruptive changes may run at now, and the
// next instant after now at which that changes (zero when it never does).
// Without maintenance windows changes may run any time: (true, zero).
// Overlapping or back-to-back maintenance windows count as one. The work is
// bounded as NextChange's is.
func (f *File) InMaintenance(now time.Time) (active bool, next time.Time) {
	if len(f.Maintenance) == 0 {
		return true, time.Time{}
	}
	rs := make([]*Recurrence, len(f.Maintenance))
	for i := range f.Maintenance {
		rs[i] = &f.Maintenance[i]
	}
	sw := newSweep(rs, nil, now, now.Add(changeHorizon), changeBudget)
	active = sw.Any()
	for {
		t, ok := sw.Advance()
		if !ok {
			return active, sw.Cut.In(now.Location())
		}
		if sw.Any() != active {
			return active, t.In(now.Location())
		}
	}
}

// Timeline returns the selections in force for a node with these labels
// from from for d, as consecutive spans, each with a different answer from
// the one before. Span times are in from's location. When windows change
// so often that the work would exceed a large bound, the timeline ends
// early and cut is the instant it ends at; cut is zero when the timeline
// covers all of d.
func (f *File) Timeline(labels map[string]string, from time.Time, d time.Duration) (spans []Span, cut time.Time) {
	return f.timeline(labels, from, d, timelineBudget)
}

// timeline is Timeline with a budget of cron evaluations.
func (f *File) timeline(labels map[string]string, from time.Time, d time.Duration, budget int) (spans []Span, cut time.Time) {
	if d <= 0 {
		return nil, time.Time{}
	}
	loc := from.Location()
	end := from.Add(d)
	sw, sel := f.windowSweep(labels, from, end, budget)
	start, cur := from, sel(sw.First())
	for {
		t, ok := sw.Advance()
		if !ok {
			break
		}
		if s := sel(sw.First()); s != cur {
			spans = append(spans, makeSpan(start.In(loc), t.In(loc), cur))
			start, cur = t, s
		}
	}
	if !sw.Cut.IsZero() {
		end, cut = sw.Cut, sw.Cut.In(loc)
	}
	if end.After(start) {
		spans = append(spans, makeSpan(start.In(loc), end.In(loc), cur))
	}
	return spans, cut
}

func makeSpan(start, end time.Time, s selection) Span {
	return Span{Start: start, End: end, Profile: s.Profile, Source: s.Source, Window: s.Window, Error: s.err}
}
