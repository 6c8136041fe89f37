package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/kubeclient/clientset"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/plugin"
	"github.com/carve-dev/carve/timeslice"
)

func TestCheckAdvertise(t *testing.T) {
	tests := []struct {
		mode string
		want string // the error, "" for none
	}{
		{"", ""},
		{AdvertiseDevicePlugin, ""},
		{AdvertiseNone, ""},
		{AdvertiseDRA, ""},
		{"both", "both: one node cannot advertise its GPUs through the device plugin and DRA at once: the kubelet would hand a device to a pod through one path while a claim holds it through the other; choose device-plugin, dra, none"},
		{"devicePlugin", `"devicePlugin": want device-plugin, dra or none`},
		{"NONE", `"NONE": want device-plugin, dra or none`},
		{" none", `" none": want device-plugin, dra or none`},
	}
	for _, tt := range tests {
		got := ""
		if err := CheckAdvertise(tt.mode); err != nil {
			got = err.Error()
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("CheckAdvertise(%q) error (-want +got):\n%s", tt.mode, diff)
		}
	}
}

func TestNoAdvertiser(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	res := timeslice.Resources{"nvidia.com/gpu": {{ID: "GPU-0", UUID: "GPU-0", GPUUUID: "GPU-0", Replica: -1, Replicas: 1}}}
	tests := []struct {
		name string
		call func(Advertiser) error
	}{
		{"Update", func(a Advertiser) error { return a.Update(context.Background(), res) }},
		{"Update nothing", func(a Advertiser) error { return a.Update(context.Background(), nil) }},
		// Nothing waits on the kubelet, so an ended context changes nothing.
		{"Update after the context ended", func(a Advertiser) error { return a.Update(canceled, res) }},
		{"Withdraw", func(a Advertiser) error { return a.Withdraw(context.Background(), []string{"GPU-0", "MIG-1"}) }},
		{"Withdraw after the context ended", func(a Advertiser) error { return a.Withdraw(canceled, []string{"GPU-0"}) }},
	}
	for _, tt := range tests {
		if err := tt.call(NoAdvertiser{}); err != nil {
			t.Errorf("%s: %v, want nil", tt.name, err)
		}
	}
}

func TestNothingInUse(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, ctx := range []context.Context{context.Background(), canceled} {
		got, err := NothingInUse{}.InUse(ctx)
		if err != nil {
			t.Fatalf("InUse: %v", err)
		}
		// The same answer as the kubelet's when no pod holds a device:
		// empty, not nil, lists.
		want := &plugin.InUse{Assignments: []plugin.Assignment{}, UUIDs: []string{}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("InUse (-want +got):\n%s", diff)
		}
		js, err := json.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(`{"assignments":[],"uuids":[]}`, string(js)); diff != "" {
			t.Errorf("InUse as JSON (-want +got):\n%s", diff)
		}
		if got.Holds("GPU-0") || len(got.Set()) != 0 || got.Holding([]string{"GPU-0"}) != nil {
			t.Errorf("InUse %+v holds something", got)
		}
	}
}

// newAgentConfig is a Config for node-1 on a simulated H100 with a fake
// API server holding the Node and the profile ConfigMap, the Node pinned
// to profile.
func newAgentConfig(t *testing.T, profile string) (Config, *fake.Clientset) {
	t.Helper()
	m, err := sim.New("h100-80gb*1")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Init(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown() })
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{carvev1.LabelProfile: profile}}}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "carve-system", Name: "carve-profiles"},
		Data: map[string]string{ConfigKey: testProfiles}}
	client := fake.NewClientset(node, cm)
	return Config{
		NodeName: "node-1", Client: clientset.Wrap(client), ConfigMapNamespace: "carve-system", ConfigMapName: "carve-profiles",
		GPUs: m, DevicePluginDir: filepath.Join(t.TempDir(), "device-plugins"), StateDir: t.TempDir(),
		Logger: slog.New(slog.DiscardHandler),
	}, client
}

func TestNewAdvertise(t *testing.T) {
	// built is what New made of a Config.
	type built struct {
		Plugin  bool   // a plugin.Manager to run
		Devices string // the Reconciler's Advertiser
		InUse   string // the Reconciler's InUseSource
		Err     string
	}
	tests := []struct {
		name string
		mod  func(*Config)
		want built
	}{
		{"default", func(*Config) {}, built{Plugin: true, Devices: "*plugin.Manager", InUse: "*plugin.PodResourcesClient"}},
		{"device-plugin", func(c *Config) { c.Advertise = AdvertiseDevicePlugin },
			built{Plugin: true, Devices: "*plugin.Manager", InUse: "*plugin.PodResourcesClient"}},
		{"device-plugin with CDI", func(c *Config) { c.Advertise, c.CDI = AdvertiseDevicePlugin, true },
			built{Plugin: true, Devices: "*plugin.Manager", InUse: "*plugin.PodResourcesClient"}},
		{"none", func(c *Config) { c.Advertise = AdvertiseNone },
			built{Devices: "agent.NoAdvertiser", InUse: "*plugin.PodResourcesClient"}},
		{"no kubelet", func(c *Config) { c.PodResourcesSocket = PodResourcesNone },
			built{Plugin: true, Devices: "*plugin.Manager", InUse: "agent.NothingInUse"}},
		{"none and no kubelet", func(c *Config) { c.Advertise, c.PodResourcesSocket = AdvertiseNone, PodResourcesNone },
			built{Devices: "agent.NoAdvertiser", InUse: "agent.NothingInUse"}},
		{"none with CDI", func(c *Config) { c.Advertise, c.CDI = AdvertiseNone, true },
			built{Err: "agent: CDI names are part of carve's Allocate answers, and with Advertise none carve answers no Allocate: configure CDI in the device plugin that advertises"}},
		{"dra", func(c *Config) { c.Advertise = AdvertiseDRA },
			built{Devices: "*dra.Driver", InUse: "agent.claimsInUse"}},
		{"dra with CDI", func(c *Config) { c.Advertise, c.CDI = AdvertiseDRA, true },
			built{Err: "agent: CDI is how the DRA driver always answers (a CDI spec per claim); the CDI setting is for the device plugin's Allocate answers: drop it with Advertise dra"}},
		{"unknown", func(c *Config) { c.Advertise = "nvidia" }, built{Err: `agent: Advertise "nvidia": want device-plugin, dra or none`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, _ := newAgentConfig(t, "full")
			tt.mod(&cfg)
			var got built
			a, err := New(cfg)
			if err != nil {
				got.Err = err.Error()
			} else {
				got.Plugin = a.plugin != nil
				got.Devices = fmt.Sprintf("%T", a.ctrl.Reconciler.Devices)
				got.InUse = fmt.Sprintf("%T", a.ctrl.Reconciler.InUse)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("New (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRunWithoutAdvertising runs an agent with Advertise none on a node
// without a kubelet: it partitions and records the node as usual, and never
// touches the device-plugin directory (carve's device plugin would create
// it).
func TestRunWithoutAdvertising(t *testing.T) {
	cfg, client := newAgentConfig(t, "balanced")
	cfg.Advertise, cfg.PodResourcesSocket = AdvertiseNone, PodResourcesNone
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			return errors.New("Run did not return 30 s after its context ended")
		}
	}
	defer func() { _ = stop() }()

	// A MIG change: the planner asks which devices are in use, which a
	// PodResources client would fail to answer here.
	n := waitNode(t, client, "balanced applied", func(n *corev1.Node) bool {
		return n.Labels[carvev1.LabelApplied] == "balanced" && n.Labels[carvev1.LabelState] == carvev1.StateSuccess
	})
	if got := n.Labels["nvidia.com/mig-1g.10gb.count"]; got != "2" {
		t.Errorf("nvidia.com/mig-1g.10gb.count = %q, want 2 (labels %v)", got, n.Labels)
	}
	rec, err := carvev1.DecodeNodeRecord(n.Annotations[carvev1.AnnotationRecord])
	if err != nil || rec.Profile != "balanced" {
		t.Errorf("node record %+v, %v", rec, err)
	}
	waitEvent(t, client, carvev1.ReasonRepartitioned)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := os.Stat(cfg.DevicePluginDir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("device-plugin dir %s: %v, want it never created", cfg.DevicePluginDir, err)
	}
}

// waitEvent polls the fake API server until it has an Event with reason
// (the broadcaster sends them on its own time).
func waitEvent(t *testing.T, client *fake.Clientset, reason string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		events, err := client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events.Items {
			if e.Reason == reason {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s Event among %d", reason, len(events.Items))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
