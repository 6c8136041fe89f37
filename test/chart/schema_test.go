package chart

import (
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
)

// TestBadValuesFail renders the chart with values that are wrong (schema
// or the templates' own checks) and requires an error naming the field;
// good values next to them render objects that decode strictly.
func TestBadValuesFail(t *testing.T) {
	ch := loadChart(t)
	for _, tc := range []struct {
		name, values string
		// wantErr are substrings of the error; none: the values render.
		wantErr []string
	}{
		{"misspelt top-level key", "imagee: {tag: v1}", []string{"additional properties", "imagee"}},
		{"misspelt nested key", "profiles: {craete: false}", []string{"/profiles", "craete"}},
		{"misspelt deeply nested key", "metrics: {serviceMonitor: {intervall: 1m}}", []string{"/metrics/serviceMonitor", "intervall"}},
		{"wrong type", "hostNetwork: \"yes\"", []string{"/hostNetwork", "boolean"}},
		{"wrong type of a list", "extraArgs: --cdi", []string{"/extraArgs", "array"}},
		{"bad advertise", "advertise: dra", []string{"/advertise", "device-plugin"}},
		{"bad pull policy", "image: {pullPolicy: Sometimes}", []string{"/image/pullPolicy"}},
		{"bad log level", "logLevel: verbose", []string{"/logLevel"}},
		{"negative port", "metrics: {port: -1}", []string{"/metrics/port", "minimum"}},
		{"port too large", "metrics: {port: 70000}", []string{"/metrics/port", "maximum"}},
		{"port as a string", "metrics: {port: \"9465\"}", []string{"/metrics/port", "integer"}},
		{"bad gpus", "gpus: nvidia", []string{"/gpus"}},
		{"relative host path", "stateDir: var/lib/carve", []string{"/stateDir"}},
		{"bad operand list", "pauseOperands: \"dcgm, dcgm-exporter\"", []string{"/pauseOperands"}},
		{"unknown toleration field", "tolerations: [{key: a, operater: Exists}]", []string{"/tolerations/0", "operater"}},
		{"existing ConfigMap without a name", "profiles: {create: false}", []string{"profiles.name"}},
		{"ServiceAccount not created, no name", "serviceAccount: {create: false}", []string{"serviceAccount.name"}},
		{"ServiceMonitor without the Service", "metrics: {service: {enabled: false}, serviceMonitor: {enabled: true}}", []string{"metrics.serviceMonitor.enabled"}},
		{"ServiceMonitor and PodMonitor", "metrics: {serviceMonitor: {enabled: true}, podMonitor: {enabled: true}}", []string{"metrics.podMonitor.enabled"}},

		{"good: advertise none", "advertise: none", nil},
		{"good: port", "metrics: {port: 1}", nil},
		{"good: existing ConfigMap", "profiles: {create: false, name: p}", nil},
		{"good: ServiceAccount not created", "serviceAccount: {create: false, name: gpu-agent}", nil},
		{"good: operands none", "pauseOperands: none", nil},
		{"good: OnDelete", "updateStrategy: {type: OnDelete}", nil},
		{"good: no affinity", "affinity: null", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals, err := common.ReadValues([]byte(tc.values))
			if err != nil {
				t.Fatal(err)
			}
			objs, err := render(ch, vals.AsMap())
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("%s: %v", tc.values, err)
			case tc.wantErr == nil:
				for _, o := range objs {
					if err := checkTyped(o); err != nil {
						t.Error(err)
					}
				}
				return
			case err == nil:
				t.Fatalf("%s rendered, want an error with %q", tc.values, tc.wantErr)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%s: error %q lacks %q", tc.values, err, want)
				}
			}
		})
	}
}
