package docs

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// developerPages are the pages written for people who work on carve; every
// other page of README.md and docs/ is a user page.
var developerPages = map[string]bool{
	"docs/development.md":   true,
	"docs/architecture.md":  true,
	"docs/local-cluster.md": true,
	"docs/benchmarks.md":    true,
	"docs/scale.md":         true,
	"docs/reliability.md":   true,
	"docs/plugin.md":        true,
}

// internals are what a user page must not hold: test names, test files,
// go test command lines, carve's Go identifiers and references to carve's
// own issues (another project's "owner/repo issue N" is a source, and
// allowed).
var internals = []struct {
	what string
	re   *regexp.Regexp
	// source allows another project's "owner/repo issue N" before it.
	source bool
}{
	{"a test name", regexp.MustCompile(`\bTest[A-Z][A-Za-z0-9_]+\b`), false},
	{"a test file", regexp.MustCompile(`\b[a-z0-9_]+_test\.go\b`), false},
	{"a go test command", regexp.MustCompile(`\bgo test\b`), false},
	{"a Go identifier of carve", regexp.MustCompile(`\b(agent|partition|sim|plugin|configs|desired|timeslice|nvml|carvev1|rollout|xidpolicy|nvimport|harness)\.[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*\b`), false},
	{"a Go method of carve", regexp.MustCompile(`\(\*[a-z0-9]+\.[A-Z][A-Za-z0-9]*\)`), false},
	{"one of carve's issues", regexp.MustCompile(`\b[Ii]ssues? #?[0-9]+\b`), true},
}

// userPage reports whether a page (relative to the repository) is a user
// page.
func userPage(rel string) bool {
	rel = filepath.ToSlash(rel)
	return !developerPages[rel] && !strings.HasPrefix(rel, "docs/internals/")
}

// TestUserPagesHoldNoInternals: user pages speak of what carve does, not
// of its code and tests; those details are in docs/development.md and
// docs/internals/.
func TestUserPagesHoldNoInternals(t *testing.T) {
	checked := 0
	for _, p := range pages(t) {
		if !userPage(p.Path) {
			continue
		}
		checked++
		for i, line := range strings.Split(p.Text, "\n") {
			for _, in := range internals {
				for _, loc := range in.re.FindAllStringIndex(line, -1) {
					if loc[0] > 0 && line[loc[0]-1] == '-' || in.source && externalIssue(line[:loc[0]]) {
						continue
					}
					{
						t.Errorf("%s:%d: %s in a user page (%q); move it to docs/development.md", p.Path, i+1, in.what, line[loc[0]:loc[1]])
					}
				}
			}
		}
	}
	if checked < 15 {
		t.Fatalf("only %d user pages found", checked)
	}
}

// externalIssue reports whether the text before an issue number ends in
// another project's name ("NVIDIA/mig-parted issue 120"); only issue
// matches can be preceded so.
func externalIssue(before string) bool {
	words := strings.Fields(before)
	return len(words) > 0 && strings.Contains(words[len(words)-1], "/") && !strings.HasPrefix(words[len(words)-1], "`")
}
