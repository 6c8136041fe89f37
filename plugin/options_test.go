package plugin

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/carve-dev/carve/xidpolicy"
)

func TestOptionsDefaults(t *testing.T) {
	m, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	o := m.opts
	if o.DevicePluginDir != "/var/lib/kubelet/device-plugins/" || o.KubeletSocket != "kubelet.sock" || o.CDIKind != "nvidia.com/gpu" {
		t.Errorf("paths/kinds: %q %q %q", o.DevicePluginDir, o.KubeletSocket, o.CDIKind)
	}
	if diff := cmp.Diff(xidpolicy.Default(), o.Health.Policy); diff != "" {
		t.Errorf("health policy defaults (-want +got):\n%s", diff)
	}
	if o.ReplicaPolicy.String() != "spread" || Pack.String() != "pack" {
		t.Errorf("policy names %q %q", o.ReplicaPolicy, Pack)
	}
	// An explicit empty ignore list ignores nothing.
	m, err = New(Options{Health: HealthOptions{Policy: xidpolicy.Policy{Ignored: []uint64{}, Quiet: time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	if c := m.opts.Health.Policy.Classify(13); c != xidpolicy.Critical {
		t.Errorf("XID 13 is %v with an empty ignore list, want critical", c)
	}
}

func TestOptionsInvalid(t *testing.T) {
	tests := []struct {
		name   string
		opts   Options
		errHas string
	}{
		{"unknown policy", Options{ReplicaPolicy: 7}, "replica policy"},
		{"backoff bounds", Options{Health: HealthOptions{MinBackoff: time.Second, MaxBackoff: time.Millisecond}}, "backoff"},
	}
	for _, tt := range tests {
		if _, err := New(tt.opts); err == nil || !strings.Contains(err.Error(), tt.errHas) {
			t.Errorf("%s: error %v, want one mentioning %q", tt.name, err, tt.errHas)
		}
	}
}

func TestMetricsSharedRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := New(Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Options{Registerer: reg})
	if err != nil {
		t.Fatalf("second Manager on one registry: %v", err)
	}
	a.metrics.allocations.WithLabelValues("r").Inc()
	b.metrics.allocations.WithLabelValues("r").Inc()
	if a.metrics.allocations != b.metrics.allocations {
		t.Error("the second Manager made its own allocations counter instead of reusing the registered one")
	}
	if got := testutil.ToFloat64(b.metrics.allocations.WithLabelValues("r")); got != 2 {
		t.Errorf("shared counter %v, want 2", got)
	}
	// One family on the registry, with the one series both incremented.
	if n, err := testutil.GatherAndCount(reg, "carve_device_plugin_allocations_total"); err != nil || n != 1 {
		t.Errorf("registry holds %d allocations series (err %v), want 1", n, err)
	}
}
