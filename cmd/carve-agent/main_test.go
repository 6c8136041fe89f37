package main

import (
	"errors"
	"flag"
	"go/build"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/gpus"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/xidpolicy"
)

// defaultOptions are the options of --node-name NODE and nothing else.
func defaultOptions(node string) options {
	return options{nodeName: node, configMapNamespace: "carve-system", configMapName: "carve-profiles", gpus: "nvml",
		advertise: "device-plugin", kubeletRootDir: "/var/lib/kubelet", cdiDir: "/var/run/cdi", devicePluginDir: "/var/lib/kubelet/device-plugins", podResourcesSocket: "/var/lib/kubelet/pod-resources/kubelet.sock",
		stateDir: "/var/lib/carve", metricsAddr: ":9465", simLatency: "none", logLevel: slog.LevelInfo,
		profileLabel: "carve.dev/profile", gfdLabels: true, pauseOperands: []string{"gpu-feature-discovery", "dcgm-exporter", "dcgm", "nvsm", "client"},
		shutdownTimeout: DefaultShutdownTimeout, xidPolicy: xidpolicy.Default()}
}

// noneOperands are the operands paused by default with --advertise none:
// NVIDIA's device plugin too.
func noneOperands() []string {
	return []string{"device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm", "nvsm", "client"}
}

// wantOptions checks that the options are defaultOptions(node) changed by
// mod.
func wantOptions(node string, mod func(o *options)) func(t *testing.T, o options) {
	return func(t *testing.T, o options) {
		t.Helper()
		want := defaultOptions(node)
		mod(&want)
		if diff := cmp.Diff(want, o, cmp.AllowUnexported(options{})); diff != "" {
			t.Fatalf("options (-want +got):\n%s", diff)
		}
	}
}

func TestParseOptions(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(t *testing.T, o options)
		wantErr bool
		errText string // the whole error message, when checked
	}{
		{name: "defaults", args: []string{"--node-name", "n1"}, check: wantOptions("n1", func(*options) {})},
		{
			name: "environment",
			env: map[string]string{"NODE_NAME": "n2", "KUBECONFIG": "/k", "CARVE_CONFIG_MAP": "ns/cm", "CARVE_GPUS": "sim:dgx-h100",
				"CARVE_SIM_STATE": "/s.json", "CARVE_STATE_DIR": "/st", "CARVE_METRICS_ADDR": ":1", "CARVE_LOG_LEVEL": "debug",
				"CARVE_DEVICE_PLUGIN_DIR": "/dp", "CARVE_POD_RESOURCES_SOCKET": "/pr.sock", "CARVE_SIM_LATENCY": "realistic",
				"CARVE_PROFILE_LABEL": "nvidia.com/mig.config", "CARVE_MIG_MANAGER_STATE_LABEL": "true", "CARVE_GFD_LABELS": "false", "CARVE_CDI": "1",
				"CARVE_PAUSE_OPERANDS": "none", "CARVE_ADVERTISE": "device-plugin", "CARVE_SHUTDOWN_TIMEOUT": "1m",
				"CARVE_XID_IGNORED": "13", "CARVE_XID_RECOVERABLE": "94,48", "CARVE_XID_RECOVERY_QUIET": "90s",
				"CARVE_XID_TAINT_RECOVERABLE": "None", "CARVE_XID_TAINT_CRITICAL": "NoExecute"},
			check: func(t *testing.T, o options) {
				t.Helper()
				want := options{nodeName: "n2", kubeconfig: "/k", configMapNamespace: "ns", configMapName: "cm", gpus: "sim:dgx-h100",
					simState: "/s.json", simLatency: "realistic", advertise: "device-plugin", kubeletRootDir: "/var/lib/kubelet", cdiDir: "/var/run/cdi", devicePluginDir: "/dp", podResourcesSocket: "/pr.sock", stateDir: "/st", metricsAddr: ":1",
					logLevel: slog.LevelDebug, profileLabel: "nvidia.com/mig.config", migManagerState: true, cdi: true, shutdownTimeout: time.Minute,
					xidPolicy: xidpolicy.Policy{Ignored: []uint64{13}, Recoverable: []uint64{48, 94}, Quiet: 90 * time.Second, RecoverableTaint: xidpolicy.EffectNone, CriticalTaint: xidpolicy.NoExecute}}
				if diff := cmp.Diff(want, o, cmp.AllowUnexported(options{})); diff != "" {
					t.Fatalf("options (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "flags beat environment",
			args: []string{"--node-name", "flag", "--gpus", "sim:a30x4"},
			env:  map[string]string{"NODE_NAME": "env", "CARVE_GPUS": "nvml"},
			check: func(t *testing.T, o options) {
				t.Helper()
				if o.nodeName != "flag" || o.gpus != "sim:a30x4" {
					t.Fatalf("options %+v", o)
				}
			},
		},
		{name: "node name missing", args: nil, wantErr: true},
		{name: "bad config map", args: []string{"--node-name", "n", "--config-map", "justname"}, wantErr: true},
		{name: "bad gpus", args: []string{"--node-name", "n", "--gpus", "cuda"}, wantErr: true},
		{name: "sim state with real GPUs", args: []string{"--node-name", "n", "--sim-state", "/x"}, wantErr: true},
		{
			name: "NVIDIA label flags",
			args: []string{"--node-name", "n", "--profile-label", "nvidia.com/mig.config", "--mig-manager-state-label", "--gfd-labels=false"},
			check: func(t *testing.T, o options) {
				t.Helper()
				if o.profileLabel != "nvidia.com/mig.config" || !o.migManagerState || o.gfdLabels {
					t.Fatalf("options %+v", o)
				}
			},
		},
		{
			name: "XID policy flags",
			args: []string{"--node-name", "n", "--xid-ignored=", "--xid-recoverable", "79", "--xid-recovery-quiet", "1h", "--xid-taint-critical", "NoExecute"},
			check: wantOptions("n", func(o *options) {
				o.xidPolicy = xidpolicy.Policy{Ignored: []uint64{}, Recoverable: []uint64{79}, Quiet: time.Hour, RecoverableTaint: xidpolicy.NoSchedule, CriticalTaint: xidpolicy.NoExecute}
			}),
		},
		{name: "XID in two classes", args: []string{"--node-name", "n", "--xid-recoverable", "31,79"}, wantErr: true,
			errText: `--xid-recoverable "31,79": XID 31 is also in --xid-ignored "13,31,43,45,68,109": an XID has one class`},
		{name: "bad XID", args: []string{"--node-name", "n", "--xid-ignored", "13,abc"}, wantErr: true,
			errText: `--xid-ignored "13,abc": "abc" is not an XID: want a number from 1 to 65535`},
		{name: "bad quiet period", args: []string{"--node-name", "n", "--xid-recovery-quiet", "soon"}, wantErr: true,
			errText: `--xid-recovery-quiet "soon": want a duration such as 5m`},
		{name: "zero quiet period", args: []string{"--node-name", "n", "--xid-recovery-quiet", "0s"}, wantErr: true,
			errText: `--xid-recovery-quiet 0s: want a duration above 0 and at most 168h0m0s`},
		{name: "bad taint effect", args: []string{"--node-name", "n", "--xid-taint-recoverable", "PreferNoSchedule"}, wantErr: true,
			errText: `--xid-taint-recoverable "PreferNoSchedule": want NoSchedule, NoExecute or None`},
		{name: "a profile label carve writes", args: []string{"--node-name", "n", "--profile-label", "carve.dev/state"}, wantErr: true,
			errText: `--profile-label: profile label "carve.dev/state": a key carve writes itself; an operator's label must be another (carve.dev/profile, nvidia.com/mig.config, or one of your own)`},
		{
			name: "operands",
			args: []string{"--node-name", "n", "--pause-operands", "dcgm-exporter,nvsm"},
			check: func(t *testing.T, o options) {
				t.Helper()
				if diff := cmp.Diff([]string{"dcgm-exporter", "nvsm"}, o.pauseOperands); diff != "" {
					t.Fatalf("pauseOperands (-want +got):\n%s", diff)
				}
			},
		},
		{name: "no operands", args: []string{"--node-name", "n", "--advertise", "none", "--pause-operands", "none"},
			check: wantOptions("n", func(o *options) { o.advertise, o.pauseOperands = "none", nil })},
		{name: "operands named with advertise none", args: []string{"--node-name", "n", "--advertise", "none", "--pause-operands", "dcgm"},
			check: wantOptions("n", func(o *options) { o.advertise, o.pauseOperands = "none", []string{"dcgm"} })},
		{name: "an empty operand list is the default", args: []string{"--node-name", "n", "--advertise", "dra", "--pause-operands="},
			check: wantOptions("n", func(o *options) { o.advertise = "dra" })},
		{name: "a bad operand", args: []string{"--node-name", "n", "--pause-operands", "dcgm,,x"}, wantErr: true,
			errText: `--pause-operands "dcgm,,x": an empty operand name`},
		{name: "a bad boolean in the environment", args: []string{"--node-name", "n"}, env: map[string]string{"CARVE_GFD_LABELS": "maybe"}, wantErr: true,
			errText: `CARVE_GFD_LABELS="maybe": want true or false`},
		{
			name: "sim latency",
			args: []string{"--node-name", "n", "--gpus", "sim:a30x4", "--sim-latency", "create-gi=1s,reset-gpu=5s"},
			check: func(t *testing.T, o options) {
				t.Helper()
				if o.simLatency != "create-gi=1s,reset-gpu=5s" {
					t.Fatalf("simLatency %q", o.simLatency)
				}
			},
		},
		{name: "sim latency with real GPUs", args: []string{"--node-name", "n", "--sim-latency", "200ms"},
			wantErr: true, errText: "--sim-latency works with simulated GPUs only (--gpus sim:<machine>)"},
		{name: "sim latency none with real GPUs", args: []string{"--node-name", "n", "--sim-latency", "none"}},
		{name: "bad sim latency", args: []string{"--node-name", "n", "--gpus", "sim:a30x4", "--sim-latency", "x"},
			wantErr: true, errText: `--sim-latency "x": want none, realistic, a duration (200ms) or op=duration pairs (create-gi=1s,reset-gpu=5s)`},
		{name: "bad sim latency in the environment", args: []string{"--node-name", "n", "--gpus", "sim:a30x4"},
			env: map[string]string{"CARVE_SIM_LATENCY": "-2s"}, wantErr: true, errText: `--sim-latency "-2s": negative duration`},
		{
			name: "cdi",
			args: []string{"--node-name", "n", "--cdi"},
			check: func(t *testing.T, o options) {
				t.Helper()
				if !o.cdi {
					t.Fatal("--cdi did not enable CDI")
				}
			},
		},
		{
			name: "cdi from the environment",
			args: []string{"--node-name", "n"},
			env:  map[string]string{"CARVE_CDI": "true"},
			check: func(t *testing.T, o options) {
				t.Helper()
				if !o.cdi {
					t.Fatal("CARVE_CDI=true did not enable CDI")
				}
			},
		},
		{name: "bad cdi", args: []string{"--node-name", "n", "--cdi=maybe"}, wantErr: true},
		{name: "bad cdi in the environment", args: []string{"--node-name", "n"}, env: map[string]string{"CARVE_CDI": "maybe"}, wantErr: true},
		{name: "advertise none", args: []string{"--node-name", "n", "--advertise", "none"},
			check: wantOptions("n", func(o *options) { o.advertise, o.pauseOperands = "none", noneOperands() })},
		{name: "advertise none from the environment", args: []string{"--node-name", "n"}, env: map[string]string{"CARVE_ADVERTISE": "none"},
			check: wantOptions("n", func(o *options) { o.advertise, o.pauseOperands = "none", noneOperands() })},
		{name: "advertise flag beats environment", args: []string{"--node-name", "n", "--advertise=device-plugin"}, env: map[string]string{"CARVE_ADVERTISE": "none"},
			check: wantOptions("n", func(*options) {})},
		{name: "advertise none keeps the device plugin dir", args: []string{"--node-name", "n", "--advertise", "none", "--device-plugin-dir", "/dp"},
			check: wantOptions("n", func(o *options) { o.advertise, o.devicePluginDir, o.pauseOperands = "none", "/dp", noneOperands() })},
		{name: "advertise dra", args: []string{"--node-name", "n", "--advertise", "dra", "--kubelet-root-dir", "/k", "--cdi-dir", "/c"},
			check: wantOptions("n", func(o *options) { o.advertise, o.kubeletRootDir, o.cdiDir = "dra", "/k", "/c" })},
		{name: "advertise dra from the environment", args: []string{"--node-name", "n"},
			env:   map[string]string{"CARVE_ADVERTISE": "dra", "CARVE_KUBELET_ROOT_DIR": "/k", "CARVE_CDI_DIR": "/c"},
			check: wantOptions("n", func(o *options) { o.advertise, o.kubeletRootDir, o.cdiDir = "dra", "/k", "/c" })},
		{name: "advertise both", args: []string{"--node-name", "n", "--advertise", "both"}, wantErr: true,
			errText: "--advertise both: one node cannot advertise its GPUs through the device plugin and DRA at once: the kubelet would hand a device to a pod through one path while a claim holds it through the other; choose device-plugin, dra, none"},
		{name: "cdi with advertise dra", args: []string{"--node-name", "n", "--cdi", "--advertise", "dra"}, wantErr: true,
			errText: "--cdi with --advertise dra: the DRA driver always answers with CDI devices (a spec per claim in --cdi-dir); --cdi is for the device plugin's Allocate answers: drop it"},
		{name: "bad advertise", args: []string{"--node-name", "n", "--advertise", "nvidia"}, wantErr: true,
			errText: `--advertise "nvidia": want device-plugin, dra or none`},
		{name: "advertise in the wrong case", args: []string{"--node-name", "n", "--advertise", "None"}, wantErr: true,
			errText: `--advertise "None": want device-plugin, dra or none`},
		{name: "empty advertise", args: []string{"--node-name", "n", "--advertise="}, wantErr: true,
			errText: `--advertise "": want device-plugin, dra or none`},
		{name: "cdi with advertise none", args: []string{"--node-name", "n", "--cdi", "--advertise", "none"}, wantErr: true,
			errText: "--cdi with --advertise none: CDI device names are part of carve's Allocate answers, and with none carve answers none; drop --cdi and configure CDI in the device plugin that advertises"},
		{name: "cdi from the environment with advertise none", args: []string{"--node-name", "n"},
			env: map[string]string{"CARVE_CDI": "true", "CARVE_ADVERTISE": "none"}, wantErr: true},
		{name: "cdi false with advertise none", args: []string{"--node-name", "n", "--cdi=false", "--advertise", "none"},
			check: wantOptions("n", func(o *options) { o.advertise, o.pauseOperands = "none", noneOperands() })},
		{name: "pod resources socket none", args: []string{"--node-name", "n", "--pod-resources-socket", "none"},
			check: wantOptions("n", func(o *options) { o.podResourcesSocket = "none" })},
		{name: "pod resources socket none from the environment", args: []string{"--node-name", "n", "--advertise", "none"},
			env:   map[string]string{"CARVE_POD_RESOURCES_SOCKET": "none"},
			check: wantOptions("n", func(o *options) { o.advertise, o.podResourcesSocket, o.pauseOperands = "none", "none", noneOperands() })},
		{name: "bad log level", args: []string{"--node-name", "n", "--log-level", "loud"}, wantErr: true},
		{name: "stray argument", args: []string{"--node-name", "n", "extra"}, wantErr: true},
		{name: "unknown flag", args: []string{"--node", "n"}, wantErr: true},
		// --version needs nothing else and checks nothing else: it prints
		// the build and exits, even where the settings are wrong.
		{name: "version", args: []string{"--version"}, env: map[string]string{"CARVE_LOG_LEVEL": "loud", "CARVE_ADVERTISE": "nope"},
			check: func(t *testing.T, o options) {
				t.Helper()
				if !o.version {
					t.Error("version not set")
				}
			}},
		{name: "version with a stray argument", args: []string{"--version", "extra"}, wantErr: true},
		{name: "shutdown timeout", args: []string{"--node-name", "n1", "--shutdown-timeout", "2m"},
			check: wantOptions("n1", func(o *options) { o.shutdownTimeout = 2 * time.Minute })},
		{name: "shutdown timeout from the environment", env: map[string]string{"NODE_NAME": "n1", "CARVE_SHUTDOWN_TIMEOUT": "45s"},
			check: wantOptions("n1", func(o *options) { o.shutdownTimeout = 45 * time.Second })},
		{name: "shutdown timeout zero", args: []string{"--node-name", "n1", "--shutdown-timeout", "0s"}, wantErr: true,
			errText: `--shutdown-timeout "0s": want a positive duration such as 150s`},
		{name: "shutdown timeout not a duration", args: []string{"--node-name", "n1", "--shutdown-timeout", "2"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseOptions(tt.args, func(k string) string { return tt.env[k] }, io.Discard)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if tt.errText != "" {
				if diff := cmp.Diff(tt.errText, err.Error()); diff != "" {
					t.Errorf("error (-want +got):\n%s", diff)
				}
			}
			if tt.check != nil {
				tt.check(t, o)
			}
		})
	}
}

// discard is a logger that logs nothing.
func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// Without a loaded driver the agent gets its GPUs behind a released Gate
// (it starts and waits for the driver) instead of an error.
func TestOpenGPUsWithoutDriver(t *testing.T) {
	lib, use, err := openGPUs("nvml", gpus.Options{}, discard())
	if err != nil {
		t.Fatalf("without a driver: %v, want no error", err)
	}
	if use == lib {
		t.Skip("this machine has an NVIDIA driver")
	}
	g, ok := use.(*partition.Gate)
	if !ok || !g.Released() {
		t.Fatalf("without a driver: GPUs %T, want a released *partition.Gate", use)
	}
	if err := g.Reacquire(); err == nil {
		t.Error("reacquired a driver that is not there")
	}
}

func TestOpenGPUsKeepsSimState(t *testing.T) {
	state := filepath.Join(t.TempDir(), "sim.json")
	lib, _, err := openGPUs("sim:h100-80gb*1", gpus.Options{SimState: state}, discard())
	if err != nil {
		t.Fatal(err)
	}
	d, err := lib.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetMIGMode(partition.MIGEnabled); err != nil {
		t.Fatal(err)
	}
	_ = lib.Shutdown()
	again, _, err := openGPUs("sim:h100-80gb*1", gpus.Options{SimState: state}, discard())
	if err != nil {
		t.Fatal(err)
	}
	inv, err := partition.ReadInventory(again)
	if err != nil {
		t.Fatal(err)
	}
	if inv[0].PendingMIGMode != partition.MIGEnabled {
		t.Fatal("simulator state not kept across a restart")
	}
	if _, _, err := openGPUs(sim.Prefix+"no-such-machine", gpus.Options{}, discard()); err == nil {
		t.Fatal("unknown machine accepted")
	}
}

func TestOpenGPUsWithSimLatency(t *testing.T) {
	const d = 20 * time.Millisecond
	lib, _, err := openGPUs("sim:h100-80gb*1", gpus.Options{SimLatency: d.String()}, discard())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lib.Shutdown() }()
	dev, err := lib.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := dev.SetMIGMode(partition.MIGEnabled); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < d {
		t.Errorf("SetMIGMode with --sim-latency %s took %s", d, took)
	}
}

func TestServeMux(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "carve_test_total", Help: "test"}))
	var ready atomic.Bool
	srv := httptest.NewServer(newServeMux(reg, ready.Load))
	defer srv.Close()
	get := func(path string) int {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode
	}
	tests := []struct {
		path  string
		ready bool
		want  int
	}{
		{"/healthz", false, http.StatusOK},
		{"/readyz", false, http.StatusServiceUnavailable},
		{"/readyz", true, http.StatusOK},
		{"/metrics", false, http.StatusOK},
	}
	for _, tt := range tests {
		ready.Store(tt.ready)
		if got := get(tt.path); got != tt.want {
			t.Errorf("GET %s (ready %v) = %d, want %d", tt.path, tt.ready, got, tt.want)
		}
	}
}

// TestTestHooksOnlyWithTheBuildTag checks which files a build of this
// command compiles: the fault-injection hooks only with the carve_testhooks
// tag, so the default binary does not contain them.
func TestTestHooksOnlyWithTheBuildTag(t *testing.T) {
	tests := []struct {
		tags []string
		want []string // the testhooks*.go files compiled
	}{
		{nil, []string{"testhooks_off.go"}},
		{[]string{"carve_testhooks"}, []string{"testhooks.go"}},
	}
	for _, tt := range tests {
		ctx := build.Default
		ctx.BuildTags = tt.tags
		pkg, err := ctx.ImportDir(".", 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range pkg.GoFiles {
			if strings.HasPrefix(f, "testhooks") {
				got = append(got, f)
			}
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("tags %v: compiles %v, want %v", tt.tags, got, tt.want)
		}
	}
}

// awaitShutdown waits for the agent and says in one line what it waited
// for and how long; past its timeout it gives up with errShutdownTimeout.
func TestAwaitShutdown(t *testing.T) {
	var buf strings.Builder
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	done := make(chan error, 1)
	go func() {
		time.Sleep(50 * time.Millisecond)
		done <- nil
	}()
	if err := awaitShutdown(done, "GPU 0 op 3 reset-gpu", time.Minute, log); err != nil {
		t.Fatalf("awaitShutdown: %v", err)
	}
	line := buf.String()
	for _, want := range []string{`"msg":"shutdown: stopped"`, `"waitedFor":"the GPU operation in flight: GPU 0 op 3 reset-gpu"`, `"took":"`} {
		if !strings.Contains(line, want) {
			t.Errorf("log %q lacks %s", line, want)
		}
	}
	if n := strings.Count(line, "\n"); n != 1 {
		t.Errorf("%d log lines, want one:\n%s", n, line)
	}

	hung := make(chan error)
	start := time.Now()
	err := awaitShutdown(hung, "GPU 1 op 1 reset-gpu", 100*time.Millisecond, log)
	if !errors.Is(err, errShutdownTimeout) || !strings.Contains(err.Error(), "GPU 1 op 1 reset-gpu") {
		t.Errorf("a hung agent: %v, want %v naming the op in flight", err, errShutdownTimeout)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("gave up after %s, want about the timeout", took)
	}
}

// TestEveryFlagDocumented: each flag carve-agent has is a row of
// docs/reference.md's table of flags, with its environment variable.
func TestEveryFlagDocumented(t *testing.T) {
	var usage strings.Builder
	if _, err := parseOptions([]string{"--help"}, func(string) string { return "" }, &usage); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "reference.md"))
	if err != nil {
		t.Fatal(err)
	}
	flags := regexp.MustCompile(`(?m)^  -([a-z][-a-z]*)`).FindAllStringSubmatch(usage.String(), -1)
	if len(flags) < 20 {
		t.Fatalf("only %d flags found in the usage text:\n%s", len(flags), usage.String())
	}
	envs := regexp.MustCompile(`\[([A-Z_]+)\]`)
	for _, f := range flags {
		name := f[1]
		row := "| `--" + name + "` |"
		_, line, found := strings.Cut(string(doc), row)
		if !found {
			t.Errorf("docs/reference.md has no row %s", row)
			continue
		}
		line, _, _ = strings.Cut(line, "\n")
		_, rest, _ := strings.Cut(usage.String(), "  -"+name+" ")
		rest, _, _ = strings.Cut(rest, "\n  -")
		if m := envs.FindStringSubmatch(rest); m != nil && !strings.Contains(line, "`"+m[1]+"`") {
			t.Errorf("docs/reference.md's row of --%s lacks its environment variable %s", name, m[1])
		}
	}
}
