package configs

import (
	"fmt"
	"time"

	"github.com/carve-dev/carve/internal/textfmt"
)

// maxChangeSteps bounds the boundary instants NextChange and InMaintenance
// examine; past it they return the last one examined, at which the answer
// has not changed, so the caller simply asks again then.
const maxChangeSteps = 1000

// maxTimelineSteps bounds the boundary instants Timeline examines.
const maxTimelineSteps = 200000

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
			return Selection{Profile: w.Profile, Source: SourceWindow, Window: w.Name, Rule: -1}, nil
		}
	}
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

// matchingWindows returns the windows whose nodeSelector matches labels.
func (f *File) matchingWindows(labels map[string]string) []*Recurrence {
	var out []*Recurrence
	for i := range f.Windows {
		if selectorMatches(f.Windows[i].NodeSelector, labels) {
			out = append(out, &f.Windows[i].Recurrence)
		}
	}
	return out
}

// nextBoundaryOf returns the first instant after t at which one of the
// recurrences starts or ends, or the zero time when none ever does.
func nextBoundaryOf(rs []*Recurrence, t time.Time) time.Time {
	var next time.Time
	for _, r := range rs {
		next = earliest(next, r.nextBoundary(t))
	}
	return next
}

// selection is a Select answer, error included, comparable with ==.
type selection struct {
	Selection
	err string
}

func (f *File) selectAt(labels map[string]string, t time.Time) selection {
	s, err := f.Select(labels, t)
	if err != nil {
		return selection{Selection: s, err: err.Error()}
	}
	return selection{Selection: s}
}

// NextChange returns the earliest instant after now at which Select's
// answer for these labels can change, or the zero time when it never will
// (no window applies to the node). Only window starts and ends change the
// answer; NextChange skips those that leave it as it is (a window that
// starts while an earlier-listed one is active), within a bound: after
// many such instants it returns the last one, where the answer is still
// the same, so a timer set to it is always safe.
func (f *File) NextChange(labels map[string]string, now time.Time) time.Time {
	ws := f.matchingWindows(labels)
	if len(ws) == 0 {
		return time.Time{}
	}
	cur := f.selectAt(labels, now)
	t := now
	for range maxChangeSteps {
		c := nextBoundaryOf(ws, t)
		if c.IsZero() {
			return time.Time{}
		}
		if f.selectAt(labels, c) != cur {
			return c.In(now.Location())
		}
		t = c
	}
	return t.In(now.Location())
}

// InMaintenance reports whether disruptive changes may run at now, and the
// next instant after now at which that changes (zero when it never does).
// Without maintenance windows changes may run any time: (true, zero).
// Overlapping or back-to-back maintenance windows count as one.
func (f *File) InMaintenance(now time.Time) (active bool, next time.Time) {
	if len(f.Maintenance) == 0 {
		return true, time.Time{}
	}
	rs := make([]*Recurrence, len(f.Maintenance))
	for i := range f.Maintenance {
		rs[i] = &f.Maintenance[i]
	}
	anyActive := func(t time.Time) bool {
		for _, r := range rs {
			if r.active(t) {
				return true
			}
		}
		return false
	}
	active = anyActive(now)
	t := now
	for range maxChangeSteps {
		c := nextBoundaryOf(rs, t)
		if c.IsZero() {
			return active, time.Time{}
		}
		if anyActive(c) != active {
			return active, c.In(now.Location())
		}
		t = c
	}
	return active, t.In(now.Location())
}

// Timeline returns the selections in force for a node with these labels
// from from for d, as consecutive spans, each with a different answer from
// the one before. Span times are in from's location. When windows change
// so often that more than a large bound of instants would need examining,
// the timeline ends early, at the last instant examined.
func (f *File) Timeline(labels map[string]string, from time.Time, d time.Duration) []Span {
	if d <= 0 {
		return nil
	}
	loc := from.Location()
	end := from.Add(d)
	ws := f.matchingWindows(labels)
	var spans []Span
	start, cur := from, f.selectAt(labels, from)
	t := from
	for steps := 0; ; steps++ {
		if steps == maxTimelineSteps {
			end = t
			break
		}
		c := nextBoundaryOf(ws, t)
		if c.IsZero() || !c.Before(end) {
			break
		}
		if s := f.selectAt(labels, c); s != cur {
			spans = append(spans, makeSpan(start.In(loc), c.In(loc), cur))
			start, cur = c, s
		}
		t = c
	}
	if end.After(start) {
		spans = append(spans, makeSpan(start.In(loc), end.In(loc), cur))
	}
	return spans
}

func makeSpan(start, end time.Time, s selection) Span {
	return Span{Start: start, End: end, Profile: s.Profile, Source: s.Source, Window: s.Window, Error: s.err}
}
