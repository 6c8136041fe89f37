// Package docs checks the user documentation (README.md, docs/*.md and
// docs/internals/*.md) as a reader meets it: every relative link leads to a
// file, and to a heading of it where it names one; every YAML snippet is a
// complete file of a kind a reader can use as it is (a profile file
// carvectl validate accepts, Helm values the chart renders with, Kubernetes
// objects, a mig-parted configuration, Prometheus configuration);
// import.md's example is what carvectl import writes; every sh and bash
// snippet is bash; and every kubectl, helm and carvectl command a snippet
// runs (found by a shell parser, in pipelines, $(...) and functions too)
// names a command the tool has, with flags it has: kubectl's and helm's
// parsed by their cobra command trees, their arguments counted too,
// carvectl's checked against the built carvectl's -h.
package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/test/harness"
)

// root is the repository, from this package's directory.
const root = "../.."

// pages reads README.md, docs/*.md and docs/internals/*.md.
func pages(t *testing.T) []harness.DocPage {
	t.Helper()
	ps, err := harness.DocPages(root)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// outsideCode returns text with its fenced code blocks and inline code
// blanked, so that links are found in prose only.
func outsideCode(text string) string {
	return inlineCode.ReplaceAllString(outsideFences(text), "``")
}

// outsideFences returns text with its fenced code blocks blanked.
func outsideFences(text string) string {
	var b strings.Builder
	in := false
	for line := range strings.SplitSeq(text, "\n") {
		if harness.Fence.MatchString(line) {
			in = !in
			b.WriteString("\n")
			continue
		}
		if !in {
			b.WriteString(line)
		}
		b.WriteString("\n")
	}
	return b.String()
}

var (
	inlineCode = regexp.MustCompile("`[^`\n]*`")
	link       = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading    = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*$`)
)

// anchors returns the GitHub anchors of a Markdown page's headings.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(outsideFences(text), -1) {
		out[anchor(m[1])] = true
	}
	return out
}

// anchor is GitHub's anchor of a heading: lower case, punctuation dropped,
// spaces as dashes.
func anchor(h string) string {
	h = strings.ToLower(strings.ReplaceAll(h, "`", ""))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ' || r == '-':
			b.WriteRune('-')
		case r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestLinks: every relative link of README.md and docs/*.md leads to a
// file or directory of the repository, and where it names a heading of a
// Markdown page, that page has it.
func TestLinks(t *testing.T) {
	ps := pages(t)
	byPath := map[string]harness.DocPage{}
	for _, p := range ps {
		byPath[p.Path] = p
	}
	for _, p := range ps {
		for _, m := range link.FindAllStringSubmatch(outsideCode(p.Text), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			dest := p.Path
			if file != "" {
				dest = filepath.Join(filepath.Dir(p.Path), file)
				if _, err := os.Stat(filepath.Join(root, dest)); err != nil {
					t.Errorf("%s: link %s: no %s", p.Path, target, dest)
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			to, ok := byPath[dest]
			if !ok {
				raw, err := os.ReadFile(filepath.Join(root, dest))
				if err != nil {
					t.Fatal(err)
				}
				to = harness.DocPage{Path: dest, Text: string(raw)}
			}
			if !anchors(to.Text)[frag] {
				t.Errorf("%s: link %s: %s has no heading #%s", p.Path, target, dest, frag)
			}
		}
	}
}

// topKey is a top-level key of a YAML document.
var topKey = regexp.MustCompile(`(?m)^([A-Za-z][A-Za-z0-9]*):`)

// topKeys returns the top-level keys of a YAML snippet.
func topKeys(text string) []string {
	var keys []string
	for _, m := range topKey.FindAllStringSubmatch(text, -1) {
		keys = append(keys, m[1])
	}
	return keys
}

// isProfileFile reports whether a YAML snippet is meant as a carve profile
// file: it has a top-level key only a profile file has, and is not Helm
// values for the chart (whose profiles value holds a profile file as text).
func isProfileFile(text string, chartValues []string) bool {
	keys := topKeys(text)
	if len(keys) > 0 && !slices.ContainsFunc(keys, func(k string) bool { return !slices.Contains(chartValues, k) }) {
		return false
	}
	return slices.ContainsFunc(keys, func(k string) bool {
		return slices.Contains([]string{"profiles", "rules", "windows", "defaultProfile", "maintenance", "rollout", "drain"}, k)
	})
}

// chartValues returns the top-level values of the Helm chart.
func chartValues(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "charts", "carve", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return topKeys(string(raw))
}

// TestProfileSnippets: every YAML snippet of the documentation that is a
// carve profile file is complete, and passes carvectl validate's checks
// against every GPU model carve knows.
func TestProfileSnippets(t *testing.T) {
	geo := partition.NewGeometry(partition.Catalogue())
	values := chartValues(t)
	n := 0
	for _, p := range pages(t) {
		for _, s := range harness.Snippets(p.Text) {
			if !slices.Contains([]string{"yaml", "yml"}, s.Lang) || !isProfileFile(s.Text, values) {
				continue
			}
			n++
			where := fmt.Sprintf("%s:%d", p.Path, s.Line)
			f, err := configs.Parse([]byte(s.Text))
			if err != nil {
				t.Errorf("%s: the profile file does not parse: %v", where, err)
				continue
			}
			if _, err := f.Check(geo, nil); err != nil {
				t.Errorf("%s: carvectl validate refuses the profile file: %v", where, err)
			}
		}
	}
	if n == 0 {
		t.Error("no profile file snippet found: the extraction is broken")
	}
}

// TestSnippetExtraction: the extraction finds a snippet's language, first
// line and text, also inside a list item.
func TestSnippetExtraction(t *testing.T) {
	text := "intro\n```yaml\na: 1\n```\n- item\n\n  ```sh\n  echo hi\n  ```\n"
	got := harness.Snippets(text)
	want := []harness.Snippet{{Lang: "yaml", Line: 3, Text: "a: 1\n"}, {Lang: "sh", Line: 8, Text: "echo hi\n"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("snippets = %+v, want %+v", got, want)
	}
	if a := anchor("Uninstall, and what it leaves"); a != "uninstall-and-what-it-leaves" {
		t.Errorf("anchor = %q", a)
	}
}
