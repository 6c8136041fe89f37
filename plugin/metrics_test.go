package plugin

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

// Both values of critical exist at 0 before any XID, so that rate() and
// alerts see the first one; a second Manager on the registry keeps them.
func TestMetricsXIDSeriesFromTheStart(t *testing.T) {
	reg := prometheus.NewRegistry()
	for i := range 2 {
		if _, err := New(Options{Registerer: reg}); err != nil {
			t.Fatal(err)
		}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, mf := range mfs {
			if mf.GetName() != "carve_device_plugin_xid_events_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					got[l.GetName()+"="+l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
		if diff := cmp.Diff(map[string]float64{"critical=true": 0, "critical=false": 0}, got); diff != "" {
			t.Errorf("Manager %d: XID series (-want +got):\n%s", i+1, diff)
		}
	}
}
