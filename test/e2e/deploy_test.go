package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/carve-dev/carve/test/cluster"
	"github.com/carve-dev/carve/test/harness"
)

const (
	deployDir         = "../../configs/deploy"
	profilesDir       = deployDir + "/profiles"
	installedProfiles = "../../charts/carve/files/profiles.yaml"
	deployNS          = "carve-system"
	deploySA          = "carve-agent"
	profilesCM        = "carve-profiles"
	metricsService    = "carve-agent-metrics"
)

// renderDeploy renders what an install with kustomize creates, as
// `kubectl apply -k configs/deploy` and `kubectl create -k
// configs/deploy/profiles` would, with the kubectl the test cluster was
// built with: the agent's objects and the sample profile ConfigMap.
func renderDeploy(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	return append(renderKustomize(t, deployDir), renderKustomize(t, profilesDir)...)
}

// renderKustomize renders a kustomization directory as `kubectl apply -k`
// would.
func renderKustomize(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	kubectl := kubectlPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, kubectl, "kustomize", dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v: %s", dir, err, stderr.String())
	}
	objs, err := harness.DecodeObjects(out)
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v", dir, err)
	}
	return objs
}

// TestDeployConfigMapMatchesTheChart: the sample ConfigMap's source,
// configs/deploy/profiles/profiles.yaml (kustomize loads no file outside
// its directory), is the chart's files/profiles.yaml byte for byte, so
// the two ways to install carve install the same file (which selects no
// node: the configs package tests that). Needs no cluster; TestDeployManifestsOnAPIServer checks
// the rendered ConfigMap too.
func TestDeployConfigMapMatchesTheChart(t *testing.T) {
	want, err := os.ReadFile(installedProfiles)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(profilesDir, "profiles.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("configs/deploy/profiles/profiles.yaml differs from charts/carve/files/profiles.yaml; run: cp configs/deploy/profiles/profiles.yaml charts/carve/files/profiles.yaml")
	}
	var k struct {
		ConfigMapGenerator []struct {
			Name    string   `json:"name"`
			Files   []string `json:"files"`
			Options struct {
				DisableNameSuffixHash bool `json:"disableNameSuffixHash"`
			} `json:"options"`
		} `json:"configMapGenerator"`
	}
	raw, err := os.ReadFile(filepath.Join(profilesDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sigsyaml.Unmarshal(raw, &k); err != nil {
		t.Fatal(err)
	}
	if len(k.ConfigMapGenerator) != 1 || k.ConfigMapGenerator[0].Name != profilesCM ||
		len(k.ConfigMapGenerator[0].Files) != 1 || k.ConfigMapGenerator[0].Files[0] != "profiles.yaml" ||
		!k.ConfigMapGenerator[0].Options.DisableNameSuffixHash {
		t.Errorf("kustomization.yaml: want one configMapGenerator %s from files [profiles.yaml] with disableNameSuffixHash, got %+v", profilesCM, k.ConfigMapGenerator)
	}
}

// TestDeployKeepsTheOperatorsProfiles: configs/deploy and its overlays
// render no ConfigMap, so re-applying them never replaces the operator's
// profiles; the sample is configs/deploy/profiles alone, one ConfigMap.
// Needs no cluster; TestDeployReapplyOnAPIServer does it with kubectl.
func TestDeployKeepsTheOperatorsProfiles(t *testing.T) {
	for _, dir := range []string{deployDir, deployDir + "/gpu-operator", draDeployDir} {
		for _, o := range renderKustomize(t, dir) {
			if o.GetKind() == "ConfigMap" {
				t.Errorf("%s renders ConfigMap %s/%s: re-applying it would replace the operator's", dir, o.GetNamespace(), o.GetName())
			}
		}
	}
	objs := renderKustomize(t, profilesDir)
	if len(objs) != 1 || harness.FindObject(objs, "ConfigMap", profilesCM) == nil {
		t.Errorf("%s renders %d objects, want only ConfigMap %s", profilesDir, len(objs), profilesCM)
	}
	renderedConfigMapIsInstalledFile(t, objs)
}

// renderedConfigMapIsInstalledFile checks the rendered sample ConfigMap.
func renderedConfigMapIsInstalledFile(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	want, err := os.ReadFile(installedProfiles)
	if err != nil {
		t.Fatal(err)
	}
	cm := harness.FindObject(objs, "ConfigMap", profilesCM)
	if cm == nil {
		return // reported by the caller
	}
	if cm.GetNamespace() != deployNS {
		t.Errorf("ConfigMap %s in namespace %q, want %q", profilesCM, cm.GetNamespace(), deployNS)
	}
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	if len(data) != 1 || data["profiles.yaml"] != string(want) {
		t.Errorf("rendered ConfigMap %s/%s: data keys %d, data[profiles.yaml] equal to %s: %v", deployNS, profilesCM, len(data), installedProfiles, data["profiles.yaml"] == string(want))
	}
}

// TestDeployManifestsOnAPIServer applies every object an install renders
// (configs/deploy and configs/deploy/profiles)
// to the real kube-apiserver with a server-side dry run (schema, defaulting,
// admission, and the compilation of the admission policy's CEL), then
// creates the Namespace, ServiceAccount, RBAC and admission policy for real
// and checks that the ServiceAccount may do exactly what the agent does and
// nothing more, and that the policy's expressions type-check against Nodes.
func TestDeployManifestsOnAPIServer(t *testing.T) {
	c := suite.Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := c.Clientset()
	dc := newDeployClient(ctx, t, c)
	create := dc.create
	objs := renderDeploy(t)
	renderedConfigMapIsInstalledFile(t, objs)
	checkDaemonSet(t, objs)
	for _, want := range []struct{ kind, name string }{
		{"Namespace", deployNS}, {"ServiceAccount", deploySA}, {"Role", deploySA}, {"RoleBinding", deploySA},
		{"ClusterRole", deploySA}, {"ClusterRoleBinding", deploySA}, {"DaemonSet", deploySA}, {"ConfigMap", profilesCM},
		{"ValidatingAdmissionPolicy", nodePolicy}, {"ValidatingAdmissionPolicyBinding", nodePolicy},
		{"Service", metricsService},
	} {
		if harness.FindObject(objs, want.kind, want.name) == nil {
			t.Errorf("configs/deploy renders no %s %s", want.kind, want.name)
		}
	}
	if len(objs) != 11 {
		t.Errorf("configs/deploy and configs/deploy/profiles render %d objects, want 11", len(objs))
	}

	// The Namespace first: namespaced objects, even in a dry run, need it.
	ns := harness.FindObject(objs, "Namespace", deployNS)
	if ns == nil {
		t.FailNow()
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, deployNS, metav1.GetOptions{}); err == nil {
		t.Fatalf("namespace %s already exists; a previous run did not clean up", deployNS)
	}
	if err := create(ns, true); err != nil {
		t.Fatalf("dry run Namespace %s: %v", deployNS, err)
	}
	created := dryRunInNamespace(t, cs, dc, ns, objs)
	if t.Failed() {
		return
	}
	// Everything but the DaemonSet for real: the RBAC checks need the
	// ServiceAccount, roles and bindings, and the watch check the ConfigMap.
	for _, o := range objs {
		if o == ns || o.GetKind() == "DaemonSet" {
			continue
		}
		if err := create(o, false); err != nil {
			t.Fatalf("create %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
		*created = append(*created, o)
	}

	user, groups := serviceAccountUser(deployNS, deploySA)
	node := c.NodeName()
	// The first review may race the RBAC cache; wait until the binding shows.
	deadline := time.Now().Add(30 * time.Second)
	for !allowed(ctx, t, cs, user, groups, agentNeeds(node)[0]) && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	checkAccess(ctx, t, cs, user, groups, node)
	checkPolicyTypes(ctx, t, cs)

	// The informers' real requests, as the ServiceAccount: a list and a
	// watch of the ConfigMap with the field selector metadata.name, which
	// the Role's resourceNames allows, and a plain list, which it does not.
	cfg := c.RESTConfig()
	cfg.Impersonate.UserName = user
	cfg.Impersonate.Groups = groups
	as, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	byName := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", profilesCM).String()}
	l, err := as.CoreV1().ConfigMaps(deployNS).List(ctx, byName)
	if err != nil {
		t.Errorf("list ConfigMaps %s with %s as %s: %v", deployNS, byName.FieldSelector, user, err)
	} else if len(l.Items) != 1 {
		t.Errorf("list ConfigMaps %s with %s: %d items, want 1", deployNS, byName.FieldSelector, len(l.Items))
	}
	w, err := as.CoreV1().ConfigMaps(deployNS).Watch(ctx, byName)
	if err != nil {
		t.Errorf("watch ConfigMaps %s with %s as %s: %v", deployNS, byName.FieldSelector, user, err)
	} else {
		w.Stop()
	}
	if _, err := as.CoreV1().ConfigMaps(deployNS).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list all ConfigMaps in %s as %s: err %v, want Forbidden", deployNS, user, err)
	}
	nodeByName := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", node).String()}
	if _, err := as.CoreV1().Nodes().List(ctx, nodeByName); err != nil {
		t.Errorf("list Nodes with %s as %s: %v", nodeByName.FieldSelector, user, err)
	}
}

// checkDaemonSet checks the rendered DaemonSet against what the agent needs:
// the image entry, NODE_NAME from the downward API, known flags, the
// kubelet and state hostPaths, probes on the metrics port, node-critical
// priority and the GPU taint toleration.
func checkDaemonSet(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	u := harness.FindObject(objs, "DaemonSet", deploySA)
	if u == nil {
		return // reported by the caller
	}
	var ds appsv1.DaemonSet
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, &ds, true); err != nil {
		t.Fatalf("DaemonSet: %v", err)
	}
	pod := ds.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("DaemonSet has %d containers, want 1", len(pod.Containers))
	}
	ctr := pod.Containers[0]
	if want := "ghcr.io/carve-dev/carve-agent:v0.1.0"; ctr.Image != want {
		t.Errorf("image %q, want %s (the kustomization's images: entry)", ctr.Image, want)
	}
	if pod.ServiceAccountName != deploySA || pod.PriorityClassName != "system-node-critical" {
		t.Errorf("serviceAccountName %q priorityClassName %q", pod.ServiceAccountName, pod.PriorityClassName)
	}
	nodeName := false
	for _, e := range ctr.Env {
		if e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName" {
			nodeName = true
		}
	}
	if !nodeName {
		t.Error("no env NODE_NAME from fieldRef spec.nodeName")
	}
	known := map[string]bool{"node-name": true, "kubeconfig": true, "config-map": true, "gpus": true, "sim-state": true,
		"device-plugin-dir": true, "pod-resources-socket": true, "state-dir": true, "metrics-addr": true, "cdi": true, "log-level": true,
		"sim-latency": true, "profile-label": true, "mig-manager-state-label": true, "gfd-labels": true, "pause-operands": true,
		"advertise": true, "kubelet-root-dir": true, "cdi-dir": true}
	for _, a := range append(append([]string{}, ctr.Command...), ctr.Args...) {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !known[name] {
			t.Errorf("argument %q is not a carve-agent flag", a)
		}
	}
	paths := map[string]bool{}
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			paths[v.HostPath.Path] = true
		}
	}
	for _, p := range []string{"/var/lib/kubelet/device-plugins", "/var/lib/kubelet/pod-resources", "/var/lib/carve"} {
		if !paths[p] {
			t.Errorf("no hostPath volume %s", p)
		}
	}
	for what, pr := range map[string]*corev1.Probe{"/healthz": ctr.LivenessProbe, "/readyz": ctr.ReadinessProbe} {
		if pr == nil || pr.HTTPGet == nil || pr.HTTPGet.Path != what || pr.HTTPGet.Port.String() != "metrics" {
			t.Errorf("probe %s: %+v", what, pr)
		}
	}
	if len(ctr.Ports) != 1 || ctr.Ports[0].Name != "metrics" || ctr.Ports[0].ContainerPort != 9465 {
		t.Errorf("ports %+v, want metrics 9465", ctr.Ports)
	}
	tolerated := false
	for _, tol := range pod.Tolerations {
		if tol.Key == "nvidia.com/gpu" && tol.Operator == corev1.TolerationOpExists && tol.Effect == corev1.TaintEffectNoSchedule {
			tolerated = true
		}
	}
	if !tolerated {
		t.Error("no toleration for the nvidia.com/gpu NoSchedule taint")
	}
}

// TestDeployGPUOperatorOverlay: configs/deploy/gpu-operator renders the
// base with the settings for a cluster that runs NVIDIA's GPU Operator, and
// the DaemonSet passes the same checks as the base's.
func TestDeployGPUOperatorOverlay(t *testing.T) {
	objs := renderKustomize(t, deployDir+"/gpu-operator")
	if base := renderKustomize(t, deployDir); len(objs) != len(base) {
		t.Errorf("the overlay renders %d objects, the base %d", len(objs), len(base))
	}
	checkDaemonSet(t, objs)
	var ds appsv1.DaemonSet
	u := harness.FindObject(objs, "DaemonSet", deploySA)
	if u == nil {
		t.Fatal("no DaemonSet")
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &ds); err != nil {
		t.Fatal(err)
	}
	pod := ds.Spec.Template.Spec
	if pod.RuntimeClassName == nil || *pod.RuntimeClassName != "nvidia" {
		t.Errorf("runtimeClassName %v, want nvidia", pod.RuntimeClassName)
	}
	args := pod.Containers[0].Args
	for _, want := range []string{"--profile-label=nvidia.com/mig.config", "--mig-manager-state-label", "--gfd-labels=false", "--pause-operands=gpu-feature-discovery,dcgm-exporter,dcgm,nvsm,client"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %v lack %s", args, want)
		}
	}
}

const (
	// draDeployDir is the kustomization of carve as a DRA driver, and
	// draExamplesDir the DRA examples.
	draDeployDir   = deployDir + "/dra"
	draExamplesDir = "../../configs/examples/dra"
	// slicePolicy names the ResourceSlice admission policy of
	// configs/deploy/components/dra.
	slicePolicy = "carve-agent-resourceslices"
	// draDriver is carve's DRA driver.
	draDriver = "gpu.carve.dev"
)

// draRules are the ClusterRole rules configs/deploy/components/dra adds to
// agentRules: the DRA driver's API calls.
var draRules = []rbacv1.PolicyRule{
	{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
	{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"get", "list"}},
}

// draNeeds are the requests carve-agent on node makes with --advertise
// dra beyond agentNeeds; draMustNot are near ones it does not make.
func draNeeds() []access {
	var out []access
	for _, v := range []string{"get", "list", "watch", "create", "update", "delete"} {
		out = append(out, access{v, "resource.k8s.io", "resourceslices", "", "", ""})
	}
	return append(out,
		access{"get", "resource.k8s.io", "resourceclaims", "", "default", "some-claim"},
		access{"list", "resource.k8s.io", "resourceclaims", "", "", ""})
}

func draMustNot() []access {
	return []access{
		{"deletecollection", "resource.k8s.io", "resourceslices", "", "", ""},
		{"patch", "resource.k8s.io", "resourceslices", "", "", ""},
		{"update", "resource.k8s.io", "resourceclaims", "status", "default", "some-claim"},
		{"update", "resource.k8s.io", "resourceclaims", "", "default", "some-claim"},
		{"create", "resource.k8s.io", "resourceclaims", "", "default", ""},
		{"watch", "resource.k8s.io", "resourceclaims", "", "", ""},
		{"create", "resource.k8s.io", "deviceclasses", "", "", ""},
		{"delete", "resource.k8s.io", "deviceclasses", "", "", draDriver},
	}
}

// TestDeployDRAOverlay: configs/deploy/dra renders the base and exactly
// the DRA objects (two DeviceClasses, the ResourceSlice policy and its
// binding); its DaemonSet passes the base's checks and advertises through
// DRA with the kubelet's plugin directories mounted at their node paths;
// its ClusterRole is the base's rules and the DRA driver's, nothing more.
// Needs no cluster beyond its kubectl.
func TestDeployDRAOverlay(t *testing.T) {
	objs := renderKustomize(t, draDeployDir)
	base := renderKustomize(t, deployDir)
	if len(objs) != len(base)+4 {
		t.Errorf("the overlay renders %d objects, the base %d; want 4 more", len(objs), len(base))
	}
	for _, want := range []struct{ kind, name string }{
		{"DeviceClass", "gpu.carve.dev"}, {"DeviceClass", "mig.carve.dev"},
		{"ValidatingAdmissionPolicy", slicePolicy}, {"ValidatingAdmissionPolicyBinding", slicePolicy},
	} {
		if harness.FindObject(objs, want.kind, want.name) == nil {
			t.Errorf("configs/deploy/dra renders no %s %s", want.kind, want.name)
		}
	}
	checkDaemonSet(t, objs)
	u := harness.FindObject(objs, "DaemonSet", deploySA)
	if u == nil {
		t.Fatal("no DaemonSet")
	}
	var ds appsv1.DaemonSet
	fromUnstructured(t, u, &ds)
	ctr := ds.Spec.Template.Spec.Containers[0]
	for _, want := range []string{"--advertise=dra", "--kubelet-root-dir=/var/lib/kubelet", "--cdi-dir=/var/run/cdi"} {
		if !slices.Contains(ctr.Args, want) {
			t.Errorf("args %v lack %s", ctr.Args, want)
		}
	}
	mounts := map[string]string{}
	for _, m := range ctr.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		want, ok := map[string]struct {
			path string
			typ  corev1.HostPathType
		}{
			"plugins-registry": {"/var/lib/kubelet/plugins_registry", corev1.HostPathDirectory},
			"dra-plugin":       {"/var/lib/kubelet/plugins/" + draDriver, corev1.HostPathDirectoryOrCreate},
			"cdi":              {"/var/run/cdi", corev1.HostPathDirectoryOrCreate},
		}[v.Name]
		if !ok {
			continue
		}
		if v.HostPath == nil || v.HostPath.Path != want.path || v.HostPath.Type == nil || *v.HostPath.Type != want.typ {
			t.Errorf("volume %s: %+v, want hostPath %s of type %s", v.Name, v.HostPath, want.path, want.typ)
		}
		// The kubelet reaches the driver by the path it names: the same
		// inside as on the node.
		if mounts[v.Name] != want.path {
			t.Errorf("volume %s mounted at %q, want %s", v.Name, mounts[v.Name], want.path)
		}
	}
	for _, name := range []string{"plugins-registry", "dra-plugin", "cdi"} {
		if _, ok := mounts[name]; !ok {
			t.Errorf("no volume mount %s", name)
		}
	}
	var got []rbacv1.PolicyRule
	for _, o := range objs {
		if o.GetKind() == "ClusterRole" {
			var r rbacv1.ClusterRole
			fromUnstructured(t, o, &r)
			got = r.Rules
		}
	}
	if diff := cmp.Diff(slices.Concat(agentRules["ClusterRole"], draRules), got); diff != "" {
		t.Errorf("configs/deploy/dra's ClusterRole grants other rules than the agent and its DRA driver need (-need +rendered):\n%s", diff)
	}
}

// TestDeployDRAOverlayOnAPIServer applies every object configs/deploy/dra
// renders, and the examples of configs/examples/dra, to the real
// kube-apiserver with a server-side dry run (schema, strict fields, the
// CEL of the DeviceClasses and claims compiled), then creates the
// Namespace, ServiceAccount, RBAC and the ResourceSlice policy for real,
// checks with SubjectAccessReviews that the ServiceAccount may make the
// DRA driver's calls and not others near them, that the policy's
// expressions type-check, and that it admits the agent's writes of its
// own node's slice and denies those of another node's, another driver's,
// and those of a token bound to no node.
func TestDeployDRAOverlayOnAPIServer(t *testing.T) {
	c := suite.Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := c.Clientset()
	dc := newDeployClient(ctx, t, c)
	create := dc.create
	objs := renderKustomize(t, draDeployDir)
	examples, err := harness.DecodeFiles(filepath.Join(draExamplesDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}

	ns := harness.FindObject(objs, "Namespace", deployNS)
	if ns == nil {
		t.Fatal("no Namespace")
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, deployNS, metav1.GetOptions{}); err == nil {
		t.Fatalf("namespace %s already exists; a previous run did not clean up", deployNS)
	}
	created := dryRunInNamespace(t, cs, dc, ns, slices.Concat(objs, examples))
	if t.Failed() {
		return
	}
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding":
		case "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			if o.GetName() != slicePolicy {
				continue
			}
		default:
			continue
		}
		if err := create(o, false); err != nil {
			t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
		}
		*created = append(*created, o)
	}

	user, groups := serviceAccountUser(deployNS, deploySA)
	node := c.NodeName()
	deadline := time.Now().Add(30 * time.Second)
	for !allowed(ctx, t, cs, user, groups, draNeeds()[0]) && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	for _, a := range draNeeds() {
		if !allowed(ctx, t, cs, user, groups, a) {
			t.Errorf("%s may not %+v; the DRA driver needs it", user, a)
		}
	}
	for _, a := range draMustNot() {
		if allowed(ctx, t, cs, user, groups, a) {
			t.Errorf("%s may %+v; the DRA driver does not need it", user, a)
		}
	}
	checkSlicePolicy(ctx, t, cs, user, groups, node)
}

// checkSlicePolicy waits until the ResourceSlice policy is type-checked
// (no warnings, every condition true), then writes ResourceSlices as the
// agent's ServiceAccount, impersonated with and without the node name of
// a pod-bound token, and checks what the policy admits.
func checkSlicePolicy(ctx context.Context, t *testing.T, cs kubernetes.Interface, user string, groups []string, node string) {
	t.Helper()
	var vap *admissionregistrationv1.ValidatingAdmissionPolicy
	err := harness.Poll(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		var err error
		vap, err = cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, slicePolicy, metav1.GetOptions{})
		return err == nil && vap.Status.ObservedGeneration == vap.Generation, harness.Retry(err)
	})
	if err != nil {
		t.Fatalf("ValidatingAdmissionPolicy %s never type-checked: %v", slicePolicy, err)
	}
	if tc := vap.Status.TypeChecking; tc != nil {
		for _, w := range tc.ExpressionWarnings {
			t.Errorf("ValidatingAdmissionPolicy %s: %s: %s", slicePolicy, w.FieldRef, w.Warning)
		}
	}
	for _, cond := range vap.Status.Conditions {
		if cond.Status != metav1.ConditionTrue {
			t.Errorf("ValidatingAdmissionPolicy %s: condition %s=%s: %s", slicePolicy, cond.Type, cond.Status, cond.Message)
		}
	}

	as := func(tokenNode string) kubernetes.Interface {
		cfg := suite.Cluster(t).RESTConfig()
		cfg.Impersonate.UserName, cfg.Impersonate.Groups = user, groups
		if tokenNode != "" {
			cfg.Impersonate.Extra = map[string][]string{"authentication.kubernetes.io/node-name": {tokenNode}}
		}
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	slice := func(name, driver, nodeName string) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.ResourceSliceSpec{
				Driver: driver, NodeName: &nodeName,
				Pool:    resourceapi.ResourcePool{Name: nodeName, Generation: 1, ResourceSliceCount: 1},
				Devices: []resourceapi.Device{{Name: "gpu-0"}},
			},
		}
	}
	admin := cs.ResourceV1().ResourceSlices()
	t.Cleanup(func() {
		for _, name := range []string{"carve-e2e-own", "carve-e2e-other-node", "carve-e2e-other-driver", "carve-e2e-x", "carve-e2e-y", "carve-e2e-z"} {
			if err := admin.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("clean up ResourceSlice %s: %v", name, err)
			}
		}
	})
	// Slices of others, made by the admin, that the agent must not touch.
	for _, s := range []*resourceapi.ResourceSlice{slice("carve-e2e-other-node", draDriver, "other-node"), slice("carve-e2e-other-driver", "gpu.example.com", node)} {
		if _, err := admin.Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create ResourceSlice %s as admin: %v", s.Name, err)
		}
	}
	agentCS := as(node)
	agent := agentCS.ResourceV1().ResourceSlices()
	waitSlicePolicyInForce(ctx, t, agentCS, slice("carve-e2e-x", draDriver, "other-node"))
	wantDenied := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), slicePolicy) {
			t.Errorf("%s: err %v, want Forbidden by %s", what, err, slicePolicy)
			return
		}
		t.Logf("%s: %v", what, err)
	}
	own, err := agent.Create(ctx, slice("carve-e2e-own", draDriver, node), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the agent creating its own node's slice: %v", err)
	}
	own.Spec.Pool.Generation++
	if _, err := agent.Update(ctx, own, metav1.UpdateOptions{}); err != nil {
		t.Errorf("the agent updating its own node's slice: %v", err)
	}
	_, err = agent.Create(ctx, slice("carve-e2e-x", draDriver, "other-node"), metav1.CreateOptions{})
	wantDenied("create a slice of another node", err)
	_, err = agent.Create(ctx, slice("carve-e2e-y", "gpu.example.com", node), metav1.CreateOptions{})
	wantDenied("create a slice of another driver", err)
	err = agent.Delete(ctx, "carve-e2e-other-node", metav1.DeleteOptions{})
	wantDenied("delete a slice of another node", err)
	err = agent.Delete(ctx, "carve-e2e-other-driver", metav1.DeleteOptions{})
	wantDenied("delete a slice of another driver", err)
	// A slice's node, pool and driver cannot change; its devices can.
	for _, name := range []string{"carve-e2e-other-node", "carve-e2e-other-driver"} {
		other, err := agent.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get a slice as the agent: %v", err)
		}
		other.Spec.Pool.Generation++
		other.Spec.Devices = append(other.Spec.Devices, resourceapi.Device{Name: "gpu-1"})
		_, err = agent.Update(ctx, other, metav1.UpdateOptions{})
		wantDenied("update "+name, err)
	}
	_, err = as("").ResourceV1().ResourceSlices().Create(ctx, slice("carve-e2e-z", draDriver, node), metav1.CreateOptions{})
	wantDenied("create a slice with a token bound to no node", err)
	if err := agent.Delete(ctx, "carve-e2e-own", metav1.DeleteOptions{}); err != nil {
		t.Errorf("the agent deleting its own node's slice: %v", err)
	}
}

// waitSlicePolicyInForce waits until the API server enforces the
// ResourceSlice policy on the agent's client: a policy takes effect a
// moment after it is created. It asks with a dry run of creating denied, a
// slice the policy denies the agent.
func waitSlicePolicyInForce(ctx context.Context, t *testing.T, client kubernetes.Interface, denied *resourceapi.ResourceSlice) {
	t.Helper()
	var last error
	err := harness.Poll(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		_, last = client.ResourceV1().ResourceSlices().Create(ctx, denied, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return last != nil && strings.Contains(last.Error(), slicePolicy), nil
	})
	if err != nil {
		t.Fatalf("ValidatingAdmissionPolicy %s not in force after 30 s: the last dry run answered %v: %v", slicePolicy, last, err)
	}
}

// deleteAtCleanup deletes the objects *created lists when the test ends,
// the last created first, and waits until deployNS is gone: namespace
// deletion is asynchronous, and the next run must start clean.
func deleteAtCleanup(t *testing.T, cs kubernetes.Interface, resource func(*unstructured.Unstructured) dynamic.ResourceInterface, created *[]*unstructured.Unstructured) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, o := range slices.Backward(*created) {
			if err := resource(o).Delete(ctx, o.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("clean up %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
		if err := harness.WaitNamespaceGone(ctx, cs, deployNS, time.Minute); err != nil {
			t.Errorf("namespace %s still there after clean up: %v", deployNS, err)
		}
	})
}

// deployClient creates rendered objects on the cluster's API server, each
// through the dynamic client of its kind (found by discovery).
// dryRunInNamespace creates the Namespace ns for real, deleted when the
// test ends with everything appended to the slice it returns, and
// server-side dry-runs the other objects in it, reporting each refusal.
func dryRunInNamespace(t *testing.T, cs kubernetes.Interface, dc deployClient, ns *unstructured.Unstructured, objs []*unstructured.Unstructured) *[]*unstructured.Unstructured {
	t.Helper()
	created := new([]*unstructured.Unstructured)
	deleteAtCleanup(t, cs, dc.resource, created)
	if err := dc.create(ns, false); err != nil {
		t.Fatalf("create Namespace %s: %v", ns.GetName(), err)
	}
	*created = append(*created, ns)
	for _, o := range objs {
		if o == ns {
			continue
		}
		if err := dc.create(o, true); err != nil {
			t.Errorf("server-side dry run of %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}
	return created
}

type deployClient struct {
	ctx     context.Context
	t       *testing.T
	objects *harness.Objects
}

func newDeployClient(ctx context.Context, t *testing.T, c *cluster.Cluster) deployClient {
	t.Helper()
	objects, err := harness.NewObjects(c.RESTConfig(), c.Clientset())
	if err != nil {
		t.Fatal(err)
	}
	return deployClient{ctx: ctx, t: t, objects: objects}
}

// resource is the dynamic client of o's kind; the test fails without one.
func (d deployClient) resource(o *unstructured.Unstructured) dynamic.ResourceInterface {
	d.t.Helper()
	r, err := d.objects.For(o)
	if err != nil {
		d.t.Fatal(err)
	}
	return r
}

// create creates o with strict field validation, or only dry-runs it.
func (d deployClient) create(o *unstructured.Unstructured, dryRun bool) error {
	opts := metav1.CreateOptions{FieldManager: "carve-e2e", FieldValidation: "Strict"}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err := d.resource(o).Create(d.ctx, o.DeepCopy(), opts)
	return err
}
