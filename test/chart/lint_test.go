package chart

import (
	"testing"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
)

// TestLint runs Helm's linter (helm lint --strict) on the chart with its
// default values and with each values file of the golden set and of the
// kustomize comparison: no error and no warning.
func TestLint(t *testing.T) {
	names := []string{"kustomize-base", "kustomize-gpu-operator", "kustomize-dra"}
	for _, tc := range goldenCases() {
		names = append(names, tc.name)
	}
	kv, err := common.ParseKubeVersion(kubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			lint := action.NewLint()
			lint.Strict = true
			lint.Namespace = namespace
			lint.KubeVersion = kv
			res := lint.Run([]string{chartDir}, readValues(t, name))
			if res.TotalChartsLinted != 1 {
				t.Errorf("linted %d charts, want 1", res.TotalChartsLinted)
			}
			for _, err := range res.Errors {
				t.Errorf("lint: %v", err)
			}
			for _, m := range res.Messages {
				if m.Severity > support.InfoSev {
					t.Errorf("lint %s: %s", m.Path, m.Err)
				} else {
					t.Logf("lint (info) %s: %s", m.Path, m.Err)
				}
			}
		})
	}
}
