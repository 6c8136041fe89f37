package configs

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/carve-dev/carve/internal/textfmt"
)

// Field names of a rollout section.
const (
	fieldRollout        = "rollout"
	fieldMaxUnavailable = "maxUnavailable"
	fieldMaxFailures    = "maxFailures"
)

// Rollout bounds the disruptive changes of the nodes whose agents read one
// profile file: how many nodes may be in one at once, and how many may fail
// on one revision of the file before no further node starts one.
type Rollout struct {
	// MaxUnavailable is how many nodes may be in a disruptive change at
	// once: a count, or a percentage of the nodes whose agents read the
	// file. Parse sets 1 when the file gives none.
	MaxUnavailable Bound
	// MaxFailures is how many nodes may be failed on one revision of the
	// file before the rollout halts: no further node starts a disruptive
	// change until the file changes. Parse sets 1 when the file gives none.
	MaxFailures int
}

// DefaultRollout is the rollout of a file that gives none: one node at a
// time, as a DaemonSet rolls, halted by the first failure.
var DefaultRollout = Rollout{MaxUnavailable: Bound{N: 1}, MaxFailures: 1}

// Bound is a count of nodes, or a percentage of them.
type Bound struct {
	// N is the count, or the percentage when Percent is set.
	N int
	// Percent makes N a percentage (1 to 100).
	Percent bool
}

// Of returns the bound for a number of nodes. A percentage rounds up, as a
// DaemonSet's maxUnavailable does, so that any percentage lets at least one
// node change.
func (b Bound) Of(nodes int) int {
	if !b.Percent {
		return b.N
	}
	return (b.N*max(nodes, 0) + 99) / 100
}

// String writes the bound as the file does: "3" or "10%".
func (b Bound) String() string {
	if b.Percent {
		return strconv.Itoa(b.N) + "%"
	}
	return strconv.Itoa(b.N)
}

// RolloutFor returns the rollout for the changes a selection causes: the
// active window's own, when it gives one, else the file's.
func (f *File) RolloutFor(sel Selection) Rollout {
	if sel.Source == SourceWindow {
		for _, w := range f.Windows {
			if w.Name == sel.Window && w.Rollout != nil {
				return *w.Rollout
			}
		}
	}
	return f.Rollout
}

// partialRollout is a rollout section as written: the fields it gives.
type partialRollout struct {
	maxUnavailable *Bound
	maxFailures    *int
}

// over returns base with the fields p gives replaced.
func (p partialRollout) over(base Rollout) Rollout {
	if p.maxUnavailable != nil {
		base.MaxUnavailable = *p.maxUnavailable
	}
	if p.maxFailures != nil {
		base.MaxFailures = *p.maxFailures
	}
	return base
}

// rollout decodes a rollout section.
func (d *decoder) rollout(path string, v any) partialRollout {
	var out partialRollout
	m, ok := d.fields(path, v, fieldMaxUnavailable, fieldMaxFailures)
	if !ok {
		return out
	}
	if raw, ok := m[fieldMaxUnavailable]; ok {
		if b, ok := d.bound(textfmt.Field(path, fieldMaxUnavailable), raw); ok {
			out.maxUnavailable = &b
		}
	}
	if raw, ok := m[fieldMaxFailures]; ok {
		p := textfmt.Field(path, fieldMaxFailures)
		if n, ok := d.integer(p, raw); ok {
			if n < 1 {
				d.ps.add(p, "must be at least 1, not %d: the rollout halts once this many nodes have failed", n)
			} else {
				out.maxFailures = &n
			}
		}
	}
	return out
}

// bound decodes a count of nodes (a whole number from 1) or a percentage
// ("10%", 1 to 100).
func (d *decoder) bound(path string, v any) (Bound, bool) {
	const want = "a count of nodes from 1 or a percentage such as \"10%\""
	switch x := v.(type) {
	case json.Number:
		n, ok := d.integer(path, x)
		if !ok {
			return Bound{}, false
		}
		if n < 1 {
			d.ps.add(path, "must be at least 1, not %d: 0 would hold every disruptive change for good (maintenance windows say when changes may run)", n)
			return Bound{}, false
		}
		return Bound{N: n}, true
	case string:
		num, ok := strings.CutSuffix(strings.TrimSpace(x), "%")
		if !ok {
			d.ps.add(path, "%q: want %s", x, want)
			return Bound{}, false
		}
		n, err := strconv.Atoi(num)
		if err != nil || n < 1 || n > 100 {
			d.ps.add(path, "%q: a percentage must be a whole number from 1%% to 100%%", x)
			return Bound{}, false
		}
		return Bound{N: n, Percent: true}, true
	}
	d.ps.add(path, "must be %s, not %s", want, textfmt.Kind(v))
	return Bound{}, false
}
