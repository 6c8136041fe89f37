package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/kube"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/test/cluster"
	"github.com/carve-dev/carve/test/harness"
)

const (
	// helmChart is the chart the test installs.
	helmChart = "../../charts/carve"
	// helmRelease is the release; its objects are helmRelease-agent and so
	// on, not configs/deploy's carve-agent.
	helmRelease = "carve-e2e"
	// helmNS is the namespace the test creates and installs into.
	helmNS = "carve-helm-e2e"
	// helmPods selects the release's agent pods.
	helmPods = agentPods + ",app.kubernetes.io/instance=" + helmRelease
)

// TestHelmInstallUpgradeUninstall installs charts/carve with Helm's Go
// action package, its default profile file included, into a new namespace
// of the local cluster (simulated DGX H100 partitioned as NVIDIA's MIG
// manager leaves it, the cluster's kubelet paths, host network) and
// checks that the DaemonSet becomes Ready and the node's MIG devices are
// adopted and advertised with no GPU change; upgrades the release with another defaultProfile in
// profiles.data and checks that the same agent pod, never restarted and
// with its DaemonSet not rolled, realises and advertises it; uninstalls
// and checks that no object of the release is left (namespaced and
// cluster-scoped), that the agent pod and its device-plugin sockets are
// gone, and that the node keeps carve's labels and annotation.
func TestHelmInstallUpgradeUninstall(t *testing.T) {
	c := suite.Cluster(t)
	cs := c.Clientset()
	ctx := testCtx(t, 15*time.Minute)
	freshNode(t, c)
	node := c.NodeName()

	t0 := time.Now()
	importAgentImage(ctx, t, c)
	t.Logf("built and imported %s in %s", agentImage, time.Since(t0).Round(100*time.Millisecond))
	stateDir := t.TempDir()
	simState := filepath.Join(stateDir, simStateFile)
	migManagerLayout(t, simState, "dgx-h100")
	before := readIdentity(t, simState)
	// Created before the release, so that it is removed after the pod.
	vals := helmValues(t, c, stateDir, freePort(t))
	delete(vals, "profiles") // the chart's default profile file
	labelGPUNode(ctx, t, cs, node)
	createHelmNamespace(ctx, t, cs)
	cfg := helmConfig(t, c)
	ch, err := loader.Load(helmChart)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}

	t0 = time.Now()
	manifest := helmInstall(ctx, t, c, cfg, ch, vals)
	pod := waitHelmPodReady(ctx, t, cs, node)
	checkAdopted(ctx, t, c, simState, before, map[string]int64{mig3g: 16})
	t.Logf("installed with default values: pod %s Ready, the MIG manager's layout adopted and advertised, untouched, %s after helm install",
		pod.Name, time.Since(t0).Round(100*time.Millisecond))
	helmPolicyDeniesHold(ctx, t, c, pod)

	t0 = time.Now()
	helmUpgradeProfiles(ctx, t, c, cfg, ch, vals, pod)
	t.Logf("upgraded: profile all-1g realised and advertised by the same pod %s after helm upgrade", time.Since(t0).Round(100*time.Millisecond))
	helmUpgradeKeepsProfiles(ctx, t, c, cfg, ch, vals)

	t0 = time.Now()
	helmUninstall(ctx, t, c, cfg, manifest)
	t.Logf("uninstalled: every object, the pod and its sockets gone %s after helm uninstall", time.Since(t0).Round(100*time.Millisecond))
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Labels[carvev1.LabelState] != carvev1.StateSuccess || n.Labels[carvev1.LabelApplied] != "all-1g" || n.Annotations[carvev1.AnnotationRecord] == "" {
		t.Errorf("after uninstall the node has %s=%q, %s=%q and %s set %v; uninstall leaves them",
			carvev1.LabelState, n.Labels[carvev1.LabelState], carvev1.LabelApplied, n.Labels[carvev1.LabelApplied],
			carvev1.AnnotationRecord, n.Annotations[carvev1.AnnotationRecord] != "")
	}
	pruneAfterUninstall(ctx, t, c, n)
}

// helmPolicyDeniesHold checks the chart's admission policy on the real API
// server with the credentials of the release's agent: a token of its
// ServiceAccount bound to its pod may write carve's state label (a dry
// run), and may not write the operator's carve.dev/hold.
func helmPolicyDeniesHold(ctx context.Context, t *testing.T, c *cluster.Cluster, pod *corev1.Pod) {
	t.Helper()
	cs := c.Clientset()
	hour := int64(3600)
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &hour,
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}}
	tok, err := cs.CoreV1().ServiceAccounts(helmNS).CreateToken(ctx, pod.Spec.ServiceAccountName, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s/%s: %v", helmNS, pod.Spec.ServiceAccountName, err)
	}
	agentCS := tokenClient(t, c, tok.Status.Token)
	dry := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
	if _, err := agentCS.CoreV1().Nodes().Patch(ctx, c.NodeName(), types.MergePatchType, []byte(labelPatch(carvev1.LabelState, carvev1.StateSuccess)), dry); err != nil {
		t.Fatalf("the chart's agent writing %s (dry run): %v", carvev1.LabelState, err)
	}
	policy := helmRelease + "-agent-node-writes"
	waitNamedPolicyInForce(ctx, t, agentCS, c.NodeName(), policy)
	_, err = agentCS.CoreV1().Nodes().Patch(ctx, c.NodeName(), types.MergePatchType, []byte(labelPatch(carvev1.LabelHold, carvev1.HoldTrue)), dry)
	prefix := fmt.Sprintf("ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s", policy, policy, ruleLabels)
	if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), prefix) || !strings.HasSuffix(err.Error(), ", not "+carvev1.LabelHold) {
		t.Errorf("the chart's agent writing %s=%s (dry run): %v; want a denial by %s that starts %q and ends %q",
			carvev1.LabelHold, carvev1.HoldTrue, err, policy, prefix, ", not "+carvev1.LabelHold)
	}
}

// pruneAfterUninstall runs `carvectl prune` as docs/operate.md says once
// carve is uninstalled: every label carve wrote on the node (its carve.dev/
// state labels and the GPU labels its record lists) and its annotation are
// gone, and the labels carve did not write are all still there.
func pruneAfterUninstall(ctx context.Context, t *testing.T, c *cluster.Cluster, before *corev1.Node) {
	t.Helper()
	rec, err := carvev1.DecodeNodeRecord(before.Annotations[carvev1.AnnotationRecord])
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Labels) == 0 {
		t.Fatal("the record lists no label carve wrote")
	}
	bin := buildCarvectl(ctx, t)
	out, err := exec.CommandContext(ctx, bin, "prune", "--kubeconfig", c.Kubeconfig(), "--node", before.Name).CombinedOutput()
	if err != nil {
		t.Fatalf("carvectl prune: %v\n%s", err, out)
	}
	n, err := c.Clientset().CoreV1().Nodes().Get(ctx, before.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := n.Annotations[carvev1.AnnotationRecord]; ok {
		t.Errorf("annotation %s left after carvectl prune:\n%s", carvev1.AnnotationRecord, out)
	}
	for k, v := range before.Labels {
		mine := carvev1.Owns(&rec, k)
		if got, ok := n.Labels[k]; mine && ok {
			t.Errorf("label %s=%s left after carvectl prune", k, got)
		} else if !mine && (!ok || got != v) {
			t.Errorf("carvectl prune changed label %s (%q -> %q), which carve did not write", k, v, got)
		}
	}
}

// helmValues are the chart values for the local cluster, what
// localDaemonSet changes in configs/deploy's DaemonSet: the e2e image,
// never pulled; simulated GPUs whose state survives a restart in the state
// directory; the cluster's kubelet paths; stateDir as the state hostPath;
// host network with the API server named by KUBERNETES_SERVICE_HOST/PORT;
// the metrics port. They go through JSON as a values file would.
func helmValues(t *testing.T, c *cluster.Cluster, stateDir string, metricsPort int) map[string]any {
	t.Helper()
	host, apiPort, err := net.SplitHostPort(strings.TrimPrefix(c.APIServerURL(), "https://"))
	if err != nil {
		t.Fatal(err)
	}
	i := strings.LastIndex(agentImage, ":")
	vals := map[string]any{
		"image":       map[string]any{"repository": agentImage[:i], "tag": agentImage[i+1:], "pullPolicy": "Never"},
		"gpus":        "sim:dgx-h100",
		"extraArgs":   []string{"--sim-state=/var/lib/carve/" + simStateFile},
		"hostNetwork": true,
		"extraEnv": []map[string]string{
			{"name": "KUBERNETES_SERVICE_HOST", "value": host},
			{"name": "KUBERNETES_SERVICE_PORT", "value": apiPort},
		},
		"kubelet":  map[string]any{"devicePluginDir": c.DevicePluginDir(), "podResourcesDir": filepath.Dir(c.PodResourcesSocket())},
		"stateDir": stateDir,
		"metrics":  map[string]any{"port": metricsPort},
		"profiles": map[string]any{"data": readExample(t)},
	}
	raw, err := json.Marshal(vals)
	if err != nil {
		t.Fatal(err)
	}
	v, err := common.ReadValues(raw)
	if err != nil {
		t.Fatal(err)
	}
	return v.AsMap()
}

// labelGPUNode puts the label the chart's default affinity asks for on the
// node, until the test ends.
func labelGPUNode(ctx context.Context, t *testing.T, cs kubernetes.Interface, node string) {
	t.Helper()
	if err := harness.SetNodeLabels(ctx, cs, node, map[string]string{gpuPresent: "true"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := harness.SetNodeLabels(context.Background(), cs, node, map[string]string{gpuPresent: ""}); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
}

// createHelmNamespace creates helmNS, labelled for privileged pods as
// docs/helm.md says, and deletes it when the test ends, waiting until it
// is gone. A namespace left by an earlier run fails the test.
func createHelmNamespace(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: helmNS,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s (left by an earlier run?): %v", helmNS, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := cs.CoreV1().Namespaces().Delete(ctx, helmNS, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("cleanup: delete namespace %s: %v", helmNS, err)
			return
		}
		if err := harness.WaitNamespaceGone(ctx, cs, helmNS, 2*time.Minute); err != nil {
			t.Errorf("cleanup: namespace %s still there: %v", helmNS, err)
		}
	})
}

// helmConfig is Helm's action configuration for the cluster's admin
// kubeconfig and helmNS, releases stored as Secrets (Helm's default); Helm
// logs warnings and errors to the test's output.
func helmConfig(t *testing.T, c *cluster.Cluster) *action.Configuration {
	t.Helper()
	kubeconfig, ns := c.Kubeconfig(), helmNS
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig, flags.Namespace = &kubeconfig, &ns
	cfg := action.NewConfiguration(action.ConfigurationSetLogger(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err := cfg.Init(flags, helmNS, "secret"); err != nil {
		t.Fatalf("helm configuration: %v", err)
	}
	return cfg
}

// manifestOf returns the release's rendered manifest.
func manifestOf(t *testing.T, rel any) string {
	t.Helper()
	r, ok := rel.(*releasev1.Release)
	if !ok {
		t.Fatalf("helm returned a release of type %T", rel)
	}
	return r.Manifest
}

// helmInstall installs the release (`helm install carve-e2e charts/carve
// -n carve-helm-e2e`) and returns its manifest. Until helmUninstall has
// run, the end of the test uninstalls it and waits for the agent to go.
func helmInstall(ctx context.Context, t *testing.T, c *cluster.Cluster, cfg *action.Configuration, ch *chartv2.Chart, vals map[string]any) string {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		uninstall := action.NewUninstall(cfg)
		uninstall.WaitStrategy = kube.HookOnlyStrategy
		uninstall.IgnoreNotFound = true
		if _, err := uninstall.Run(helmRelease); err != nil {
			t.Errorf("cleanup: helm uninstall %s: %v", helmRelease, err)
		}
		if err := waitHelmAgentGone(ctx, c, nil); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace = helmRelease, helmNS
	install.WaitStrategy, install.Timeout = kube.HookOnlyStrategy, 2*time.Minute
	rel, err := install.RunWithContext(ctx, ch, vals)
	if err != nil {
		t.Fatalf("helm install %s: %v", helmRelease, err)
	}
	return manifestOf(t, rel)
}

// waitHelmPodReady waits until the release's only agent pod runs on the
// node and is Ready (through its readiness probe), and the DaemonSet
// counts it ready and available.
func waitHelmPodReady(ctx context.Context, t *testing.T, cs kubernetes.Interface, node string) *corev1.Pod {
	t.Helper()
	return waitDaemonSetPodReady(ctx, t, cs, helmNS, helmRelease+"-agent", helmPods, node)
}

// helmUpgradeProfiles upgrades the release with profiles.data making
// all-1g the default profile, and checks that the agent realises and
// advertises it without being restarted or its DaemonSet rolled: the
// ConfigMap is the only object that changes.
func helmUpgradeProfiles(ctx context.Context, t *testing.T, c *cluster.Cluster, cfg *action.Configuration, ch *chartv2.Chart, vals map[string]any, pod *corev1.Pod) {
	t.Helper()
	cs := c.Clientset()
	ds, err := cs.AppsV1().DaemonSets(helmNS).Get(ctx, helmRelease+"-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	data := strings.Replace(readExample(t), "\ndefaultProfile: full\n", "\ndefaultProfile: all-1g\n", 1)
	if data == readExample(t) {
		t.Fatal("configs/examples/profiles.yaml has no line defaultProfile: full to change")
	}
	vals["profiles"] = map[string]any{"data": data}
	upgrade := action.NewUpgrade(cfg)
	upgrade.Namespace = helmNS
	upgrade.WaitStrategy, upgrade.Timeout = kube.HookOnlyStrategy, 2*time.Minute
	if _, err := upgrade.RunWithContext(ctx, helmRelease, ch, vals); err != nil {
		t.Fatalf("helm upgrade %s: %v", helmRelease, err)
	}
	cm, err := cs.CoreV1().ConfigMaps(helmNS).Get(ctx, helmRelease+"-profiles", metav1.GetOptions{})
	if err != nil || cm.Data["profiles.yaml"] != data {
		t.Fatalf("after the upgrade the ConfigMap does not hold the new profiles (%v)", err)
	}
	waitState(ctx, t, c, carvev1.StateSuccess, "all-1g")
	waitAllocatable(ctx, t, cs, c.NodeName(), map[string]int64{mig1g: 56})

	after, err := cs.AppsV1().DaemonSets(helmNS).Get(ctx, ds.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.Generation != ds.Generation {
		t.Errorf("the upgrade changed the DaemonSet (generation %d -> %d): a profile change must not roll it", ds.Generation, after.Generation)
	}
	p, err := cs.CoreV1().Pods(helmNS).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the agent pod from before the upgrade: %v", err)
	}
	if p.UID != pod.UID || len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("agent pod %s (uid %s, was %s), container statuses %+v: want the same pod, never restarted",
			p.Name, p.UID, pod.UID, p.Status.ContainerStatuses)
	}
}

// helmUpgradeKeepsProfiles edits the profile ConfigMap outside Helm (as
// `kubectl edit` would) and upgrades without profiles.data: the ConfigMap
// keeps the edited file; the chart never puts its sample back.
func helmUpgradeKeepsProfiles(ctx context.Context, t *testing.T, c *cluster.Cluster, cfg *action.Configuration, ch *chartv2.Chart, vals map[string]any) {
	t.Helper()
	cms := c.Clientset().CoreV1().ConfigMaps(helmNS)
	cm, err := cms.Get(ctx, helmRelease+"-profiles", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	edited := cm.Data["profiles.yaml"] + "# edited with kubectl\n"
	cm.Data["profiles.yaml"] = edited
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	delete(vals, "profiles")
	upgrade := action.NewUpgrade(cfg)
	upgrade.Namespace = helmNS
	upgrade.WaitStrategy, upgrade.Timeout = kube.HookOnlyStrategy, 2*time.Minute
	if _, err := upgrade.RunWithContext(ctx, helmRelease, ch, vals); err != nil {
		t.Fatalf("helm upgrade %s without profiles.data: %v", helmRelease, err)
	}
	got, err := cms.Get(ctx, cm.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Data["profiles.yaml"] != edited {
		t.Errorf("helm upgrade without profiles.data replaced the edited profiles with\n%s", got.Data["profiles.yaml"])
	}
}

// helmUninstall uninstalls the release and checks that every object of
// its manifest is gone (namespaced and cluster-scoped), as are the agent
// pod, its device-plugin sockets and Helm's release records.
func helmUninstall(ctx context.Context, t *testing.T, c *cluster.Cluster, cfg *action.Configuration, manifest string) {
	t.Helper()
	objs, err := harness.DecodeObjects([]byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, o := range objs {
		kinds[o.GetKind()] = true
	}
	for _, k := range []string{"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding",
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "ConfigMap", "DaemonSet", "Service"} {
		if !kinds[k] {
			t.Errorf("the release has no %s", k)
		}
	}
	uninstall := action.NewUninstall(cfg)
	uninstall.WaitStrategy, uninstall.Timeout = kube.HookOnlyStrategy, 2*time.Minute
	if _, err := uninstall.Run(helmRelease); err != nil {
		t.Fatalf("helm uninstall %s: %v", helmRelease, err)
	}
	if err := waitHelmAgentGone(ctx, c, objs); err != nil {
		t.Fatal(err)
	}
	secrets, err := c.Clientset().CoreV1().Secrets(helmNS).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=" + helmRelease})
	if err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) > 0 {
		t.Errorf("%d release records of %s left after uninstall", len(secrets.Items), helmRelease)
	}
}

// waitHelmAgentGone waits until every object of objs is gone, then until no
// agent pod of the release is left, then checks that the agent removed
// its device-plugin sockets on its way out.
func waitHelmAgentGone(ctx context.Context, c *cluster.Cluster, objs []*unstructured.Unstructured) error {
	cs := c.Clientset()
	objects, err := harness.NewObjects(c.RESTConfig(), cs)
	if err != nil {
		return err
	}
	if err := waitObjectsGone(ctx, objects, objs); err != nil {
		return err
	}
	return waitAgentPodsGone(ctx, cs, helmNS, helmPods)
}

// waitObjectsGone waits until the API server has none of objs.
func waitObjectsGone(ctx context.Context, objects *harness.Objects, objs []*unstructured.Unstructured) error {
	var left []string
	err := harness.Poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		left = left[:0]
		for _, o := range objs {
			r, err := objects.For(o)
			if err != nil {
				return false, err
			}
			_, err = r.Get(ctx, o.GetName(), metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return false, harness.Retry(err)
			default:
				left = append(left, o.GetKind()+" "+o.GetName())
			}
		}
		return len(left) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("objects of the release left after uninstall: %v: %w", left, err)
	}
	return nil
}
