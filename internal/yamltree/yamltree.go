// Package yamltree decodes one YAML document into a generic tree
// (map[string]any, []any, string, json.Number, bool, nil) as carve's file
// formats read it, strictly and in bounded time and memory:
//
//   - YAML 1.2 scalars: on, off, yes and no are strings, as are dates;
//     only true and false are booleans;
//   - numbers become json.Number; a number that is not finite (.inf, .nan)
//     is a problem at its place, and so is an integer beyond 64 bits (one
//     that does not fit an int64, in any notation: 99999999999999999999,
//     0x1_0000_0000_0000_0000), rather than a float or a string;
//     !!float 99999999999999999999, tagged, is the float 1e+20;
//   - mapping keys are the text of scalar keys; a list or mapping as a key,
//     a null key, and a key given twice are problems at their place;
//   - one document: a second one that holds anything is a problem;
//   - anchors and aliases (and << merge keys) are expanded, up to a bound
//     on the values produced, so that a small file cannot expand to
//     gigabytes; nesting is bounded too.
//
// Every problem names its place as a dotted path ("profiles.p[0].mig")
// and, where the place is not yet known, the line.
package yamltree

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/carve-dev/carve/internal/textfmt"
)

// Limits on what one document may expand to.
const (
	// MaxValues bounds the values (scalars, lists and mappings, aliases
	// expanded) one document may produce.
	MaxValues = 200_000
	// MaxDepth bounds the nesting of lists and mappings.
	MaxDepth = 64
	// maxProblems bounds the problems one decode collects.
	maxProblems = 1000
)

// Problem is one thing wrong with the YAML, at one place.
type Problem struct {
	// Path is the place as a dotted path, "line N" for a syntax error, or
	// "" for the whole document.
	Path string
	// Message says what is wrong.
	Message string
}

// ErrEmpty is returned by Decode for a document with nothing in it.
var ErrEmpty = errors.New("the file is empty")

// Decode decodes data. It returns the tree, or the problems found; err is
// ErrEmpty for an empty document (only comments or nothing).
func Decode(data []byte) (tree any, problems []Problem, err error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil, ErrEmpty
		}
		return nil, []Problem{syntaxProblem(err)}, nil
	}
	c := &converter{}
	if emptyDocument(&doc) {
		return nil, nil, ErrEmpty
	}
	tree = c.value("", doc.Content[0], 0)
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		c.add(syntaxProblem(err))
	case !emptyDocument(&next):
		c.add(Problem{Path: fmt.Sprintf("line %d", next.Line), Message: "a second YAML document (after ---); the file must hold exactly one"})
	}
	if len(c.problems) > 0 {
		return nil, c.problems, nil
	}
	return tree, nil, nil
}

// emptyDocument reports whether a document holds nothing but a null.
func emptyDocument(doc *yaml.Node) bool {
	if len(doc.Content) == 0 {
		return true
	}
	n := doc.Content[0]
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" && n.Value == ""
}

var lineRE = regexp.MustCompile(`^line (\d+): `)

// syntaxProblem turns a yaml syntax error into a Problem at its line.
func syntaxProblem(err error) Problem {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if m := lineRE.FindStringSubmatch(msg); m != nil {
		return Problem{Path: "line " + m[1], Message: "invalid YAML: " + textfmt.OneLine(msg[len(m[0]):])}
	}
	return Problem{Message: "invalid YAML: " + textfmt.OneLine(msg)}
}

// converter turns yaml nodes into the generic tree, counting the values it
// produces.
type converter struct {
	values   int
	problems []Problem
	stopped  bool // a limit was hit: convert no more
}

func (c *converter) add(p Problem) {
	if len(c.problems) < maxProblems {
		c.problems = append(c.problems, p)
	}
}

func (c *converter) addf(path string, n *yaml.Node, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if n != nil && n.Line > 0 {
		msg = fmt.Sprintf("line %d: %s", n.Line, msg)
	}
	c.add(Problem{Path: path, Message: msg})
}

// value converts n at path.
func (c *converter) value(path string, n *yaml.Node, depth int) any {
	if c.stopped {
		return nil
	}
	if c.values++; c.values > MaxValues {
		c.stopped = true
		c.addf(path, n, "the document expands to more than %d values (aliases included); refusing to read further", MaxValues)
		return nil
	}
	if depth > MaxDepth {
		c.stopped = true
		c.addf(path, n, "nested more than %d levels deep", MaxDepth)
		return nil
	}
	switch n.Kind {
	case yaml.AliasNode:
		return c.value(path, n.Alias, depth+1)
	case yaml.SequenceNode:
		out := make([]any, len(n.Content))
		for i, item := range n.Content {
			out[i] = c.value(textfmt.Item(path, i), item, depth+1)
		}
		return out
	case yaml.MappingNode:
		return c.mapping(path, n, depth)
	case yaml.ScalarNode:
		return c.scalar(path, n)
	}
	c.addf(path, n, "unsupported YAML node")
	return nil
}

// mapping converts a mapping node: explicit keys first, then the keys of
// << merges that are not set explicitly (an earlier merge wins over a
// later one, as YAML's merge key says).
func (c *converter) mapping(path string, n *yaml.Node, depth int) any {
	out := make(map[string]any, len(n.Content)/2)
	lines := make(map[string]int, len(n.Content)/2)
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		key, ok := c.key(path, k)
		if !ok {
			continue
		}
		p := textfmt.Field(path, key)
		if first, dup := lines[key]; dup {
			c.addf(p, k, "key %q given twice (first on line %d)", key, first)
			continue
		}
		lines[key] = k.Line
		out[key] = c.value(p, v, depth+1)
	}
	for _, m := range merges {
		c.merge(path, out, m, depth)
	}
	return out
}

// merge adds to out the keys of the mapping (or list of mappings) a <<
// key names that out does not have yet.
func (c *converter) merge(path string, out map[string]any, v *yaml.Node, depth int) {
	for v.Kind == yaml.AliasNode {
		v = v.Alias
	}
	sources := []*yaml.Node{v}
	if v.Kind == yaml.SequenceNode {
		sources = v.Content
	}
	for _, s := range sources {
		got, ok := c.value(textfmt.Field(path, "<<"), s, depth+1).(map[string]any)
		if !ok {
			if !c.stopped {
				c.addf(textfmt.Field(path, "<<"), s, "a merge key (<<) takes a mapping or a list of mappings")
			}
			return
		}
		for k, x := range got {
			if _, set := out[k]; !set {
				out[k] = x
			}
		}
	}
}

// key returns the text of a mapping key; lists, mappings and nulls are not
// keys here.
func (c *converter) key(path string, k *yaml.Node) (string, bool) {
	for k.Kind == yaml.AliasNode {
		k = k.Alias
	}
	switch {
	case k.Kind == yaml.SequenceNode:
		c.addf(path, k, "a list is not a valid key here; keys are strings")
		return "", false
	case k.Kind == yaml.MappingNode:
		c.addf(path, k, "a mapping is not a valid key here; keys are strings")
		return "", false
	case k.Kind != yaml.ScalarNode:
		c.addf(path, k, "unsupported key")
		return "", false
	case k.ShortTag() == "!!null":
		c.addf(path, k, "a null (empty or ~) key; keys are strings")
		return "", false
	}
	return k.Value, true
}

// scalar converts a scalar by its resolved tag.
func (c *converter) scalar(path string, n *yaml.Node) any {
	switch tag := n.ShortTag(); tag {
	case "!!str", "!!timestamp", "!!binary":
		if wideInteger(n) {
			c.addf(path, n, "the integer %s is beyond 64 bits", n.Value)
			return nil
		}
		return n.Value
	case "!!null":
		return nil
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			c.addf(path, n, "%q is not a boolean", n.Value)
			return nil
		}
		return b
	case "!!int":
		var i int64
		if err := n.Decode(&i); err != nil {
			c.addf(path, n, "the integer %s is beyond 64 bits", n.Value)
			return nil
		}
		return json.Number(strconv.FormatInt(i, 10))
	case "!!float":
		if wideInteger(n) {
			c.addf(path, n, "the integer %s is beyond 64 bits", n.Value)
			return nil
		}
		var f float64
		if err := n.Decode(&f); err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			c.addf(path, n, "the number %s is not a finite number", n.Value)
			return nil
		}
		return json.Number(strconv.FormatFloat(f, 'g', -1, 64))
	default:
		c.addf(path, n, "unsupported tag %s on %q (write the value without it)", tag, n.Value)
		return nil
	}
}

// wideInteger reports whether n is written as an integer, plain and
// untagged, that yaml resolved as a float (a decimal beyond 64 bits) or a
// string (0x, 0o or 0b beyond 64 bits): an integer too wide for an int64.
func wideInteger(n *yaml.Node) bool {
	if n.Style != 0 {
		return false // quoted, a block scalar, or tagged
	}
	return integerText(n.Value)
}

// integerText reports whether s is an integer in one of the notations
// yaml reads as one when it fits 64 bits: an optional sign, then decimal
// digits, or 0b, 0o or 0x and digits of that base; underscores may stand
// between the digits. It reads s byte by byte and allocates nothing (it
// runs on every plain scalar of a file).
func integerText(s string) bool {
	if len(s) > 0 && (s[0] == '-' || s[0] == '+') {
		s = s[1:]
	}
	digit := func(c byte) bool { return c >= '0' && c <= '9' }
	if len(s) > 2 && s[0] == '0' {
		switch s[1] {
		case 'b':
			digit, s = func(c byte) bool { return c == '0' || c == '1' }, s[2:]
		case 'o':
			digit, s = func(c byte) bool { return c >= '0' && c <= '7' }, s[2:]
		case 'x':
			digit, s = func(c byte) bool {
				return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
			}, s[2:]
		}
	}
	seen := false
	for i := range len(s) {
		switch c := s[i]; {
		case c == '_':
		case digit(c):
			seen = true
		default:
			return false
		}
	}
	return seen
}
