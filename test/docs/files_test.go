package docs

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/carve-dev/carve/configs/nvimport"
	"github.com/carve-dev/carve/test/chartrender"
	"github.com/carve-dev/carve/test/harness"
)

// Kinds of YAML snippet the documentation shows, each a complete file.
const (
	kindProfiles   = "carve profile file"
	kindValues     = "Helm values file for charts/carve"
	kindObjects    = "Kubernetes objects"
	kindMigParted  = "mig-parted configuration"
	kindPrometheus = "Prometheus configuration"
)

// yamlKind says which complete file a YAML snippet is, "" when it is none
// the docs test knows (a fragment).
func yamlKind(text string, values []string) string {
	if strings.HasPrefix(text, "scrape_configs:\n") {
		return kindPrometheus
	}
	keys := topKeys(text)
	switch {
	case len(keys) == 0:
		return ""
	case isProfileFile(text, values):
		return kindProfiles
	case !slices.ContainsFunc(keys, func(k string) bool { return !slices.Contains(values, k) }):
		return kindValues
	case slices.Contains(keys, "apiVersion") && slices.Contains(keys, "kind"):
		return kindObjects
	case strings.Contains(text, "\nmig-configs:"):
		return kindMigParted
	}
	return ""
}

// yamlSnippet is a YAML snippet with its place and kind.
type yamlSnippet struct {
	where, kind, text string
}

// yamlSnippets returns every YAML snippet of the documentation.
func yamlSnippets(t *testing.T) []yamlSnippet {
	t.Helper()
	values := chartValues(t)
	var out []yamlSnippet
	for _, p := range pages(t) {
		for _, s := range harness.Snippets(p.Text) {
			if slices.Contains([]string{"yaml", "yml"}, s.Lang) {
				out = append(out, yamlSnippet{where: fmt.Sprintf("%s:%d", p.Path, s.Line), kind: yamlKind(s.Text, values), text: s.Text})
			}
		}
	}
	return out
}

// TestYAMLSnippetsAreFiles: every YAML snippet of the documentation is
// valid YAML and a complete file of a kind a reader can use as it is: a
// profile file, Helm values, Kubernetes objects, a mig-parted
// configuration, or Prometheus configuration; no fragment.
func TestYAMLSnippetsAreFiles(t *testing.T) {
	counts := map[string]int{}
	for _, s := range yamlSnippets(t) {
		counts[s.kind]++
		if s.kind == "" {
			t.Errorf("%s: a YAML snippet that is no complete file (profiles, Helm values, Kubernetes objects, mig-parted or Prometheus configuration)", s.where)
			continue
		}
		for i, doc := range strings.Split(s.text, "\n---\n") {
			var v any
			if err := sigsyaml.Unmarshal([]byte(doc), &v); err != nil {
				t.Errorf("%s: document %d is not valid YAML: %v", s.where, i+1, err)
			}
		}
	}
	for _, k := range []string{kindProfiles, kindValues, kindObjects, kindMigParted} {
		if counts[k] == 0 {
			t.Errorf("no %s snippet found: the classification is broken", k)
		}
	}
}

// TestValuesSnippets: every Helm values snippet renders the chart, the
// chart's values schema included, as `helm template` with that values
// file would.
func TestValuesSnippets(t *testing.T) {
	ch, err := loader.Load(root + "/charts/carve")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range yamlSnippets(t) {
		if s.kind != kindValues {
			continue
		}
		var vals map[string]any
		if err := sigsyaml.Unmarshal([]byte(s.text), &vals); err != nil {
			t.Errorf("%s: %v", s.where, err)
			continue
		}
		// The monitoring objects need the Prometheus Operator's API.
		release := chartrender.Release{Name: "carve", Namespace: "carve-system", KubeVersion: "1.37.2", APIVersions: []string{"monitoring.coreos.com/v1"}}
		if _, err := chartrender.Render(ch, vals, release); err != nil {
			t.Errorf("%s: helm template with these values: %v", s.where, err)
		}
	}
}

// TestObjectSnippets: every Kubernetes object snippet decodes, each object
// with an apiVersion, a kind and a name (or a kustomization).
func TestObjectSnippets(t *testing.T) {
	for _, s := range yamlSnippets(t) {
		if s.kind != kindObjects {
			continue
		}
		objs, err := harness.DecodeObjects([]byte(s.text))
		if err != nil {
			t.Errorf("%s: %v", s.where, err)
			continue
		}
		for _, o := range objs {
			if o.GetKind() == "Kustomization" {
				continue
			}
			if o.GetAPIVersion() == "" || o.GetName() == "" {
				t.Errorf("%s: %s without apiVersion or name", s.where, o.GetKind())
			}
		}
	}
}

// TestImportExample: import.md's example is what `carvectl import
// mig-parted` makes of its inputs: the mig-parted configuration and the
// device plugin ConfigMap shown give exactly the profile file shown.
func TestImportExample(t *testing.T) {
	var mig, dp, out string
	for _, s := range yamlSnippets(t) {
		if !strings.HasPrefix(s.where, "docs/import.md:") {
			continue
		}
		switch {
		case s.kind == kindMigParted && mig == "":
			mig = s.text
		case s.kind == kindObjects && strings.Contains(s.text, "name: time-slicing-config") && dp == "":
			dp = s.text
		case strings.HasPrefix(s.text, "# carve profiles imported by") && out == "":
			out = s.text
		}
	}
	if mig == "" || dp == "" || out == "" {
		t.Fatalf("docs/import.md: example not found (config.yaml %v, time-slicing.yaml %v, stdout %v)", mig != "", dp != "", out != "")
	}
	res, err := nvimport.MigParted(nvimport.File{Name: "config.yaml", Data: []byte(mig)}, nvimport.Options{
		DevicePlugin:        []nvimport.File{{Name: "time-slicing.yaml", Data: []byte(dp)}},
		DefaultDevicePlugin: "default",
	})
	if err != nil {
		t.Fatalf("import: %v", err)
	}
	if diff := cmp.Diff(out, string(res.YAML)); diff != "" {
		t.Errorf("docs/import.md: the stdout shown differs from what carvectl import writes (-shown +written):\n%s", diff)
	}
}
