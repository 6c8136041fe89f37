// Package chartrender renders a Helm chart as `helm template` does, with
// Helm's own Go packages. It is apart from the harness so that programs
// built on the harness (carve-demo) do not compile Helm.
package chartrender

import (
	"fmt"
	"log/slog"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/carve-dev/carve/test/harness"
)

// Release is what Render renders a chart as: the release's name
// and namespace, the Kubernetes version, and the API versions the cluster
// is told it has (`helm template --api-versions`).
type Release struct {
	Name, Namespace, KubeVersion string
	APIVersions                  []string
}

// Render renders ch with vals as `helm template NAME CHART --namespace
// NAMESPACE --kube-version VERSION --api-versions ...` does, the values
// schema included, and returns the objects in Helm's order.
func Render(ch *chartv2.Chart, vals map[string]any, r Release) ([]*unstructured.Unstructured, error) {
	install := action.NewInstall(action.NewConfiguration(action.ConfigurationSetLogger(slog.DiscardHandler)))
	install.DryRunStrategy = action.DryRunClient
	install.Replace = true
	install.ReleaseName, install.Namespace = r.Name, r.Namespace
	kv, err := common.ParseKubeVersion(r.KubeVersion)
	if err != nil {
		return nil, fmt.Errorf("kube version %s: %w", r.KubeVersion, err)
	}
	install.KubeVersion = kv
	install.APIVersions = r.APIVersions
	rel, err := install.Run(ch, vals)
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", ch.Name(), err)
	}
	out, ok := rel.(*releasev1.Release)
	if !ok {
		return nil, fmt.Errorf("render %s: release of type %T", ch.Name(), rel)
	}
	return harness.DecodeObjects([]byte(out.Manifest))
}
