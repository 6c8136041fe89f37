package cluster

import (
	"bufio"
	"context"
	_ "embed" // kubeMainSource
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// testModule is the module path of carve's test module, whose go.mod pins
// k8s.io/kubernetes (and its staging modules) and lists kubectl as a tool.
const testModule = "github.com/carve-dev/carve/test"

// buildRecipe changes whenever the way the binaries are built changes, so
// that caches made by an older recipe are rebuilt.
const buildRecipe = "5"

// Component names, also the names of their binaries and log files.
const (
	compEtcd       = "etcd"
	compContainerd = "containerd"
	compAPIServer  = "kube-apiserver"
	compCM         = "kube-controller-manager"
	compScheduler  = "kube-scheduler"
	compKubelet    = "kubelet"
)

// kubeBinary is the multi-call binary that holds the Kubernetes components
// (see cmd/kube); each component's name is a symbolic link to it.
const kubeBinary = "kube"

// kubeMainPackage is the multi-call binary's main package in the test
// module; a module generated for another release holds a copy of it as
// kubeMainDir (see writeBuildModule).
const (
	kubeMainPackage = testModule + "/cluster/cmd/kube"
	kubeMainDir     = "kube"
)

// kubeBuildTag is the build tag without which the multi-call binary's
// package has no files, so that ./... leaves Kubernetes out.
const kubeBuildTag = "carve_kube"

// kubeMainSource is the multi-call binary's source, copied into the module
// generated for a release other than DefaultKubernetesVersion.
//
//go:embed cmd/kube/main.go
var kubeMainSource []byte

// kubectlBinary is the name of the kubectl binary, built apart from the
// components and only when a caller asks for it (EnsureKubectl).
const kubectlBinary = "kubectl"

// kubeComponents are the Kubernetes components the cluster runs, the
// names the multi-call binary answers to.
func kubeComponents() []string {
	return []string{compAPIServer, compCM, compScheduler, compKubelet}
}

// Binaries are the paths of the Kubernetes components: links, in Dir, to
// one multi-call binary.
type Binaries struct {
	Dir               string
	KubeAPIServer     string
	KubeControllerMgr string
	KubeScheduler     string
	Kubelet           string
}

// DefaultCacheDir is where built binaries and the test image are kept:
// $CARVE_CLUSTER_CACHE, else $XDG_CACHE_HOME/carve-cluster, else
// ~/.cache/carve-cluster.
func DefaultCacheDir() (string, error) {
	if d := os.Getenv("CARVE_CLUSTER_CACHE"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("find a cache directory (set CARVE_CLUSTER_CACHE): %w", err)
	}
	return filepath.Join(d, "carve-cluster"), nil
}

// EnsureBinaries returns the Kubernetes components of KubernetesVersion(),
// building them first unless cacheDir already holds them. srcDir is the
// test module's directory; when empty it is searched for (see
// FindSourceDir). The build takes several minutes on a small machine and is
// done once per version; concurrent callers wait for one build.
func EnsureBinaries(ctx context.Context, log io.Writer, cacheDir, srcDir string) (Binaries, error) {
	version := KubernetesVersion()
	if err := CheckVersion(version); err != nil {
		return Binaries{}, err
	}
	dir := filepath.Join(cacheDir, version)
	binDir := filepath.Join(dir, "bin")
	bins := Binaries{
		Dir:               binDir,
		KubeAPIServer:     filepath.Join(binDir, compAPIServer),
		KubeControllerMgr: filepath.Join(binDir, compCM),
		KubeScheduler:     filepath.Join(binDir, compScheduler),
		Kubelet:           filepath.Join(binDir, compKubelet),
	}
	err := ensureBuilt(ctx, log, cachedBuild{
		what:  "Kubernetes " + version + " components",
		dir:   dir,
		stamp: buildStamp(version),
		bins:  append([]string{kubeBinary}, kubeComponents()...),
		build: func(ctx context.Context, outDir string) error {
			return buildKubernetesRelease(ctx, log, srcDir, filepath.Join(dir, "src"), outDir, version, false)
		},
	})
	return bins, err
}

// EnsureKubectl returns the path of kubectl of KubernetesVersion(),
// building it first (a few minutes more than the components) unless
// cacheDir already holds it. The cluster itself does not need it, so
// neither the demo nor Start builds it.
func EnsureKubectl(ctx context.Context, log io.Writer, cacheDir, srcDir string) (string, error) {
	version := KubernetesVersion()
	if err := CheckVersion(version); err != nil {
		return "", err
	}
	dir := filepath.Join(cacheDir, version, kubectlBinary)
	err := ensureBuilt(ctx, log, cachedBuild{
		what:  "kubectl " + version,
		dir:   dir,
		stamp: buildStamp(version),
		bins:  []string{kubectlBinary},
		build: func(ctx context.Context, outDir string) error {
			return buildKubernetesRelease(ctx, log, srcDir, filepath.Join(dir, "src"), outDir, version, true)
		},
	})
	return filepath.Join(dir, "bin", kubectlBinary), err
}

// cachedBuild is a set of programs built once into a cache directory.
type cachedBuild struct {
	what  string   // what is built, for the log
	dir   string   // holds bin/ (the programs and their stamp) and build.lock
	stamp string   // the recipe: programs built by another are rebuilt
	bins  []string // the programs' names in bin/
	// build builds every program into outDir, an empty directory.
	build func(ctx context.Context, outDir string) error
}

// ensureBuilt returns once b.dir/bin holds b's programs built by b.stamp,
// building them first when they are missing or stale (or
// CARVE_CLUSTER_REBUILD is set). One build at a time per directory: a
// concurrent caller waits on b.dir/build.lock and then finds the result.
func ensureBuilt(ctx context.Context, log io.Writer, b cachedBuild) error {
	binDir := filepath.Join(b.dir, "bin")
	stampPath := filepath.Join(binDir, ".stamp")
	current := func() bool {
		return binariesCurrent(binDir, stampPath, b.stamp, b.bins) && os.Getenv("CARVE_CLUSTER_REBUILD") == ""
	}
	if current() {
		return nil
	}
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return fmt.Errorf("create the binary cache of %s: %w", b.what, err)
	}
	lock, _, err := acquireLock(ctx, filepath.Join(b.dir, "build.lock"), func(format string, args ...any) {
		fmt.Fprintf(log, format+"\n", args...)
	})
	if err != nil {
		return fmt.Errorf("lock the binary cache of %s: %w", b.what, err)
	}
	defer func() {
		if err := lock.release(); err != nil {
			fmt.Fprintf(log, "%v\n", err)
		}
	}()
	if current() {
		return nil
	}
	tmp, err := os.MkdirTemp(b.dir, "build-")
	if err != nil {
		return fmt.Errorf("create a build directory for %s: %w", b.what, err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	start := time.Now()
	if err := b.build(ctx, tmp); err != nil {
		return err
	}
	// No stamp while old and new programs are mixed.
	if err := os.Remove(stampPath); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("remove the old build stamp of %s: %w", b.what, err)
	}
	for _, name := range b.bins {
		if err := os.Rename(filepath.Join(tmp, name), filepath.Join(binDir, name)); err != nil {
			return fmt.Errorf("install %s into the cache: %w", name, err)
		}
	}
	if err := os.WriteFile(stampPath, []byte(b.stamp), 0o644); err != nil {
		return fmt.Errorf("write the build stamp of %s: %w", b.what, err)
	}
	fmt.Fprintf(log, "built %s in %s into %s\n", b.what, time.Since(start).Round(time.Second), binDir)
	return nil
}

// buildKubernetesRelease builds the Kubernetes components of version
// (kubectl instead when kubectl is set) into outDir: from the test module
// at srcDir (found when empty) for DefaultKubernetesVersion, else from a
// module generated in genDir.
func buildKubernetesRelease(ctx context.Context, log io.Writer, srcDir, genDir, outDir, version string, kubectl bool) error {
	goTool, err := findGo()
	if err != nil {
		return err
	}
	if srcDir == "" && version == DefaultKubernetesVersion {
		if srcDir, err = FindSourceDir(); err != nil {
			return err
		}
	}
	mod, err := moduleFor(ctx, goTool, srcDir, genDir, version, kubectl)
	if err != nil {
		return err
	}
	b := goBuild{what: "Kubernetes " + version, dir: mod.dir, ldflags: buildLDFlags(version)}
	if kubectl {
		b.what = "kubectl " + version
		b.mains = map[string]string{"k8s.io/kubernetes/cmd/kubectl": kubectlBinary}
		fmt.Fprintf(log, "building kubectl %s in %s; the first build takes a few minutes\n", version, mod.dir)
		return runGoBuild(ctx, log, goTool, b, outDir, buildHeartbeat)
	}
	b.mains = map[string]string{mod.kubeMain: kubeBinary}
	b.tags = kubeBuildTag
	fmt.Fprintf(log, "building Kubernetes %s (%s, one binary) in %s; the first build takes several minutes\n",
		version, strings.Join(kubeComponents(), ", "), mod.dir)
	return buildKubernetes(ctx, log, goTool, b, outDir, buildHeartbeat)
}

// buildKubernetes builds the multi-call binary of the components into
// outDir with one `go build -v` (see runGoBuild), reporting progress to log,
// and links each component's name to it.
func buildKubernetes(ctx context.Context, log io.Writer, goTool string, b goBuild, outDir string, interval time.Duration) error {
	if err := runGoBuild(ctx, log, goTool, b, outDir, interval); err != nil {
		return err
	}
	for _, name := range kubeComponents() {
		if err := os.Symlink(kubeBinary, filepath.Join(outDir, name)); err != nil {
			return fmt.Errorf("link %s to the multi-call binary %s: %w", name, kubeBinary, err)
		}
	}
	return nil
}

// BuildFlags are the go build flags of every program built for the local
// cluster and the demo: Kubernetes, containerd and kubectl here, and
// carve-agent and the test module's programs (the Makefile's
// CLUSTER_GOFLAGS, which a test keeps equal). Built with the same flags
// (and module versions), the packages they share are compiled once into
// Go's build cache. -trimpath keeps paths out of the binaries; without
// DWARF, which the stripped binaries (-ldflags -w) drop anyway, the
// compiler takes about a third less time.
func BuildFlags() []string {
	return []string{"-trimpath", "-gcflags=all=-dwarf=false"}
}

// goBuild is one `go build` of main packages.
type goBuild struct {
	what    string            // what is built, for the log: "Kubernetes v1.37.2"
	dir     string            // the module directory to build in
	mains   map[string]string // main package import path -> binary name
	tags    string            // build tags, space-separated; may be empty
	ldflags string
}

// args returns the go command's arguments for the subcommand cmd (build or
// list), before the packages.
func (b goBuild) args(cmd string) []string {
	args := []string{cmd}
	if cmd == "build" {
		args = append(args, "-v")
		args = append(args, BuildFlags()...)
		args = append(args, "-ldflags="+b.ldflags)
	} else {
		args = append(args, "-deps")
	}
	if b.tags != "" {
		args = append(args, "-tags="+b.tags)
	}
	return args
}

// runGoBuild builds b's binaries into outDir with one `go build -v`,
// reporting progress to log: a line as each binary's main package is
// reached, and a heartbeat every interval with the packages compiled so far
// (of how many, counted by a `go list -deps` alongside).
func runGoBuild(ctx context.Context, log io.Writer, goTool string, b goBuild, outDir string, interval time.Duration) error {
	var pkgs []string
	for pkg := range b.mains {
		pkgs = append(pkgs, pkg)
	}
	slices.Sort(pkgs)
	progress := newBuildProgress(log, time.Now, b.what, b.mains)

	// The total is only for the heartbeat: a failure leaves it unknown.
	listCtx, cancelList := context.WithCancel(ctx)
	listDone := make(chan struct{})
	go func() {
		defer close(listDone)
		list := exec.CommandContext(listCtx, goTool, append(b.args("list"), pkgs...)...)
		list.Dir = b.dir
		list.Env = goBuildEnv()
		if out, err := list.Output(); err == nil {
			progress.setTotal(countPackages(string(out)))
		}
	}()
	defer func() {
		cancelList()
		<-listDone
	}()

	args := append(b.args("build"), "-o", outDir+string(filepath.Separator))
	cmd := exec.CommandContext(ctx, goTool, append(args, pkgs...)...)
	cmd.Dir = b.dir
	cmd.Env = goBuildEnv()
	cmd.Stdout = progress
	cmd.Stderr = progress
	err := progress.run(cmd, interval)
	if err != nil {
		return fmt.Errorf("build %s: %w\n%s", b.what, err, lastLines(progress.output(), 40))
	}
	if compiled, _ := progress.counts(); compiled > 0 {
		fmt.Fprintf(log, "  compiled %d packages\n", compiled)
	}
	return nil
}

// goBuildEnv is the environment of the go commands run here: this
// process's, with CGO_CFLAGS defaulting to defaultCgoCFlags as in the
// Makefile, so that a build run by make and one run directly share the
// build cache.
func goBuildEnv() []string {
	env := os.Environ()
	if os.Getenv("CGO_CFLAGS") == "" { // the go command's test for its default
		env = append(env, "CGO_CFLAGS="+defaultCgoCFlags)
	}
	return env
}

// defaultCgoCFlags are the C compiler flags for cgo that carve's builds use
// (see the Makefile) when CGO_CFLAGS is not set: cgo's defaults (-O2 -g) without warnings
// about deprecated declarations, of which go-nvml's header has many.
const defaultCgoCFlags = "-O2 -g -Wno-deprecated-declarations"

// buildStamp identifies what the cached binaries of version were built from.
func buildStamp(version string) string {
	return fmt.Sprintf("kubernetes=%s recipe=%s goos=%s goarch=%s\n", version, buildRecipe, runtime.GOOS, runtime.GOARCH)
}

// binariesCurrent reports whether binDir holds every one of bins, built by
// the recipe stamp.
func binariesCurrent(binDir, stampPath, stamp string, bins []string) bool {
	got, err := os.ReadFile(stampPath)
	if err != nil || string(got) != stamp {
		return false
	}
	for _, b := range bins {
		if !isExecutable(filepath.Join(binDir, b)) {
			return false
		}
	}
	return true
}

// buildLDFlags strips symbols (smaller, faster links) and stamps the version
// the components report, as Kubernetes' own build does.
func buildLDFlags(version string) string {
	v := strings.TrimPrefix(version, "v")
	major, minor, _ := strings.Cut(v, ".")
	minor, _, _ = strings.Cut(minor, ".")
	flags := []string{"-s", "-w"}
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		flags = append(flags,
			"-X", pkg+".gitVersion="+version,
			"-X", pkg+".gitMajor="+major,
			"-X", pkg+".gitMinor="+minor,
			"-X", pkg+".gitTreeState=clean",
		)
	}
	return strings.Join(flags, " ")
}

// FindSourceDir locates carve's test module: $CARVE_CLUSTER_SRC, else the
// first directory at or above the working directory that is the test module
// or holds it as test/.
func FindSourceDir() (string, error) {
	if d := os.Getenv("CARVE_CLUSTER_SRC"); d != "" {
		if !isTestModule(d) {
			return "", fmt.Errorf("CARVE_CLUSTER_SRC=%s does not hold the module %s", d, testModule)
		}
		return d, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find the test module: %w", err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		for _, cand := range []string{d, filepath.Join(d, "test")} {
			if isTestModule(cand) {
				return cand, nil
			}
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	return "", fmt.Errorf("the Kubernetes binaries must be built but the module %s was not found from %s: run inside the carve checkout or set CARVE_CLUSTER_SRC", testModule, wd)
}

// isTestModule reports whether dir/go.mod declares the test module.
func isTestModule(dir string) bool {
	f, err := os.Open(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`) == testModule
		}
	}
	return false
}

// findGo returns the go command: $GO, the one in PATH, or the usual install
// location when PATH lacks it (sudo often drops /usr/local/go/bin).
func findGo() (string, error) {
	if p := os.Getenv("GO"); p != "" && isExecutable(p) {
		return p, nil
	}
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	if isExecutable("/usr/local/go/bin/go") {
		return "/usr/local/go/bin/go", nil
	}
	return "", fmt.Errorf("the go command is needed to build the Kubernetes components but is not in PATH")
}
