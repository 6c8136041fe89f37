package yamltree

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDecode(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want any
	}{
		{"YAML 1.1 words are strings", "on: off\nyes: no\ny: n\n", map[string]any{"on": "off", "yes": "no", "y": "n"}},
		{"booleans", "a: true\nb: false\n", map[string]any{"a": true, "b": false}},
		{"numbers", "i: 0x1F\nf: 1.5\nw: 2.0\nn: -3\nmax: 9223372036854775807\nu: 1_000\n", map[string]any{
			"i": json.Number("31"), "f": json.Number("1.5"), "w": json.Number("2"), "n": json.Number("-3"),
			"max": json.Number("9223372036854775807"), "u": json.Number("1000"),
		}},
		// Tagged as a float, or quoted, a wide integer is what it says.
		{"wide integers as floats or strings", "f: !!float 99999999999999999999\ns: '99999999999999999999'\nx: \"0x10000000000000000\"\n", map[string]any{
			"f": json.Number("1e+20"), "s": "99999999999999999999", "x": "0x10000000000000000",
		}},
		{"dates and nulls", "d: 2026-01-01\nz: ~\ne:\n", map[string]any{"d": "2026-01-01", "z": nil, "e": nil}},
		{"number keys are their text", "1: a\n1g.10gb: 2\n", map[string]any{"1": "a", "1g.10gb": json.Number("2")}},
		{"aliases and merge keys", "a: &x {b: 1, c: 2}\nd: *x\ne: {<<: *x, c: 3}\n", map[string]any{
			"a": map[string]any{"b": json.Number("1"), "c": json.Number("2")},
			"d": map[string]any{"b": json.Number("1"), "c": json.Number("2")},
			"e": map[string]any{"b": json.Number("1"), "c": json.Number("3")},
		}},
		{"a trailing empty document", "a: 1\n---\n", map[string]any{"a": json.Number("1")}},
		{"lists", "- 1\n- [a, b]\n", []any{json.Number("1"), []any{"a", "b"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ps, err := Decode([]byte(tt.in))
			if err != nil || len(ps) > 0 {
				t.Fatalf("Decode: %v %v", ps, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("tree (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeProblems(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []Problem
	}{
		{"duplicate key", "a:\n  b: 1\n  b: 2\n", []Problem{{"a.b", `line 3: key "b" given twice (first on line 2)`}}},
		{"not finite", "a: [1, .inf]\nb: -.Inf\nc: .nan\n", []Problem{
			{"a[1]", "line 1: the number .inf is not a finite number"},
			{"b", "line 2: the number -.Inf is not a finite number"},
			{"c", "line 3: the number .nan is not a finite number"},
		}},
		{"integers beyond 64 bits", "big: 99999999999999999999\nneg: -9223372036854775809\nu: 18446744073709551615\nl: [1, 0x1_0000_0000_0000_0000]\no: {b: 0b11111111111111111111111111111111111111111111111111111111111111111}\n", []Problem{
			{"big", "line 1: the integer 99999999999999999999 is beyond 64 bits"},
			{"neg", "line 2: the integer -9223372036854775809 is beyond 64 bits"},
			{"u", "line 3: the integer 18446744073709551615 is beyond 64 bits"},
			{"l[1]", "line 4: the integer 0x1_0000_0000_0000_0000 is beyond 64 bits"},
			{"o.b", "line 5: the integer 0b11111111111111111111111111111111111111111111111111111111111111111 is beyond 64 bits"},
		}},
		{"list key", "a:\n  ? [x, y]\n  : 1\n", []Problem{{"a", "line 2: a list is not a valid key here; keys are strings"}}},
		{"mapping key", "? {x: 1}\n: 1\n", []Problem{{"", "line 1: a mapping is not a valid key here; keys are strings"}}},
		{"null key", "~: 1\n", []Problem{{"", "line 1: a null (empty or ~) key; keys are strings"}}},
		{"second document", "a: 1\n---\nb: 2\n", []Problem{{"line 2", "a second YAML document (after ---); the file must hold exactly one"}}},
		{"custom tag", "a: !secret x\n", []Problem{{"a", `line 1: unsupported tag !secret on "x" (write the value without it)`}}},
		{"merge of a scalar", "a: {<<: 1}\n", []Problem{{"a.<<", "line 1: a merge key (<<) takes a mapping or a list of mappings"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, got, err := Decode([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

// A syntax error's place is the line yaml reports (which may be the line
// where the construct it could not finish began).
func TestDecodeSyntaxError(t *testing.T) {
	_, ps, err := Decode([]byte("a: 1\nb: [1\n"))
	want := []Problem{{"line 1", "invalid YAML: did not find expected ',' or ']'"}}
	if diff := cmp.Diff(want, ps); err != nil || diff != "" {
		t.Errorf("problems (-want +got):\n%s (err %v)", diff, err)
	}
	_, ps, _ = Decode([]byte("a:\n  b: 1\n  c: 2\n d: [\n"))
	if len(ps) != 1 || !strings.HasPrefix(ps[0].Path, "line ") {
		t.Errorf("problems %v, want one at a line", ps)
	}
}

func TestDecodeEmpty(t *testing.T) {
	for _, in := range []string{"", "# only a comment\n", "---\n"} {
		if _, _, err := Decode([]byte(in)); !errors.Is(err, ErrEmpty) {
			t.Errorf("Decode(%q) = %v, want ErrEmpty", in, err)
		}
	}
}

// A billion-laughs document (each level an alias list of the one below)
// stops at MaxValues instead of expanding to 10^9 values; so does deep
// nesting.
func TestDecodeBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 9; i++ {
		b.WriteString("a")
		b.WriteString(string(rune('0' + i)))
		b.WriteString(": &a")
		b.WriteString(string(rune('0' + i)))
		b.WriteString(" [")
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*a")
			b.WriteString(string(rune('0' + i - 1)))
		}
		b.WriteString("]\n")
	}
	_, ps, err := Decode([]byte(b.String()))
	if err != nil || len(ps) != 1 || !strings.Contains(ps[0].Message, "more than 200000 values") {
		t.Errorf("alias bomb: problems %v, err %v; want one naming the limit", ps, err)
	}
	deep := strings.Repeat("[", 100) + strings.Repeat("]", 100) + "\n"
	_, ps, err = Decode([]byte(deep))
	if err != nil || len(ps) != 1 || !strings.Contains(ps[0].Message, "nested more than 64 levels") {
		t.Errorf("deep nesting: problems %v, err %v", ps, err)
	}
}

// TestIntegerText: the notations of an integer, as the resolver of yaml
// reads them, underscores between digits allowed; nothing else.
func TestIntegerText(t *testing.T) {
	for s, want := range map[string]bool{
		"99999999999999999999": true, "-1": true, "+1_000": true, "0x1_0000_0000_0000_0000": true, "0o17": true, "0b101": true,
		"": false, "-": false, "+-1": false, "0x": false, "0b2": false, "0o8": false, "0xg": false, "1.5": false, "1e20": false, "12a": false, "_": false,
	} {
		if got := integerText(s); got != want {
			t.Errorf("integerText(%q) = %v, want %v", s, got, want)
		}
	}
}
