package cluster

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// testModule is the module path of carve's test module, whose go.mod pins
// k8s.io/kubernetes (and its staging modules) and lists the programs built
// here as tools.
const testModule = "github.com/carve-dev/carve/test"

// buildRecipe changes whenever the way the binaries are built changes, so
// that caches made by an older recipe are rebuilt.
const buildRecipe = "4"

// Component names, also the names of their binaries and log files.
const (
	compEtcd       = "etcd"
	compContainerd = "containerd"
	compAPIServer  = "kube-apiserver"
	compCM         = "kube-controller-manager"
	compScheduler  = "kube-scheduler"
	compKubelet    = "kubelet"
)

// kubectlBinary is the name of the kubectl binary built with the components.
const kubectlBinary = "kubectl"

// kubeBinaries are the programs built from k8s.io/kubernetes.
func kubeBinaries() []string {
	return []string{compAPIServer, compCM, compScheduler, compKubelet, kubectlBinary}
}

// Binaries are the paths of the Kubernetes binaries.
type Binaries struct {
	Dir               string
	KubeAPIServer     string
	KubeControllerMgr string
	KubeScheduler     string
	Kubelet           string
	Kubectl           string
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

// EnsureBinaries returns the Kubernetes binaries (the components and kubectl) for
// KubernetesVersion(), building them first unless cacheDir already holds them.
// srcDir is the test module's directory; when empty it is searched for (see
// FindSourceDir). The build takes several minutes on a small machine and is
// done once per version; concurrent callers wait for one build.
func EnsureBinaries(ctx context.Context, log io.Writer, cacheDir, srcDir string) (Binaries, error) {
	version := KubernetesVersion()
	if err := CheckVersion(version); err != nil {
		return Binaries{}, err
	}
	binDir := filepath.Join(cacheDir, version, "bin")
	bins := Binaries{
		Dir:               binDir,
		KubeAPIServer:     filepath.Join(binDir, compAPIServer),
		KubeControllerMgr: filepath.Join(binDir, compCM),
		KubeScheduler:     filepath.Join(binDir, compScheduler),
		Kubelet:           filepath.Join(binDir, compKubelet),
		Kubectl:           filepath.Join(binDir, kubectlBinary),
	}
	stampPath := filepath.Join(binDir, ".stamp")
	stamp := buildStamp(version)
	if binariesCurrent(binDir, stampPath, stamp) && os.Getenv("CARVE_CLUSTER_REBUILD") == "" {
		return bins, nil
	}
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return bins, fmt.Errorf("create binary cache: %w", err)
	}
	// One build at a time per cache; whoever waited finds the result.
	lock, _, err := acquireLock(ctx, filepath.Join(cacheDir, version, "build.lock"), func(format string, args ...any) {
		fmt.Fprintf(log, format+"\n", args...)
	})
	if err != nil {
		return bins, fmt.Errorf("lock binary cache: %w", err)
	}
	defer func() {
		if err := lock.release(); err != nil {
			fmt.Fprintf(log, "%v\n", err)
		}
	}()
	if binariesCurrent(binDir, stampPath, stamp) && os.Getenv("CARVE_CLUSTER_REBUILD") == "" {
		return bins, nil
	}

	goTool, err := findGo()
	if err != nil {
		return bins, err
	}
	if srcDir == "" && version == DefaultKubernetesVersion {
		srcDir, err = FindSourceDir()
		if err != nil {
			return bins, err
		}
	}
	if srcDir, err = buildModuleDir(ctx, goTool, srcDir, filepath.Join(cacheDir, version, "src"), version); err != nil {
		return bins, err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(binDir), "build-")
	if err != nil {
		return bins, fmt.Errorf("create build directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()

	fmt.Fprintf(log, "building Kubernetes %s (%s) in %s; the first build takes several minutes\n",
		version, strings.Join(kubeBinaries(), ", "), srcDir)
	start := time.Now()
	if err := buildKubernetes(ctx, log, goTool, srcDir, tmp, version, buildHeartbeat); err != nil {
		return bins, err
	}
	for _, b := range kubeBinaries() {
		if err := os.Rename(filepath.Join(tmp, b), filepath.Join(binDir, b)); err != nil {
			return bins, fmt.Errorf("install %s into the cache: %w", b, err)
		}
	}
	if err := os.WriteFile(stampPath, []byte(stamp), 0o644); err != nil {
		return bins, fmt.Errorf("write build stamp: %w", err)
	}
	fmt.Fprintf(log, "built Kubernetes %s components in %s into %s\n", version, time.Since(start).Round(time.Second), binDir)
	return bins, nil
}

// buildKubernetes builds the Kubernetes binaries into outDir with one
// `go build -v` in the test module at srcDir, reporting progress to log:
// a line as each binary's main package is reached, and a heartbeat every
// interval with the packages compiled so far (of how many, counted by a
// `go list -deps` alongside).
func buildKubernetes(ctx context.Context, log io.Writer, goTool, srcDir, outDir, version string, interval time.Duration) error {
	mains := map[string]string{}
	var pkgs []string
	for _, b := range kubeBinaries() {
		pkg := "k8s.io/kubernetes/cmd/" + b
		mains[pkg] = b
		pkgs = append(pkgs, pkg)
	}
	progress := newBuildProgress(log, time.Now, version, mains)

	// The total is only for the heartbeat: a failure leaves it unknown.
	listCtx, cancelList := context.WithCancel(ctx)
	listDone := make(chan struct{})
	go func() {
		defer close(listDone)
		list := exec.CommandContext(listCtx, goTool, append([]string{"list", "-deps"}, pkgs...)...)
		list.Dir = srcDir
		list.Env = goBuildEnv()
		if out, err := list.Output(); err == nil {
			progress.setTotal(countPackages(string(out)))
		}
	}()
	defer func() {
		cancelList()
		<-listDone
	}()

	args := append([]string{"build", "-v", "-trimpath", "-ldflags=" + buildLDFlags(version), "-o", outDir + string(filepath.Separator)}, pkgs...)
	cmd := exec.CommandContext(ctx, goTool, args...)
	cmd.Dir = srcDir
	cmd.Env = goBuildEnv()
	cmd.Stdout = progress
	cmd.Stderr = progress
	ticker := time.NewTicker(interval)
	stop := make(chan struct{})
	beating := make(chan struct{})
	go func() {
		defer close(beating)
		progress.heartbeat(ticker.C, stop)
	}()
	err := cmd.Run()
	ticker.Stop()
	close(stop)
	<-beating
	progress.Flush()
	if err != nil {
		return fmt.Errorf("build Kubernetes components: %w\n%s", err, lastLines(progress.output(), 40))
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

// binariesCurrent reports whether binDir holds every binary built by the
// current recipe.
func binariesCurrent(binDir, stampPath, stamp string) bool {
	got, err := os.ReadFile(stampPath)
	if err != nil || string(got) != stamp {
		return false
	}
	for _, b := range kubeBinaries() {
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
