package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Snippet is one fenced code block of a Markdown page.
type Snippet struct {
	// Lang is the fence's language ("yaml", "sh"), "" when it names none.
	Lang string
	// Line is the page's line number of the block's first line of content.
	Line int
	// Text is the block's content, its lines' common list indentation cut.
	Text string
}

// Fence matches a line that opens or closes a fenced code block; its
// group is the language.
var Fence = regexp.MustCompile("^\\s*```\\s*([A-Za-z0-9_-]*)")

// Snippets returns the fenced code blocks of a Markdown page, in order.
func Snippets(text string) []Snippet {
	lines := strings.Split(text, "\n")
	var out []Snippet
	var cur *Snippet
	var body []string
	indent := ""
	for i, line := range lines {
		m := Fence.FindStringSubmatch(line)
		switch {
		case m != nil && cur == nil:
			cur, body = &Snippet{Lang: m[1], Line: i + 2}, nil
			// A block inside a list item is indented with it.
			indent = line[:len(line)-len(strings.TrimLeft(line, " "))]
		case m != nil:
			cur.Text = strings.Join(body, "\n") + "\n"
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			body = append(body, strings.TrimPrefix(line, indent))
		}
	}
	return out
}

// DocPage is one Markdown page of the user documentation.
type DocPage struct {
	// Path is the page's path relative to the repository root.
	Path string
	// Text is the page.
	Text string
}

// DocPages reads the documentation of the repository at root: README.md,
// docs/*.md and docs/internals/*.md, in that order.
func DocPages(root string) ([]DocPage, error) {
	paths := []string{filepath.Join(root, "README.md")}
	for _, pattern := range []string{"docs/*.md", "docs/internals/*.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			return nil, fmt.Errorf("docs %s: %w", pattern, err)
		}
		paths = append(paths, m...)
	}
	out := make([]DocPage, 0, len(paths))
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return nil, fmt.Errorf("docs: %w", err)
		}
		out = append(out, DocPage{Path: rel, Text: string(raw)})
	}
	return out, nil
}
