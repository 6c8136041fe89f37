package cluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// DevicePluginDir is the kubelet's device-plugin directory. The kubelet
// hard-codes it, whatever its root directory, so every cluster on a machine
// shares it (one at a time, see DefaultLockPath).
const DevicePluginDir = "/var/lib/kubelet/device-plugins"

// DefaultNodeName is the node name used when Options.NodeName is empty.
const DefaultNodeName = "carve-e2e"

// Options configure Start. The zero value is usable.
type Options struct {
	// NodeName is the name the kubelet registers its Node under.
	// Default DefaultNodeName.
	NodeName string
	// NodeLabels are set on the Node by the kubelet at registration.
	NodeLabels map[string]string
	// Dir is the cluster's root directory: all state, sockets and logs live
	// below it. Default: a new directory under os.TempDir(). An existing Dir
	// must be empty or an old cluster root (which is wiped). Keep it short:
	// unix socket paths below it are limited to 107 bytes.
	Dir string
	// KeepDir leaves Dir (logs, etcd data) in place after Stop. Mounts and
	// processes are cleaned up regardless.
	KeepDir bool
	// Log receives progress messages. Default: discarded.
	Log io.Writer
	// CacheDir holds the built Kubernetes binaries and the test image.
	// Default DefaultCacheDir().
	CacheDir string
	// SourceDir is carve's test module, needed only to build the binaries.
	// Default FindSourceDir().
	SourceDir string
	// LockPath is the machine-wide lock. Default DefaultLockPath. Changing it
	// is only safe when the device-plugin directory is not shared.
	LockPath string
	// ReadyTimeout bounds the bring-up once binaries are ready and the lock
	// is held: from starting etcd to a Ready node. Default 3 minutes.
	ReadyTimeout time.Duration
	// Owner names who runs the cluster, for the lock record that waiting
	// clusters and `carve-cluster status` show. Default: the program name.
	Owner string
	// HandleSignals stops the cluster when the process gets SIGINT or
	// SIGTERM, then lets the signal terminate the process as it would have.
	HandleSignals bool
}

// ports are the TCP ports the cluster listens on, all on 127.0.0.1.
type ports struct {
	etcd, etcdPeer, apiserver, controllerManager, scheduler, kubelet, kubeletHealthz int
}

// paths are the files and directories below the cluster root.
type paths struct {
	root, logs, pki, etc                             string
	adminKubeconfig, tokenFile                       string
	schedulerKubeconfig, cmKubeconfig, kubeletKubecf string
	etcdData, apiserverDir, cmDir, schedulerDir      string
	containerdRoot, containerdState                  string
	containerdSocket, containerdConfig, cniConfDir   string
	cdiDir                                           string
	kubeletRoot, kubeletConfig, podLogsDir           string
}

func newPaths(root string) paths {
	j := func(elem ...string) string { return filepath.Join(append([]string{root}, elem...)...) }
	return paths{
		root:                root,
		logs:                j("logs"),
		pki:                 j("pki"),
		etc:                 j("etc"),
		adminKubeconfig:     j("kubeconfig"),
		tokenFile:           j("pki", "tokens.csv"),
		schedulerKubeconfig: j("etc", "scheduler.kubeconfig"),
		cmKubeconfig:        j("etc", "controller-manager.kubeconfig"),
		kubeletKubecf:       j("etc", "kubelet.kubeconfig"),
		etcdData:            j("etcd"),
		apiserverDir:        j("kube-apiserver"),
		cmDir:               j("kube-controller-manager"),
		schedulerDir:        j("kube-scheduler"),
		containerdRoot:      j("containerd", "root"),
		containerdState:     j("containerd", "state"),
		containerdSocket:    j("run", "containerd.sock"),
		containerdConfig:    j("etc", "containerd.toml"),
		cniConfDir:          j("cni", "net.d"),
		cdiDir:              j("cdi"),
		kubeletRoot:         j("kubelet"),
		kubeletConfig:       j("etc", "kubelet.yaml"),
		podLogsDir:          j("pod-logs"),
	}
}

// Cluster is a running local cluster. Its methods are safe for concurrent
// use.
type Cluster struct {
	opts       Options
	id         string
	p          paths
	ports      ports
	tools      HostTools
	bins       Binaries
	ctrd       ContainerdBinaries
	image      string
	creds      credentials
	cgroupRoot string
	lock       *machineLock
	rec        lockRecord
	logw       io.Writer

	restConfig *rest.Config
	clientset  kubernetes.Interface

	startupTime time.Duration

	mu       sync.Mutex // guards procs and stopped
	procs    map[string]*process
	stopped  bool
	stopDone chan struct{} // closed when Stop has finished
	stopErr  error         // valid once stopDone is closed

	stopSignals chan struct{} // closed by Stop to end signal handling
}

// Available reports why this process cannot run a cluster (not root, not
// Linux), or nil when it can.
func Available() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("a local cluster needs root (containers, mounts, cgroups); running as uid %d", os.Geteuid())
	}
	if _, err := os.Stat("/proc/self/mountinfo"); err != nil {
		return fmt.Errorf("a local cluster needs Linux with /proc: %w", err)
	}
	return nil
}

// Start brings up a cluster and returns once its node is Ready and
// schedulable and the default service account exists. It installs missing
// host packages and builds missing binaries first, which can take minutes
// the first time. On error everything it started is stopped again.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	t0 := time.Now()
	if err := Available(); err != nil {
		return nil, err
	}
	if opts.NodeName == "" {
		opts.NodeName = DefaultNodeName
	}
	if errs := validation.IsDNS1123Subdomain(opts.NodeName); len(errs) > 0 {
		return nil, fmt.Errorf("invalid node name %q: %s", opts.NodeName, strings.Join(errs, "; "))
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if opts.LockPath == "" {
		opts.LockPath = DefaultLockPath
	}
	if opts.Owner == "" {
		opts.Owner = filepath.Base(os.Args[0])
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 3 * time.Minute
	}
	if opts.CacheDir == "" {
		d, err := DefaultCacheDir()
		if err != nil {
			return nil, err
		}
		opts.CacheDir = d
	}
	c := &Cluster{opts: opts, logw: &syncWriter{w: opts.Log}, procs: map[string]*process{}, stopDone: make(chan struct{})}

	var err error
	if c.tools, err = EnsureHostTools(ctx, c.logw); err != nil {
		return nil, err
	}
	if c.bins, err = EnsureBinaries(ctx, c.logw, opts.CacheDir, opts.SourceDir); err != nil {
		return nil, err
	}
	if c.ctrd, err = EnsureContainerd(ctx, c.logw, opts.CacheDir, opts.SourceDir); err != nil {
		return nil, err
	}
	if c.image, err = ensureImage(ctx, opts.CacheDir, c.tools.Busybox); err != nil {
		return nil, err
	}
	tPrepared := time.Now()

	lock, prev, err := acquireLock(ctx, opts.LockPath, c.logf)
	if err != nil {
		return nil, err
	}
	c.lock = lock
	tLocked := time.Now()
	if prev.Dir != "" || len(prev.Components) > 0 {
		c.logf("cleaning up after an earlier cluster that was not stopped: %s", prev)
		if err := cleanupRecord(prev); err != nil {
			return nil, errors.Join(fmt.Errorf("clean up after the earlier cluster (%s): %w", prev, err), lock.release())
		}
	}

	if opts.HandleSignals {
		c.stopSignals = make(chan struct{})
		c.handleSignals()
	}
	bringUp, cancel := context.WithTimeout(ctx, opts.ReadyTimeout)
	defer cancel()
	if err := c.bringUp(bringUp); err != nil {
		err = c.annotate(err)
		if serr := c.Stop(); serr != nil {
			err = errors.Join(err, fmt.Errorf("stop after failed start: %w", serr))
		}
		return nil, err
	}
	c.startupTime = time.Since(tLocked)
	c.logf("cluster %q ready in %s (%s after preparing binaries and image in %s and waiting %s for the machine lock); KUBECONFIG=%s",
		opts.NodeName, time.Since(t0).Round(100*time.Millisecond), c.startupTime.Round(100*time.Millisecond),
		tPrepared.Sub(t0).Round(100*time.Millisecond), tLocked.Sub(tPrepared).Round(100*time.Millisecond), c.p.adminKubeconfig)
	return c, nil
}

// bringUp prepares the root directory and starts all components in order.
func (c *Cluster) bringUp(ctx context.Context) error {
	if err := c.prepareDir(); err != nil {
		return err
	}
	var err error
	if c.ports, err = pickPorts(); err != nil {
		return err
	}
	idb := make([]byte, 4)
	if _, err := rand.Read(idb); err != nil {
		return fmt.Errorf("generate cluster id: %w", err)
	}
	c.id = hex.EncodeToString(idb)
	c.cgroupRoot = "/carve-cluster-" + c.id
	c.rec = lockRecord{
		PID:        os.Getpid(),
		Dir:        c.p.root,
		Kubeconfig: c.p.adminKubeconfig,
		CgroupRoot: c.cgroupRoot,
		Containerd: c.p.containerdSocket,
		NodeName:   c.opts.NodeName,
		Owner:      c.opts.Owner,
		Started:    time.Now(),
	}
	c.rec.PIDStart, _ = procStartTime(os.Getpid())
	if err := c.lock.write(c.rec); err != nil {
		return err
	}
	if err := c.writeConfig(); err != nil {
		return err
	}
	if err := prepareDevicePluginDir(ctx); err != nil {
		return err
	}
	if err := createCgroupRoot(c.cgroupRoot); err != nil {
		return err
	}

	// etcd and containerd (with the image) are independent of each other.
	var wg sync.WaitGroup
	var etcdErr, ctrdErr error
	wg.Add(2)
	go func() { defer wg.Done(); etcdErr = c.startEtcd(ctx) }()
	go func() { defer wg.Done(); ctrdErr = c.startContainerd(ctx) }()
	wg.Wait()
	if err := errors.Join(etcdErr, ctrdErr); err != nil {
		return err
	}
	if err := c.StartAPIServer(ctx); err != nil {
		return err
	}
	errs := make([]error, 3)
	wg.Add(3)
	go func() { defer wg.Done(); errs[0] = c.startControllerManager(ctx) }()
	go func() { defer wg.Done(); errs[1] = c.startScheduler(ctx) }()
	go func() { defer wg.Done(); errs[2] = c.StartKubelet(ctx) }()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return c.waitClusterUsable(ctx)
}

// prepareDir creates (or wipes) the root directory and marks it as ours.
func (c *Cluster) prepareDir() error {
	root := c.opts.Dir
	if root == "" {
		d, err := os.MkdirTemp("", "carve-cluster-")
		if err != nil {
			return fmt.Errorf("create cluster directory: %w", err)
		}
		root = d
	} else {
		abs, err := filepath.Abs(root)
		if err != nil {
			return fmt.Errorf("cluster directory %s: %w", root, err)
		}
		root = abs
		entries, err := os.ReadDir(root)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return fmt.Errorf("cluster directory %s: %w", root, err)
		case len(entries) > 0:
			// An old cluster root is wiped (we hold the lock, so it is not in use).
			if err := removeTree(root); err != nil {
				return fmt.Errorf("cluster directory %s is not empty: %w", root, err)
			}
		}
		if err := os.MkdirAll(root, 0o755); err != nil {
			return fmt.Errorf("create cluster directory: %w", err)
		}
	}
	c.p = newPaths(root)
	// Socket paths must fit sockaddr_un.
	if n := len(c.p.containerdSocket + ".ttrpc"); n > 100 {
		return fmt.Errorf("cluster directory %s is too long for unix sockets below it (%d bytes); use a shorter Dir", root, n)
	}
	if err := os.WriteFile(filepath.Join(root, markerFile), []byte("carve test/cluster root; removed by Stop\n"), 0o644); err != nil {
		return fmt.Errorf("mark cluster directory: %w", err)
	}
	for _, d := range []string{c.p.logs, c.p.pki, c.p.etc, c.p.etcdData, c.p.apiserverDir, c.p.cmDir, c.p.schedulerDir,
		c.p.containerdRoot, c.p.containerdState, filepath.Dir(c.p.containerdSocket), c.p.cniConfDir, c.p.cdiDir,
		c.p.kubeletRoot, c.p.podLogsDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	if err := os.Chmod(c.p.etcdData, 0o700); err != nil {
		return fmt.Errorf("restrict etcd data directory: %w", err)
	}
	return nil
}

// writeConfig writes credentials, certificates, kubeconfigs and the
// containerd, CNI and kubelet configuration.
func (c *Cluster) writeConfig() error {
	var err error
	if c.creds, err = newCredentials(); err != nil {
		return err
	}
	pk, err := newPKI()
	if err != nil {
		return err
	}
	secret := map[string][]byte{
		filepath.Join(c.p.pki, "ca.key"):        pk.caKey,
		filepath.Join(c.p.pki, "apiserver.key"): pk.servingK,
		filepath.Join(c.p.pki, "sa.key"):        pk.saKey,
		c.p.tokenFile:                           []byte(c.creds.tokenFile(c.opts.NodeName)),
	}
	if err := writeFiles(secret, 0o600); err != nil {
		return err
	}
	kcfg, err := kubeletConfig(c.p, c.ports, c.cgroupRoot)
	if err != nil {
		return err
	}
	public := map[string][]byte{
		filepath.Join(c.p.pki, "ca.crt"):                      pk.caCert,
		filepath.Join(c.p.pki, "apiserver.crt"):               pk.servingCert,
		filepath.Join(c.p.pki, "sa.pub"):                      pk.saPub,
		c.p.containerdConfig:                                  []byte(containerdConfig(c.p, c.tools.CNIBinDir)),
		filepath.Join(c.p.cniConfDir, "10-loopback.conflist"): []byte(cniConfig),
		c.p.kubeletConfig:                                     kcfg,
	}
	if err := writeFiles(public, 0o644); err != nil {
		return err
	}
	server := c.APIServerURL()
	for _, kc := range []struct{ path, user, token string }{
		{c.p.adminKubeconfig, "carve-admin", c.creds.admin},
		{c.p.schedulerKubeconfig, "system:kube-scheduler", c.creds.scheduler},
		{c.p.cmKubeconfig, "system:kube-controller-manager", c.creds.controllerManager},
		{c.p.kubeletKubecf, "system:node:" + c.opts.NodeName, c.creds.kubelet},
	} {
		if err := writeKubeconfig(kc.path, server, pk.caCert, kc.user, kc.token); err != nil {
			return err
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.p.adminKubeconfig)
	if err != nil {
		return fmt.Errorf("load admin kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	cfg.Timeout = 30 * time.Second
	c.restConfig = cfg
	if c.clientset, err = kubernetes.NewForConfig(cfg); err != nil {
		return fmt.Errorf("create clientset: %w", err)
	}
	return nil
}

// pickPorts asks the kernel for free loopback ports. Another process could
// take one before the component binds it; the component then fails to
// start with "address already in use" in its log.
func pickPorts() (ports, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	next := func() (int, error) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("find a free port: %w", err)
		}
		ls = append(ls, l)
		return l.Addr().(*net.TCPAddr).Port, nil
	}
	var p ports
	for _, f := range []*int{&p.etcd, &p.etcdPeer, &p.apiserver, &p.controllerManager, &p.scheduler, &p.kubelet, &p.kubeletHealthz} {
		v, err := next()
		if err != nil {
			return p, err
		}
		*f = v
	}
	return p, nil
}

// childEnv is the environment of every component: a predictable PATH (the
// containerd shim looks runc up there) that starts with pathFirst, HOME,
// and nothing else inherited, so that the developer's KUBECONFIG, ETCD_*
// and the like cannot leak in.
func childEnv(pathFirst ...string) []string {
	path := strings.Join(append(pathFirst, "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"), ":")
	home := os.Getenv("HOME")
	if home == "" {
		home = "/root"
	}
	return []string{"PATH=" + path, "HOME=" + home, "LANG=C.UTF-8", "TMPDIR=" + os.TempDir()}
}

// newProcess registers a component process (not yet started).
func (c *Cluster) newProcess(name, path, dir string, args ...string) *process {
	return &process{
		name:    name,
		path:    path,
		args:    args,
		dir:     dir,
		env:     childEnv(),
		logPath: filepath.Join(c.p.logs, name+".log"),
	}
}

// launch starts p unless the cluster is stopping and records it.
func (c *Cluster) launch(p *process) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return fmt.Errorf("start %s: cluster is stopped", p.name)
	}
	if old := c.procs[p.name]; old.running() {
		return fmt.Errorf("start %s: already running as pid %d", p.name, old.pid())
	}
	if err := p.start(); err != nil {
		return err
	}
	c.procs[p.name] = p
	st, _ := procStartTime(p.pid())
	c.rec.Components = slices.DeleteFunc(c.rec.Components, func(lp lockedProcess) bool { return lp.Name == p.name })
	c.rec.Components = append(c.rec.Components, lockedProcess{Name: p.name, PID: p.pid(), Start: st})
	if err := c.lock.write(c.rec); err != nil {
		c.logf("warning: %v", err)
	}
	return nil
}

// proc returns the component's current process, or nil.
func (c *Cluster) proc(name string) *process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.procs[name]
}

func (c *Cluster) startEtcd(ctx context.Context) error {
	peer := "http://127.0.0.1:" + strconv.Itoa(c.ports.etcdPeer)
	client := "http://127.0.0.1:" + strconv.Itoa(c.ports.etcd)
	p := c.newProcess(compEtcd, c.tools.Etcd, c.p.etcdData,
		"--name=carve",
		"--data-dir="+c.p.etcdData,
		"--listen-client-urls="+client,
		"--advertise-client-urls="+client,
		"--listen-peer-urls="+peer,
		"--initial-advertise-peer-urls="+peer,
		"--initial-cluster=carve="+peer,
		"--initial-cluster-state=new",
		"--logger=zap",
		"--log-outputs=stderr",
		// Test data is disposable; fsync costs seconds on a busy disk.
		"--unsafe-no-fsync",
	)
	if err := c.launch(p); err != nil {
		return err
	}
	return c.waitFor(ctx, "etcd to be healthy", []*process{p}, func(ctx context.Context) error {
		body, err := httpGet(ctx, nil, client+"/health")
		if err != nil {
			return err
		}
		if !strings.Contains(body, `"health":"true"`) {
			return fmt.Errorf("etcd health: %s", body)
		}
		return nil
	})
}

// startContainerd starts containerd, waits for its CRI plugin to be ready
// and imports the busybox image.
func (c *Cluster) startContainerd(ctx context.Context) error {
	p := c.newProcess(compContainerd, c.ctrd.Containerd, filepath.Dir(c.p.containerdRoot),
		"--config="+c.p.containerdConfig)
	// containerd finds its shim in PATH before beside itself: a host's
	// containerd-shim-runc-v2 of another release fails ("type with url ...
	// not found").
	p.env = childEnv(c.ctrd.Dir)
	if err := c.launch(p); err != nil {
		return err
	}
	if err := c.waitFor(ctx, "containerd's CRI runtime and network to be ready", []*process{p}, func(ctx context.Context) error {
		return criReady(ctx, c.p.containerdSocket)
	}); err != nil {
		return err
	}
	if err := importImage(ctx, c.ctrd.Ctr, c.p.containerdSocket, c.image); err != nil {
		return err
	}
	return c.waitFor(ctx, "the CRI plugin to see "+BusyboxImage, []*process{p}, func(ctx context.Context) error {
		return criHasImage(ctx, c.p.containerdSocket, BusyboxImage)
	})
}

// StartAPIServer starts kube-apiserver (again, after StopAPIServer) and waits
// until it is ready.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	p := c.newProcess(compAPIServer, c.bins.KubeAPIServer, c.p.apiserverDir,
		"--etcd-servers=http://127.0.0.1:"+strconv.Itoa(c.ports.etcd),
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(c.ports.apiserver),
		"--advertise-address=127.0.0.1",
		// The "kubernetes" Service endpoints cannot point at a loopback
		// address; nothing in the tests needs them.
		"--endpoint-reconciler-type=none",
		"--cert-dir="+c.p.apiserverDir,
		"--tls-cert-file="+filepath.Join(c.p.pki, "apiserver.crt"),
		"--tls-private-key-file="+filepath.Join(c.p.pki, "apiserver.key"),
		"--client-ca-file="+filepath.Join(c.p.pki, "ca.crt"),
		"--token-auth-file="+c.p.tokenFile,
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+filepath.Join(c.p.pki, "sa.pub"),
		"--service-account-signing-key-file="+filepath.Join(c.p.pki, "sa.key"),
		"--service-cluster-ip-range="+serviceCIDR,
		"--allow-privileged=true",
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		"--profiling=false",
		// On SIGTERM, end open watches after a second instead of waiting
		// for them (which with the kubelet's watches means until killed).
		"--shutdown-watch-termination-grace-period=1s",
		"--v=1",
	)
	if err := c.launch(p); err != nil {
		return err
	}
	return c.waitFor(ctx, "kube-apiserver to be ready", []*process{p}, func(ctx context.Context) error {
		_, err := c.clientset.CoreV1().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	})
}

// StopAPIServer stops kube-apiserver; the rest of the cluster keeps running
// (and retries). Start it again with StartAPIServer. The API server gets 5
// seconds to exit on SIGTERM; while clients hold watches open it often does
// not, and is then killed.
func (c *Cluster) StopAPIServer() error {
	return c.stopComponent(compAPIServer, 5*time.Second)
}

func (c *Cluster) startControllerManager(ctx context.Context) error {
	p := c.newProcess(compCM, c.bins.KubeControllerMgr, c.p.cmDir,
		"--kubeconfig="+c.p.cmKubeconfig,
		"--authentication-kubeconfig="+c.p.cmKubeconfig,
		"--authorization-kubeconfig="+c.p.cmKubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(c.ports.controllerManager),
		"--cert-dir="+c.p.cmDir,
		"--leader-elect=false",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+filepath.Join(c.p.pki, "sa.key"),
		"--root-ca-file="+filepath.Join(c.p.pki, "ca.crt"),
		"--cluster-name=carve-e2e",
		"--profiling=false",
		"--v=1",
	)
	if err := c.launch(p); err != nil {
		return err
	}
	return c.waitFor(ctx, "kube-controller-manager to be healthy", []*process{p}, func(ctx context.Context) error {
		_, err := httpGet(ctx, insecureTLS(), "https://127.0.0.1:"+strconv.Itoa(c.ports.controllerManager)+"/healthz")
		return err
	})
}

func (c *Cluster) startScheduler(ctx context.Context) error {
	p := c.newProcess(compScheduler, c.bins.KubeScheduler, c.p.schedulerDir,
		"--kubeconfig="+c.p.schedulerKubeconfig,
		"--authentication-kubeconfig="+c.p.schedulerKubeconfig,
		"--authorization-kubeconfig="+c.p.schedulerKubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(c.ports.scheduler),
		"--cert-dir="+c.p.schedulerDir,
		"--leader-elect=false",
		"--profiling=false",
		"--v=1",
	)
	if err := c.launch(p); err != nil {
		return err
	}
	return c.waitFor(ctx, "kube-scheduler to be healthy", []*process{p}, func(ctx context.Context) error {
		_, err := httpGet(ctx, insecureTLS(), "https://127.0.0.1:"+strconv.Itoa(c.ports.scheduler)+"/healthz")
		return err
	})
}

// StartKubelet starts the kubelet (again, after StopKubelet) and waits until
// its health endpoint answers, it has registered with the API server and its
// device-plugin registration socket exists. It does not wait for the node to
// be Ready; see WaitNodeReady.
func (c *Cluster) StartKubelet(ctx context.Context) error {
	args := []string{
		"--config=" + c.p.kubeletConfig,
		"--kubeconfig=" + c.p.kubeletKubecf,
		"--root-dir=" + c.p.kubeletRoot,
		"--hostname-override=" + c.opts.NodeName,
		"--node-ip=127.0.0.1",
		"--v=2",
	}
	if len(c.opts.NodeLabels) > 0 {
		var kv []string
		for k, v := range c.opts.NodeLabels {
			kv = append(kv, k+"="+v)
		}
		sort.Strings(kv)
		args = append(args, "--node-labels="+strings.Join(kv, ","))
	}
	p := c.newProcess(compKubelet, c.bins.Kubelet, c.p.kubeletRoot, args...)
	started := time.Now()
	if err := c.launch(p); err != nil {
		return err
	}
	sock := c.KubeletSocket()
	return c.waitFor(ctx, "the kubelet to be healthy and registered", []*process{p}, func(ctx context.Context) error {
		if _, err := httpGet(ctx, nil, "http://127.0.0.1:"+strconv.Itoa(c.ports.kubeletHealthz)+"/healthz"); err != nil {
			return err
		}
		st, err := os.Stat(sock)
		if err != nil {
			return fmt.Errorf("device-plugin socket: %w", err)
		}
		if st.ModTime().Before(started.Add(-time.Second)) {
			return fmt.Errorf("device-plugin socket %s predates this kubelet", sock)
		}
		_, err = c.clientset.CoreV1().Nodes().Get(ctx, c.opts.NodeName, metav1.GetOptions{})
		return err
	})
}

// StopKubelet stops the kubelet. Running containers keep running, as they
// would on a real node; device plugins lose their registration.
func (c *Cluster) StopKubelet() error {
	return c.stopComponent(compKubelet, 15*time.Second)
}

// RestartKubelet stops and starts the kubelet, then waits until the node is
// Ready again as reported by the new kubelet. Device plugins must register
// again afterwards, as on a real node.
func (c *Cluster) RestartKubelet(ctx context.Context) error {
	if err := c.StopKubelet(); err != nil {
		return err
	}
	restarted := time.Now()
	if err := c.StartKubelet(ctx); err != nil {
		return err
	}
	return c.waitNodeReadySince(ctx, restarted)
}

// stopComponent stops one component's process.
func (c *Cluster) stopComponent(name string, grace time.Duration) error {
	p := c.proc(name)
	if p == nil {
		return nil
	}
	if err := p.stop(grace); err != nil {
		return fmt.Errorf("stop %s: %w", name, err)
	}
	return nil
}

// WaitNodeReady waits until the node is Ready and schedulable: Ready
// condition True and no not-ready or unreachable taint.
func (c *Cluster) WaitNodeReady(ctx context.Context) error {
	return c.waitNodeReadySince(ctx, time.Time{})
}

// waitNodeReadySince waits for a Ready node; with a non-zero since, also for
// the node's lease to be renewed after since, i.e. by a kubelet that ran
// after that time (node heartbeats have only one-second resolution, lease
// renewals have microseconds).
func (c *Cluster) waitNodeReadySince(ctx context.Context, since time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.ReadyTimeout)
	defer cancel()
	return c.waitFor(ctx, "node "+c.opts.NodeName+" to be Ready", c.watchedProcs(), func(ctx context.Context) error {
		if !since.IsZero() {
			lease, err := c.clientset.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, c.opts.NodeName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if lease.Spec.RenewTime == nil || !lease.Spec.RenewTime.After(since) {
				return fmt.Errorf("node lease of %s not renewed since %s", c.opts.NodeName, since.Format(time.RFC3339Nano))
			}
		}
		node, err := c.clientset.CoreV1().Nodes().Get(ctx, c.opts.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		return nodeReady(node)
	})
}

// nodeReady checks readiness and schedulability of node.
func nodeReady(node *corev1.Node) error {
	var ready *corev1.NodeCondition
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == corev1.NodeReady {
			ready = &node.Status.Conditions[i]
		}
	}
	if ready == nil {
		return fmt.Errorf("node %s has no Ready condition yet", node.Name)
	}
	if ready.Status != corev1.ConditionTrue {
		return fmt.Errorf("node %s is not Ready: %s: %s", node.Name, ready.Reason, ready.Message)
	}
	for _, t := range node.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable || t.Key == corev1.TaintNodeUnschedulable {
			return fmt.Errorf("node %s still has taint %s", node.Name, t.ToString())
		}
	}
	if node.Spec.Unschedulable {
		return fmt.Errorf("node %s is cordoned", node.Name)
	}
	return nil
}

// waitClusterUsable waits for what a test's first pod needs: a Ready,
// untainted node, and the default service account and root CA ConfigMap that
// the controller manager creates in each namespace. It also gives the node a
// loopback InternalIP so that the API server can reach the kubelet (pod logs).
func (c *Cluster) waitClusterUsable(ctx context.Context) error {
	if err := c.setNodeAddress(ctx); err != nil {
		return err
	}
	if err := c.WaitNodeReady(ctx); err != nil {
		return err
	}
	return c.waitFor(ctx, "the default service account and kube-root-ca.crt", c.watchedProcs(), func(ctx context.Context) error {
		if _, err := c.clientset.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return err
		}
		_, err := c.clientset.CoreV1().ConfigMaps(metav1.NamespaceDefault).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err
	})
}

// setNodeAddress records 127.0.0.1 as the node's InternalIP. The kubelet
// refuses a loopback --node-ip and then leaves the addresses alone, so the
// value set here stays; without it the node has no address and the API
// server cannot reach the kubelet for logs.
func (c *Cluster) setNodeAddress(ctx context.Context) error {
	patch := fmt.Sprintf(`{"status":{"addresses":[{"type":"InternalIP","address":"127.0.0.1"},{"type":"Hostname","address":%q}]}}`, c.opts.NodeName)
	return c.waitFor(ctx, "the node address to be set", c.watchedProcs(), func(ctx context.Context) error {
		_, err := c.clientset.CoreV1().Nodes().Patch(ctx, c.opts.NodeName, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
		return err
	})
}

// watchedProcs are the running components; a wait fails early when one dies.
func (c *Cluster) watchedProcs() []*process {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ps []*process
	for _, p := range c.procs {
		if p.running() {
			ps = append(ps, p)
		}
	}
	return ps
}

// waitFor polls check until it succeeds, ctx ends or one of watch exits;
// errors carry the tail of the relevant component log.
func (c *Cluster) waitFor(ctx context.Context, what string, watch []*process, check func(context.Context) error) error {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		last := check(cctx)
		cancel()
		if last == nil {
			return nil
		}
		for _, p := range watch {
			if !p.running() {
				return fmt.Errorf("waiting for %s: %s %s; last lines of %s:\n%s",
					what, p.name, p.exitDescription(), p.logPath, tailFile(p.logPath, 30))
			}
		}
		select {
		case <-ctx.Done():
			var b strings.Builder
			fmt.Fprintf(&b, "timed out waiting for %s: %v (last check: %v)", what, ctx.Err(), last)
			for _, p := range watch {
				fmt.Fprintf(&b, "\nlast lines of %s:\n%s", p.logPath, tailFile(p.logPath, 15))
			}
			return errors.New(b.String())
		case <-tick.C:
		}
	}
}

// annotate adds the log directory to a start error.
func (c *Cluster) annotate(err error) error {
	if c.p.root == "" {
		return err
	}
	return fmt.Errorf("%w\n(component logs: %s)", err, c.p.logs)
}

// Stop stops every process the cluster started (kubelet first, removing all
// pods from the runtime, etcd last), unmounts what the kubelet and containerd
// mounted below the root, removes the pod cgroups, the root directory (unless
// KeepDir) and releases the machine lock. It is idempotent; later and
// concurrent calls wait for the first one and return its result.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		<-c.stopDone
		return c.stopErr
	}
	c.stopped = true
	if c.stopSignals != nil {
		close(c.stopSignals)
	}
	c.mu.Unlock()

	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	t0 := time.Now()
	add(c.stopComponent(compKubelet, 10*time.Second))
	if p := c.proc(compContainerd); p.running() {
		add(removeAllPods(c.p.containerdSocket))
	}
	var wg sync.WaitGroup
	errCM, errSched := error(nil), error(nil)
	wg.Add(2)
	go func() { defer wg.Done(); errCM = c.stopComponent(compCM, 10*time.Second) }()
	go func() { defer wg.Done(); errSched = c.stopComponent(compScheduler, 10*time.Second) }()
	wg.Wait()
	add(errCM)
	add(errSched)
	add(c.stopComponent(compContainerd, 10*time.Second))
	if c.p.containerdSocket != "" {
		add(killShims(c.p.containerdSocket))
	}
	if c.cgroupRoot != "" {
		add(killCgroup(c.cgroupRoot))
	}
	add(c.stopComponent(compAPIServer, 5*time.Second))
	add(c.stopComponent(compEtcd, 10*time.Second))
	if c.p.root != "" {
		if c.opts.KeepDir {
			add(unmountAll(c.p.root))
		} else {
			add(removeTree(c.p.root))
		}
	}
	if c.lock != nil {
		add(cleanDevicePluginDir())
		add(c.lock.release())
	}
	err := errors.Join(errs...)
	if err != nil {
		err = fmt.Errorf("stop cluster: %w", err)
	}
	c.logf("cluster %q stopped in %s", c.opts.NodeName, time.Since(t0).Round(100*time.Millisecond))
	c.stopErr = err
	close(c.stopDone)
	return err
}

// handleSignals stops the cluster on SIGINT or SIGTERM, then re-raises the
// signal with its default action so the process ends as it would have.
func (c *Cluster) handleSignals() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		defer signal.Stop(ch)
		select {
		case <-c.stopSignals:
			return
		case sig := <-ch:
			c.logf("got %s: stopping the cluster", sig)
			if err := c.Stop(); err != nil {
				c.logf("%v", err)
			}
			signal.Reset(sig)
			if s, ok := sig.(syscall.Signal); ok {
				_ = syscall.Kill(os.Getpid(), s)
			}
		}
	}()
}

// cleanupRecord removes what a cluster described by rec left behind after its
// owner died: component processes that still run, pod processes and shims,
// mounts and the root directory.
func cleanupRecord(rec lockRecord) error {
	var errs []error
	for _, lp := range rec.Components {
		if sameProcess(lp.PID, lp.Start) {
			if err := syscall.Kill(-lp.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("kill leftover %s (pid %d): %w", lp.Name, lp.PID, err))
			}
			for i := 0; i < 50 && sameProcess(lp.PID, lp.Start); i++ {
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
	if rec.Containerd != "" {
		errs = append(errs, killShims(rec.Containerd))
	}
	if rec.CgroupRoot != "" {
		errs = append(errs, killCgroup(rec.CgroupRoot))
	}
	if rec.Dir != "" {
		errs = append(errs, removeTree(rec.Dir))
	}
	errs = append(errs, cleanDevicePluginDir())
	return errors.Join(errs...)
}

// prepareDevicePluginDir makes sure no other kubelet serves the shared
// device-plugin directory and removes the previous cluster's checkpoint, so
// that a new kubelet does not inherit allocations of pods it never saw.
func prepareDevicePluginDir(ctx context.Context) error {
	if err := os.MkdirAll(DevicePluginDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", DevicePluginDir, err)
	}
	sock := filepath.Join(DevicePluginDir, "kubelet.sock")
	d := net.Dialer{Timeout: time.Second}
	if conn, err := d.DialContext(ctx, "unix", sock); err == nil {
		_ = conn.Close()
		return fmt.Errorf("another kubelet, not started by this package, serves %s; stop it first", sock)
	}
	return cleanDevicePluginDir()
}

// cleanDevicePluginDir removes the kubelet's own files from the shared
// device-plugin directory; device plugins' sockets are left to them.
func cleanDevicePluginDir() error {
	var errs []error
	for _, f := range []string{"kubelet.sock", "kubelet_internal_checkpoint"} {
		if err := os.Remove(filepath.Join(DevicePluginDir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("clean device-plugin dir: %w", err))
		}
	}
	return errors.Join(errs...)
}

// httpGet fetches url and returns the body; non-2xx statuses are errors.
func httpGet(ctx context.Context, tlsConfig *tls.Config, url string) (string, error) {
	tr := &http.Transport{TLSClientConfig: tlsConfig, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", fmt.Errorf("request %s: %w", url, err)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return "", fmt.Errorf("get %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", url, err)
	}
	if resp.StatusCode/100 != 2 {
		return string(body), fmt.Errorf("get %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return string(body), nil
}

// insecureTLS is for the health endpoints of the scheduler and controller
// manager, which serve self-signed certificates on 127.0.0.1.
func insecureTLS() *tls.Config {
	return &tls.Config{InsecureSkipVerify: true} //nolint:gosec // loopback health checks of self-signed components
}

// logf writes a timestamped progress line to Options.Log.
func (c *Cluster) logf(format string, args ...any) {
	fmt.Fprintf(c.logw, "%s carve-cluster: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// syncWriter serialises writes from concurrent start-up goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

// Kubeconfig returns the path of an admin kubeconfig (group system:masters).
func (c *Cluster) Kubeconfig() string { return c.p.adminKubeconfig }

// RESTConfig returns a copy of the admin client configuration.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.restConfig) }

// Clientset returns an admin clientset.
func (c *Cluster) Clientset() kubernetes.Interface { return c.clientset }

// NodeName returns the name of the cluster's only node.
func (c *Cluster) NodeName() string { return c.opts.NodeName }

// Dir returns the cluster's root directory.
func (c *Cluster) Dir() string { return c.p.root }

// APIServerURL returns the API server's URL, https://127.0.0.1:<port>.
func (c *Cluster) APIServerURL() string {
	return "https://127.0.0.1:" + strconv.Itoa(c.ports.apiserver)
}

// DevicePluginDir returns the kubelet's device-plugin directory (always
// DevicePluginDir); device plugins create their sockets here.
func (c *Cluster) DevicePluginDir() string { return DevicePluginDir }

// KubeletSocket returns the kubelet's device-plugin registration socket.
func (c *Cluster) KubeletSocket() string { return filepath.Join(DevicePluginDir, "kubelet.sock") }

// PodResourcesSocket returns the kubelet's PodResources API socket.
func (c *Cluster) PodResourcesSocket() string {
	return filepath.Join(c.p.kubeletRoot, "pod-resources", "kubelet.sock")
}

// ContainerdSocket returns the containerd socket (CRI and containerd API).
func (c *Cluster) ContainerdSocket() string { return c.p.containerdSocket }

// CDIDir returns the cluster's CDI spec directory, <root>/cdi, the only one
// containerd reads (not the host's /etc/cdi or /var/run/cdi). A container
// that asks for a CDI device (from a DRA driver's claim or a device
// plugin's Allocate answer) starts only if a spec here names the device:
// point a DRA driver's --cdi-dir here, or write the specs a device plugin
// relies on. containerd reads new and changed specs as they appear.
func (c *Cluster) CDIDir() string { return c.p.cdiDir }

// KubeletRootDir returns the kubelet's --root-dir.
func (c *Cluster) KubeletRootDir() string { return c.p.kubeletRoot }

// StartupTime is how long the last Start took from holding the machine lock
// to a usable cluster (the warm start time, without builds or installs).
func (c *Cluster) StartupTime() time.Duration { return c.startupTime }

// Components returns the names of the cluster's components, which are also
// the names their logs go by.
func Components() []string {
	return []string{compEtcd, compContainerd, compAPIServer, compCM, compScheduler, compKubelet}
}

// LogPath returns the log file of a component (see Components).
func (c *Cluster) LogPath(component string) string {
	return filepath.Join(c.p.logs, component+".log")
}

// LogTail returns the last n lines of a component's log.
func (c *Cluster) LogTail(component string, n int) string {
	return tailFile(c.LogPath(component), n)
}

// DumpLogs writes the last n lines of every component log to w.
func (c *Cluster) DumpLogs(w io.Writer, n int) {
	if _, err := os.Stat(c.p.logs); err != nil {
		fmt.Fprintf(w, "(no component logs: %s was removed by Stop; set CARVE_E2E_KEEP=1 or Options.KeepDir to keep it)\n", c.p.root)
		return
	}
	for _, comp := range Components() {
		fmt.Fprintf(w, "----- last %d lines of %s -----\n%s\n", n, c.LogPath(comp), c.LogTail(comp, n))
	}
}

// Endpoints returns every TCP address the cluster listens on by component,
// for checks that nothing is left listening after Stop.
func (c *Cluster) Endpoints() map[string]string {
	a := func(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }
	return map[string]string{
		"etcd":                    a(c.ports.etcd),
		"etcd-peer":               a(c.ports.etcdPeer),
		"kube-apiserver":          a(c.ports.apiserver),
		"kube-controller-manager": a(c.ports.controllerManager),
		"kube-scheduler":          a(c.ports.scheduler),
		"kubelet":                 a(c.ports.kubelet),
		"kubelet-healthz":         a(c.ports.kubeletHealthz),
	}
}

// PIDs returns the process id of each running component.
func (c *Cluster) PIDs() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := map[string]int{}
	for name, p := range c.procs {
		if p.running() {
			m[name] = p.pid()
		}
	}
	return m
}
