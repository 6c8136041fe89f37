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
		{"bad advertise", "advertise: both", []string{"/advertise", "device-plugin"}},
		{"relative kubelet root", "kubelet: {rootDir: var/lib/kubelet}", []string{"/kubelet/rootDir"}},
		{"relative CDI directory", "dra: {cdiDir: run/cdi}", []string{"/dra/cdiDir"}},
		{"misspelt dra key", "dra: {extendedResource: {gpu: true}}", []string{"/dra", "extendedResource"}},
		{"bad MIG profile", "dra: {extendedResources: {migProfiles: [1g10gb]}}", []string{"/dra/extendedResources/migProfiles/0"}},
		{"MIG profile as a resource name", "dra: {extendedResources: {migProfiles: [mig-1g.10gb]}}", []string{"/dra/extendedResources/migProfiles/0"}},
		{"MIG profile twice", "dra: {extendedResources: {migProfiles: [1g.10gb, 1g.10gb]}}", []string{"/dra/extendedResources/migProfiles"}},
		{"extended resources without dra", "dra: {extendedResources: {gpu: true}}", []string{"dra.extendedResources", "advertise: dra"}},
		{"MIG extended resources without dra", "advertise: device-plugin\ndra: {extendedResources: {migProfiles: [1g.10gb]}}", []string{"dra.extendedResources"}},
		{"cdi with dra", "advertise: dra\ncdi: true", []string{"cdi", "advertise: dra"}},
		{"bad pull policy", "image: {pullPolicy: Sometimes}", []string{"/image/pullPolicy"}},
		{"bad log level", "logLevel: verbose", []string{"/logLevel"}},
		{"runbook base without a scheme", "prometheusRule: {runbookBaseURL: docs.example.com/carve/}", []string{"/prometheusRule/runbookBaseURL"}},
		{"runbook base not ending in /", "prometheusRule: {runbookBaseURL: \"https://docs.example.com/carve\"}", []string{"/prometheusRule/runbookBaseURL"}},
		{"every namespace and one more", "rbac: {evictionNamespaces: [\"*\", team-a]}", []string{"/rbac/evictionNamespaces"}},
		{"a namespace that cannot be", "rbac: {evictionNamespaces: [Team_A]}", []string{"/rbac/evictionNamespaces"}},
		{"eviction namespaces as a string", "rbac: {evictionNamespaces: team-a}", []string{"/rbac/evictionNamespaces"}},
		{"surge: two agents on a node", "updateStrategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 1}}", []string{"/updateStrategy/rollingUpdate", "maxSurge"}},
		{"negative port", "metrics: {port: -1}", []string{"/metrics/port", "minimum"}},
		{"port too large", "metrics: {port: 70000}", []string{"/metrics/port", "maximum"}},
		{"port as a string", "metrics: {port: \"9465\"}", []string{"/metrics/port", "integer"}},
		{"bad gpus", "gpus: nvidia", []string{"/gpus"}},
		{"relative host path", "stateDir: var/lib/carve", []string{"/stateDir"}},
		{"bad operand list", "pauseOperands: \"dcgm, dcgm-exporter\"", []string{"/pauseOperands"}},
		{"XID list with a space", "xid: {ignored: \"13, 31\"}", []string{"/xid/ignored"}},
		{"XID zero", "xid: {recoverable: \"0\"}", []string{"/xid/recoverable"}},
		{"XID quiet period in words", "xid: {recoveryQuiet: 5 minutes}", []string{"/xid/recoveryQuiet"}},
		{"XID taint effect of node taints", "xid: {taintCritical: PreferNoSchedule}", []string{"/xid/taintCritical"}},
		{"misspelt XID key", "xid: {recoverible: \"94\"}", []string{"/xid", "recoverible"}},
		{"unknown toleration field", "tolerations: [{key: a, operater: Exists}]", []string{"/tolerations/0", "operater"}},
		{"existing ConfigMap without a name", "profiles: {create: false}", []string{"profiles.name"}},
		{"ServiceAccount not created, no name", "serviceAccount: {create: false}", []string{"serviceAccount.name"}},
		{"ServiceMonitor without the Service", "metrics: {service: {enabled: false}, serviceMonitor: {enabled: true}}", []string{"metrics.serviceMonitor.enabled"}},
		{"ServiceMonitor and PodMonitor", "metrics: {serviceMonitor: {enabled: true}, podMonitor: {enabled: true}}", []string{"metrics.podMonitor.enabled"}},

		{"good: advertise none", "advertise: none", nil},
		{"good: advertise dra", "advertise: dra", nil},
		{"good: dra without DeviceClasses", "advertise: dra\ndra: {deviceClasses: false}", nil},
		{"good: extended resources only", "advertise: dra\ndra: {deviceClasses: false, extendedResources: {gpu: true}}", nil},
		{"good: dra without admission policy", "advertise: dra\nadmissionPolicy: {enabled: false}", nil},
		{"good: MIG variants", "advertise: dra\ndra: {extendedResources: {migProfiles: [1g.24gb+me.all, 1g.24gb-me, 4g.96gb+gfx]}}", nil},
		{"good: port", "metrics: {port: 1}", nil},
		{"good: existing ConfigMap", "profiles: {create: false, name: p}", nil},
		{"good: ServiceAccount not created", "serviceAccount: {create: false, name: gpu-agent}", nil},
		{"good: operands none", "pauseOperands: none", nil},
		{"good: XID policy", "xid: {ignored: \"\", recoverable: \"48,94\", recoveryQuiet: 1h30m, taintRecoverable: None, taintCritical: NoExecute}", nil},
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
