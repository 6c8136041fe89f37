package textfmt

import (
	"encoding/json"
	"testing"
)

func TestIndicesAndGPUs(t *testing.T) {
	tests := []struct {
		idx           []int
		indices, gpus string
	}{
		{nil, "", "no GPUs"},
		{[]int{3}, "3", "GPU 3"},
		{[]int{3, 3}, "3", "GPU 3"},
		{[]int{0, 1}, "0-1", "GPUs 0-1"},
		{[]int{6, 0, 2, 1, 3}, "0-3, 6", "GPUs 0-3, 6"},
		{[]int{0, 2, 4}, "0, 2, 4", "GPUs 0, 2, 4"},
		{[]int{7, 6, 5, 4, 3, 2, 1, 0}, "0-7", "GPUs 0-7"},
	}
	for _, tt := range tests {
		if got := Indices(tt.idx); got != tt.indices {
			t.Errorf("Indices(%v) = %q, want %q", tt.idx, got, tt.indices)
		}
		if got := GPUs(tt.idx); got != tt.gpus {
			t.Errorf("GPUs(%v) = %q, want %q", tt.idx, got, tt.gpus)
		}
	}
}

func TestOneLine(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{"a\nb", "a; b"},
		{"  a  \n\n\t b   c\n", "a; b c"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := OneLine(tt.in); got != tt.want {
			t.Errorf("OneLine(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestKind(t *testing.T) {
	for _, tt := range []struct {
		v    any
		want string
	}{
		{nil, "null"},
		{"x", `the string "x"`},
		{json.Number("3"), "the number 3"},
		{true, "the boolean true"},
		{[]any{1}, "a list"},
		{map[string]any{}, "a mapping"},
		{3.5, "a float64"},
	} {
		if got := Kind(tt.v); got != tt.want {
			t.Errorf("Kind(%#v) = %q, want %q", tt.v, got, tt.want)
		}
	}
}

func TestFieldAndItem(t *testing.T) {
	for _, tt := range []struct{ got, want string }{
		{Field("profiles", "p"), "profiles.p"},
		{Field("", "version"), "version"},
		{Field("profiles", ""), `profiles.""`},
		{Item(Field("profiles", "p"), 2), "profiles.p[2]"},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}
