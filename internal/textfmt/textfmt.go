package textfmt

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Indices writes indices sorted, each once, with runs as ranges: "0-3, 6".
func Indices(idx []int) string {
	s := slices.Clone(idx)
	slices.Sort(s)
	s = slices.Compact(s)
	var parts []string
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", s[i], s[j]))
		} else {
			parts = append(parts, strconv.Itoa(s[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}

// GPUs names GPUs by index for a message: "GPU 3", "GPUs 0-3, 6", or
// "no GPUs".
func GPUs(idx []int) string {
	switch len(slices.Compact(slices.Sorted(slices.Values(idx)))) {
	case 0:
		return "no GPUs"
	case 1:
		return "GPU " + strconv.Itoa(idx[0])
	}
	return "GPUs " + Indices(idx)
}

// OneLine keeps a message on one line: its lines, trimmed and without the
// empty ones, joined with "; ", and every run of white space made one
// space.
func OneLine(s string) string {
	var parts []string
	for l := range strings.SplitSeq(s, "\n") {
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, "; ")
}

// Kind describes a value decoded from YAML or JSON (with UseNumber) for a
// message: "null", `the string "x"`, "the number 3", "the boolean true",
// "a list", "a mapping".
func Kind(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return fmt.Sprintf("the string %q", x)
	case json.Number:
		return "the number " + x.String()
	case bool:
		return fmt.Sprintf("the boolean %t", x)
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	}
	return fmt.Sprintf("a %T", v)
}

// Field returns the place of key in the mapping at path, as problems name
// places in YAML files: "profiles" and "p" give "profiles.p"; an empty path
// gives the key alone, and an empty key is written "".
func Field(path, key string) string {
	if key == "" {
		key = `""`
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// Item returns the place of element i of the list at path: "rules[2]".
func Item(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }
