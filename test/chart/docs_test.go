package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	sigsyaml "sigs.k8s.io/yaml"
)

// helmDoc is the chart's documentation, whose values table lists every value.
const helmDoc = "../../docs/helm.md"

// kubernetesTyped are values whose schema follows a Kubernetes type; they
// are documented as one value, not field by field.
func kubernetesTyped() []string {
	return []string{"resources", "affinity", "updateStrategy"}
}

// schemaNode is the part of values.schema.json the walk reads.
type schemaNode struct {
	Ref        string                `json:"$ref"`
	Properties map[string]schemaNode `json:"properties"`
}

// valuePaths returns the dotted paths of the values the schema defines,
// down to the leaves (or a kubernetesTyped value), resolving
// #/definitions references.
func valuePaths(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var root struct {
		schemaNode
		Definitions map[string]schemaNode `json:"definitions"`
	}
	if err := json.Unmarshal(raw, &root); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	var paths []string
	var walk func(prefix string, n schemaNode)
	walk = func(prefix string, n schemaNode) {
		if ref, ok := strings.CutPrefix(n.Ref, "#/definitions/"); ok {
			n = root.Definitions[ref]
		}
		if len(n.Properties) == 0 || slices.Contains(kubernetesTyped(), prefix) {
			paths = append(paths, prefix)
			return
		}
		for name, child := range n.Properties {
			walk(strings.TrimPrefix(prefix+"."+name, "."), child)
		}
	}
	walk("", root.schemaNode)
	slices.Sort(paths)
	return paths
}

// TestEveryValueDocumented: the values the schema defines are exactly the
// rows of docs/helm.md's values table, and each has a default in
// values.yaml (where its comment is).
func TestEveryValueDocumented(t *testing.T) {
	want := valuePaths(t)
	doc, err := os.ReadFile(helmDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "\n## Values\n")
	if !ok {
		t.Fatalf("%s has no section ## Values", helmDoc)
	}
	table, _, _ = strings.Cut(table, "\n## ")
	var got []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([^`]+)` \\|").FindAllStringSubmatch(table, -1) {
		got = append(got, m[1])
	}
	slices.Sort(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("values of values.schema.json (-) and rows of %s's values table (+) differ:\n%s", helmDoc, diff)
	}

	raw, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var defaults map[string]any
	if err := sigsyaml.Unmarshal(raw, &defaults); err != nil {
		t.Fatal(err)
	}
	for _, p := range want {
		if !hasPath(defaults, strings.Split(p, ".")) {
			t.Errorf("values.yaml has no default for %s", p)
		}
	}
}

// hasPath reports whether the nested maps of m have the path.
func hasPath(m map[string]any, path []string) bool {
	v, ok := m[path[0]]
	if !ok || len(path) == 1 {
		return ok
	}
	sub, isMap := v.(map[string]any)
	return isMap && hasPath(sub, path[1:])
}
