package archtest

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const module = "github.com/carve-dev/carve/"

// goList runs go list in the module root with args.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// carveImports maps each package of the module, without the module
// prefix, to the packages of the module it imports (not its tests).
func carveImports(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, line := range goList(t, "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module)
		if pkg == "internal/archtest" {
			continue
		}
		deps := []string{}
		for _, imp := range fields[1:] {
			if rest, ok := strings.CutPrefix(imp, module); ok {
				deps = append(deps, rest)
			}
		}
		slices.Sort(deps)
		out[pkg] = deps
	}
	return out
}

var (
	rowRE  = regexp.MustCompile("^\\| `([a-z0-9/-]+)` \\|.*\\| ([^|]+) \\|$")
	nameRE = regexp.MustCompile("`([a-z0-9/-]+)`")
)

// documentedImports reads the package table of docs/architecture.md.
func documentedImports(t *testing.T) map[string][]string {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := rowRE.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		deps := []string{}
		for _, d := range nameRE.FindAllStringSubmatch(m[2], -1) {
			deps = append(deps, d[1])
		}
		slices.Sort(deps)
		out[m[1]] = deps
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestArchitectureDocMatchesImports: every package of the module is in
// docs/architecture.md's table with exactly the packages of carve it
// imports.
func TestArchitectureDocMatchesImports(t *testing.T) {
	if diff := cmp.Diff(documentedImports(t), carveImports(t)); diff != "" {
		t.Errorf("docs/architecture.md's package table differs from the imports (-doc +code):\n%s", diff)
	}
}

// TestDataFlowsOneWay: the planner's and the resource side's packages do
// not depend on the profile format, and partition needs no cgo.
func TestDataFlowsOneWay(t *testing.T) {
	for _, pkg := range []string{"./partition/...", "./timeslice/..."} {
		if deps := goList(t, "-deps", pkg); slices.Contains(deps, module+"configs") {
			t.Errorf("%s depends on configs", pkg)
		}
	}
	if deps := goList(t, "-deps", "./partition"); slices.ContainsFunc(deps, func(d string) bool { return strings.Contains(d, "go-nvml") }) {
		t.Error("partition depends on go-nvml")
	}
}

// TestAPIDependsOnNothingOfCarve: api/v1, its tests included, depends on
// no other package of carve, so that a change to the planner's (or any
// other) Go types cannot change a public or persisted format unnoticed.
func TestAPIDependsOnNothingOfCarve(t *testing.T) {
	for _, dep := range goList(t, "-deps", "-test", "./api/...") {
		name, _, _ := strings.Cut(dep, " ")
		name = strings.TrimSuffix(name, ".test")
		if rest, ok := strings.CutPrefix(name, module); ok && !strings.HasPrefix(rest, "api/") {
			t.Errorf("api/... depends on %s", dep)
		}
	}
}

// TestAgentLinksNoClientset: carve-agent's binary links none of client-go's
// clientset, informer factory or listers, nor the DRA kubelet plugin
// library (which takes the clientset). Each of them registers every API
// group's types when the program starts, which costs the agent several MiB
// of resident memory (docs/benchmarks.md, agent memory).
func TestAgentLinksNoClientset(t *testing.T) {
	heavy := regexp.MustCompile(`^k8s\.io/client-go/(kubernetes|informers|listers)(/|$)|^k8s\.io/dynamic-resource-allocation/kubeletplugin$`)
	var linked []string
	for _, dep := range goList(t, "-deps", "./cmd/carve-agent") {
		if heavy.MatchString(dep) {
			linked = append(linked, dep)
		}
	}
	if len(linked) > 0 {
		t.Errorf("carve-agent links %d packages it must not, among them %s", len(linked), strings.Join(linked[:min(5, len(linked))], ", "))
	}
}
