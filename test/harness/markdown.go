package harness

import (
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
