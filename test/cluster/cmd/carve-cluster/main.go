package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/carve-dev/carve/test/cluster"
)

const usage = `usage: carve-cluster <command> [flags]

Runs a real single-node Kubernetes %s cluster on 127.0.0.1 (needs root).

commands:
  up       start a cluster; stays in the foreground until Ctrl-C or
           'carve-cluster down', or with -d returns once it is ready
  env      print 'export KUBECONFIG=...' for the running cluster
           (use: eval "$(carve-cluster env)")
  status   show the running cluster
  kubectl  run kubectl %s against the running cluster (built the
           first time it is needed)
  down     stop the running cluster and clean up after a crashed one
  build    install host packages, build the Kubernetes binaries,
           kubectl, containerd and the image, without starting anything

Run 'carve-cluster <command> -h' for the flags of a command.
`

// daemonFlag marks the child that a detached 'up' starts.
const daemonFlag = "--internal-daemon"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintf(os.Stderr, usage, cluster.KubernetesVersion(), cluster.KubernetesVersion())
		os.Exit(2)
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "up":
		err = up(args)
	case "down":
		err = down(args)
	case "env":
		err = env(args)
	case "status":
		err = status(args)
	case "kubectl":
		err = kubectl(args)
	case "build":
		err = build(args)
	case "-h", "--help", "help":
		fmt.Printf(usage, cluster.KubernetesVersion(), cluster.KubernetesVersion())
	default:
		fmt.Fprintf(os.Stderr, "carve-cluster: unknown command %q\n", cmd)
		fmt.Fprintf(os.Stderr, usage, cluster.KubernetesVersion(), cluster.KubernetesVersion())
		os.Exit(2)
	}
	if err != nil {
		if exit, ok := errors.AsType[exitCodeError](err); ok {
			os.Exit(int(exit))
		}
		fmt.Fprintf(os.Stderr, "carve-cluster: %v\n", err)
		os.Exit(1)
	}
}

// exitCodeError ends the program with a status and no further message.
type exitCodeError int

func (e exitCodeError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// labelFlags collects repeated --label k=v flags.
type labelFlags map[string]string

func (l labelFlags) String() string {
	var kv []string
	for k, v := range l {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	return strings.Join(kv, ",")
}

func (l labelFlags) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("label %q is not key=value", s)
	}
	l[k] = v
	return nil
}

// defaultDir is the cluster root of 'up' unless --dir or CARVE_CLUSTER_DIR
// says otherwise: a fixed path, so that the kubeconfig path is predictable.
func defaultDir() string {
	if d := os.Getenv("CARVE_CLUSTER_DIR"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "carve-cluster")
}

func up(args []string) error {
	fs := flag.NewFlagSet("up", flag.ExitOnError)
	dir := fs.String("dir", defaultDir(), "cluster root directory (wiped if it holds an old cluster); env CARVE_CLUSTER_DIR")
	node := fs.String("node-name", cluster.DefaultNodeName, "node name")
	detach := fs.Bool("d", false, "detach: start in the background, return once the cluster is ready")
	logFile := fs.String("log-file", filepath.Join(os.TempDir(), "carve-cluster-up.log"), "with -d: where the background process logs its progress")
	timeout := fs.Duration("timeout", 30*time.Minute, "give up if the cluster is not ready by then (includes a first build)")
	labels := labelFlags{}
	fs.Var(labels, "label", "node label key=value (repeatable)")
	daemon := fs.Bool(strings.TrimPrefix(daemonFlag, "--"), false, "internal: the background process of up -d")
	readyFile := fs.String("internal-ready-file", "", "internal: written once the cluster is ready")
	_ = fs.Parse(args)
	if fs.NArg() > 0 {
		return fmt.Errorf("up: unexpected arguments %v", fs.Args())
	}
	if err := cluster.Available(); err != nil {
		return err
	}
	if info, ok, err := cluster.Current(""); err == nil && ok && info.Running {
		return fmt.Errorf("a cluster is already running: %q by pid %d (%s), KUBECONFIG=%s; stop it with 'carve-cluster down'",
			info.NodeName, info.PID, info.Owner, info.Kubeconfig)
	}
	if *detach && !*daemon {
		return upDetached(args, *logFile, *timeout)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	startCtx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	c, err := cluster.Start(startCtx, cluster.Options{
		NodeName:   *node,
		NodeLabels: labels,
		Dir:        *dir,
		Log:        os.Stderr,
		Owner:      "carve-cluster up",
	})
	if err != nil {
		return err
	}
	if *readyFile != "" {
		if err := os.WriteFile(*readyFile, []byte(c.Kubeconfig()+"\n"), 0o644); err != nil {
			_ = c.Stop()
			return fmt.Errorf("signal readiness: %w", err)
		}
	}
	printUsage(os.Stderr, c, *daemon)
	<-ctx.Done()
	fmt.Fprintln(os.Stderr, "carve-cluster: stopping")
	if err := c.Stop(); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "carve-cluster: stopped")
	return nil
}

// upDetached starts 'up' again as a background process in its own session,
// relays its progress and returns once the cluster is ready (or failed).
func upDetached(args []string, logFile string, timeout time.Duration) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable: %w", err)
	}
	ready, err := os.CreateTemp("", "carve-cluster-ready-")
	if err != nil {
		return fmt.Errorf("create readiness file: %w", err)
	}
	readyPath := ready.Name()
	_ = ready.Close()
	if err := os.Remove(readyPath); err != nil {
		return fmt.Errorf("prepare readiness file: %w", err)
	}
	defer func() { _ = os.Remove(readyPath) }()

	logf, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("open log file: %w", err)
	}
	defer logf.Close()
	childArgs := append([]string{"up", daemonFlag, "--internal-ready-file=" + readyPath}, args...)
	// Not tied to a context: the background cluster outlives this process.
	cmd := exec.Command(self, childArgs...) //nolint:noctx // see above
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.Dir, _ = os.Getwd()
	// A new session: the terminal's Ctrl-C and hangup do not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start background cluster: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// Ctrl-C while waiting stops the background cluster too.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)

	// Relay the child's log until it is ready.
	in, err := os.Open(logFile)
	if err != nil {
		return fmt.Errorf("read log file: %w", err)
	}
	defer in.Close()
	deadline := time.After(timeout + time.Minute)
	for {
		_, _ = io.Copy(os.Stderr, in)
		if _, err := os.Stat(readyPath); err == nil {
			time.Sleep(200 * time.Millisecond) // let the usage text land
			_, _ = io.Copy(os.Stderr, in)
			fmt.Fprintf(os.Stderr, "carve-cluster: running in the background as pid %d, logging to %s\n", cmd.Process.Pid, logFile)
			return nil
		}
		select {
		case err := <-exited:
			_, _ = io.Copy(os.Stderr, in)
			return fmt.Errorf("background cluster failed to start (%w); see %s", err, logFile)
		case sig := <-sigs:
			fmt.Fprintf(os.Stderr, "carve-cluster: got %s, stopping the background cluster\n", sig)
			_ = cmd.Process.Signal(syscall.SIGTERM)
			<-exited //nolint:errcheck // its status is that of the SIGTERM just sent
			_, _ = io.Copy(os.Stderr, in)
			return exitCodeError(130)
		case <-deadline:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			return fmt.Errorf("background cluster not ready after %s; stopping it, see %s", timeout, logFile)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// printUsage tells the user how to reach the cluster.
func printUsage(w io.Writer, c *cluster.Cluster, detached bool) {
	stop := "Ctrl-C or 'carve-cluster down'"
	if detached {
		stop = "'carve-cluster down'"
	}
	fmt.Fprintf(w, `
cluster %q is up (Kubernetes %s, started in %s)
  export KUBECONFIG=%s        # or: eval "$(carve-cluster env)"
  carve-cluster kubectl get nodes
  API server:          %s
  device plugins:      %s (kubelet.sock inside)
  pod resources:       %s
  image:               %s (pods: imagePullPolicy: Never, hostNetwork: true)
  component logs:      %s/logs
  stop with:           %s
`, c.NodeName(), cluster.KubernetesVersion(), c.StartupTime().Round(100*time.Millisecond), c.Kubeconfig(),
		c.APIServerURL(), c.DevicePluginDir(), c.PodResourcesSocket(), cluster.BusyboxImage, c.Dir(), stop)
}

// running returns the running cluster or an error saying there is none.
func running() (cluster.Info, error) {
	info, ok, err := cluster.Current("")
	if err != nil {
		return info, err
	}
	if !ok || !info.Running {
		return info, errors.New("no cluster is running (start one with 'carve-cluster up -d')")
	}
	return info, nil
}

func env(args []string) error {
	fs := flag.NewFlagSet("env", flag.ExitOnError)
	_ = fs.Parse(args)
	info, err := running()
	if err != nil {
		return err
	}
	fmt.Printf("export KUBECONFIG=%s\n", info.Kubeconfig)
	return nil
}

func status(args []string) error {
	fs := flag.NewFlagSet("status", flag.ExitOnError)
	_ = fs.Parse(args)
	info, ok, err := cluster.Current("")
	if err != nil {
		return err
	}
	switch {
	case !ok:
		fmt.Println("no cluster")
		return exitCodeError(1)
	case !info.Running:
		fmt.Printf("cluster %q in %s was left behind by pid %d (%s), which is gone; 'carve-cluster down' cleans it up\n",
			info.NodeName, info.Dir, info.PID, info.Owner)
		return exitCodeError(1)
	}
	fmt.Printf("cluster %q running since %s, pid %d (%s)\nKUBECONFIG=%s\nlogs: %s/logs\n",
		info.NodeName, info.Started.Format(time.RFC3339), info.PID, info.Owner, info.Kubeconfig, info.Dir)
	return nil
}

func kubectl(args []string) error {
	info, err := running()
	if err != nil {
		return err
	}
	cacheDir, err := cluster.DefaultCacheDir()
	if err != nil {
		return err
	}
	// The first time, kubectl is built (its progress on stderr).
	bin, err := cluster.EnsureKubectl(context.Background(), os.Stderr, cacheDir, "")
	if err != nil {
		return err
	}
	// In the foreground, kubectl gets the terminal's signals itself.
	cmd := exec.Command(bin, args...) //nolint:noctx // see above
	cmd.Env = append(os.Environ(), "KUBECONFIG="+info.Kubeconfig)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		if ee, ok := errors.AsType[*exec.ExitError](err); ok {
			return exitCodeError(ee.ExitCode())
		}
		return fmt.Errorf("run %s: %w", bin, err)
	}
	return nil
}

func down(args []string) error {
	fs := flag.NewFlagSet("down", flag.ExitOnError)
	force := fs.Bool("force", false, "also stop a cluster that a test (not carve-cluster up) runs")
	timeout := fs.Duration("timeout", 2*time.Minute, "how long to wait for the cluster to stop")
	_ = fs.Parse(args)
	if err := cluster.Available(); err != nil {
		return err
	}
	info, ok, err := cluster.Current("")
	if err != nil {
		return err
	}
	if ok && info.Running {
		if !strings.HasPrefix(info.Owner, "carve-cluster") && !*force {
			return fmt.Errorf("the running cluster belongs to pid %d (%s), not to 'carve-cluster up'; use --force to stop it anyway", info.PID, info.Owner)
		}
		fmt.Fprintf(os.Stderr, "carve-cluster: stopping cluster %q (pid %d)\n", info.NodeName, info.PID)
		if err := syscall.Kill(info.PID, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("signal pid %d: %w", info.PID, err)
		}
	}
	// Taking the lock waits for the owner to finish stopping; whatever a
	// crashed owner left behind is cleaned up then.
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := cluster.CleanupStale(ctx, "", os.Stderr); err != nil {
		return err
	}
	if !ok {
		fmt.Fprintln(os.Stderr, "carve-cluster: no cluster was running")
	} else {
		fmt.Fprintln(os.Stderr, "carve-cluster: down")
	}
	return nil
}

func build(args []string) error {
	fs := flag.NewFlagSet("build", flag.ExitOnError)
	_ = fs.Parse(args)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	tools, err := cluster.EnsureHostTools(ctx, os.Stderr)
	if err != nil {
		return err
	}
	cacheDir, err := cluster.DefaultCacheDir()
	if err != nil {
		return err
	}
	bins, err := cluster.EnsureBinaries(ctx, os.Stderr, cacheDir, "")
	if err != nil {
		return err
	}
	kubectl, err := cluster.EnsureKubectl(ctx, os.Stderr, cacheDir, "")
	if err != nil {
		return err
	}
	ctrd, err := cluster.EnsureContainerd(ctx, os.Stderr, cacheDir, "")
	if err != nil {
		return err
	}
	if err := cluster.EnsureImage(ctx, cacheDir, tools.Busybox); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "carve-cluster: host tools present, binaries in %s and %s, %s, image %s cached\n", bins.Dir, ctrd.Dir, kubectl, cluster.BusyboxImage)
	return nil
}
