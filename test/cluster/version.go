package cluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// DefaultKubernetesVersion is the Kubernetes release the cluster runs unless
// VersionEnv names another. It must match the k8s.io/kubernetes requirement
// and the staging replace directives in test/go.mod (and client-go in the
// main module): this release is built from the test module itself.
const DefaultKubernetesVersion = "v1.37.2"

// VersionEnv is the environment variable that runs the cluster (and so the
// end-to-end suite and the demo) on another Kubernetes release, e.g.
// CARVE_KUBERNETES_VERSION=v1.34.4. That release is built once from its own
// k8s.io/kubernetes module in a module generated under the cache directory.
const VersionEnv = "CARVE_KUBERNETES_VERSION"

// versionPattern is what a Kubernetes release looks like: v1.MINOR.PATCH.
var versionPattern = regexp.MustCompile(`^v1\.(\d+)\.(\d+)$`)

// KubernetesVersion returns the release the cluster runs: $VersionEnv when
// set, else DefaultKubernetesVersion. Start refuses a value that is not a
// release (see CheckVersion).
func KubernetesVersion() string {
	if v := strings.TrimSpace(os.Getenv(VersionEnv)); v != "" {
		return v
	}
	return DefaultKubernetesVersion
}

// CheckVersion reports whether v names a Kubernetes release the cluster
// can be built from: v1.MINOR.PATCH, with MINOR at least 34 (the oldest
// release the suite is known to run on; older kubelets lack settings the
// cluster uses).
func CheckVersion(v string) error {
	m := versionPattern.FindStringSubmatch(v)
	if m == nil {
		return fmt.Errorf("%s=%q is not a Kubernetes release such as %s", VersionEnv, v, DefaultKubernetesVersion)
	}
	var minor int
	if _, err := fmt.Sscan(m[1], &minor); err != nil || minor < 34 {
		return fmt.Errorf("%s=%s: the local cluster needs Kubernetes v1.34 or later", VersionEnv, v)
	}
	return nil
}

// stagingVersion is the version of the staging modules (k8s.io/api,
// k8s.io/client-go, ...) published with release v: v1.X.Y gives v0.X.Y.
func stagingVersion(v string) string {
	return "v0" + strings.TrimPrefix(v, "v1")
}

// buildModule is the module a Kubernetes release is built in.
type buildModule struct {
	dir      string // the module's directory
	kubeMain string // the import path of the components' multi-call main package
}

// moduleFor returns the module to build version from: the test module at
// srcDir for DefaultKubernetesVersion, else a module made for version under
// dir (see writeBuildModule), with kubectl as its tool or, unless kubectl,
// a copy of the multi-call main package.
func moduleFor(ctx context.Context, goTool, srcDir, dir, version string, kubectl bool) (buildModule, error) {
	if version == DefaultKubernetesVersion {
		return buildModule{dir: srcDir, kubeMain: kubeMainPackage}, nil
	}
	if err := writeBuildModule(ctx, goTool, dir, version, kubectl); err != nil {
		return buildModule{}, fmt.Errorf("prepare a module to build Kubernetes %s: %w", version, err)
	}
	return buildModule{dir: dir, kubeMain: generatedModule + "/" + kubeMainDir}, nil
}

// generatedModule is the module path of a module generated to build a
// Kubernetes release other than DefaultKubernetesVersion.
const generatedModule = "carve.dev/kubernetes-build"

// writeBuildModule writes, into dir, a module that requires
// k8s.io/kubernetes at version, pins each of its staging modules to the
// matching published release (the replace directives of its own go.mod
// point into its source tree, which do not apply to a module that depends
// on it) and keeps its godebug defaults; it lists kubectl as a tool when
// kubectl is set, else holds the multi-call main package. It is then
// resolved with go mod tidy.
func writeBuildModule(ctx context.Context, goTool, dir, version string, kubectl bool) error {
	upstream, err := downloadGoMod(ctx, goTool, "k8s.io/kubernetes@"+version)
	if err != nil {
		return err
	}
	var tools []string
	files := map[string][]byte{} // and go.mod, below
	if kubectl {
		tools = []string{"k8s.io/kubernetes/cmd/" + kubectlBinary}
	} else {
		files[filepath.Join(kubeMainDir, "main.go")] = kubeMainSource
	}
	if files["go.mod"], err = buildGoMod(upstream, version, tools); err != nil {
		return err
	}
	return writeGeneratedModule(ctx, goTool, dir, files)
}

// writeGeneratedModule makes dir a module of the files (relative path ->
// content, go.mod among them) and no other file of its own (an old go.sum
// is removed), resolved with go mod tidy.
func writeGeneratedModule(ctx context.Context, goTool, dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	for _, stale := range []string{"go.mod", "go.sum"} {
		if err := os.Remove(filepath.Join(dir, stale)); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("remove the old %s: %w", stale, err)
		}
	}
	for name, data := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	tidy := exec.CommandContext(ctx, goTool, "mod", "tidy")
	tidy.Dir = dir
	tidy.Env = goBuildEnv()
	if out, err := tidy.CombinedOutput(); err != nil {
		return fmt.Errorf("go mod tidy in %s: %w\n%s", dir, err, lastLines(string(out), 20))
	}
	return nil
}

// downloadGoMod fetches module@version through the module proxy and returns
// its go.mod.
func downloadGoMod(ctx context.Context, goTool, module string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, goTool, "mod", "download", "-json", module)
	cmd.Dir = os.TempDir() // outside any module
	cmd.Env = append(goBuildEnv(), "GO111MODULE=on", "GOFLAGS=")
	out, err := cmd.Output()
	var info struct {
		GoMod string
		Error string
	}
	if jerr := json.Unmarshal(out, &info); jerr == nil && info.Error != "" {
		return nil, fmt.Errorf("download %s: %s", module, info.Error)
	}
	if err != nil {
		return nil, fmt.Errorf("download %s: %w", module, err)
	}
	data, err := os.ReadFile(info.GoMod)
	if err != nil {
		return nil, fmt.Errorf("read the go.mod of %s: %w", module, err)
	}
	return data, nil
}

// buildGoMod is the go.mod of the module that builds release version, from
// k8s.io/kubernetes's own go.mod (upstream), listing tools (main packages)
// as tools.
func buildGoMod(upstream []byte, version string, tools []string) ([]byte, error) {
	var goLine, godebug string
	var staging []string
	sc := bufio.NewScanner(bytes.NewReader(upstream))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "go "):
			goLine = line
		case strings.HasPrefix(line, "godebug "):
			godebug = line
		default:
			if mod, target, ok := strings.Cut(line, "=>"); ok && strings.HasPrefix(strings.TrimSpace(target), "./staging/") {
				staging = append(staging, strings.TrimSpace(strings.TrimPrefix(mod, "replace")))
			}
		}
	}
	if goLine == "" || len(staging) == 0 {
		return nil, fmt.Errorf("the go.mod of k8s.io/kubernetes %s has no go directive or no staging modules", version)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "// Generated by carve's test/cluster to build Kubernetes %s.\nmodule %s\n\n%s\n", version, generatedModule, goLine)
	if godebug != "" {
		fmt.Fprintf(&b, "\n%s\n", godebug)
	}
	if len(tools) > 0 {
		fmt.Fprintf(&b, "\ntool (\n\t%s\n)\n", strings.Join(tools, "\n\t"))
	}
	fmt.Fprintf(&b, "\nrequire k8s.io/kubernetes %s\n\nreplace (\n", version)
	for _, m := range staging {
		fmt.Fprintf(&b, "\t%s => %s %s\n", m, m, stagingVersion(version))
	}
	b.WriteString(")\n")
	return []byte(b.String()), nil
}
