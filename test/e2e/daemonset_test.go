package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/test/cluster"
	"github.com/carve-dev/carve/test/harness"
)

const (
	// agentVersion is the version the e2e agent image is stamped with and
	// tagged as.
	agentVersion = "v0.0.0-e2e"
	// agentImage is the carve-agent image the test builds as make release
	// does and imports; it exists in the cluster's containerd only
	// (imagePullPolicy: Never).
	agentImage = agentRepository + ":" + agentVersion
	// agentRepository is agentImage's name without its tag.
	agentRepository = "carve.dev/carve-agent"
	// gpuPresent is the label the DaemonSet's nodeSelector asks for.
	gpuPresent = "nvidia.com/gpu.present"
	// agentPods selects the DaemonSet's pods.
	agentPods = "app.kubernetes.io/name=carve-agent"
	// simStateFile is the simulator's state file in the state directory.
	simStateFile = "sim-state.json"
)

// TestDaemonSetOnTheLocalCluster runs configs/deploy for real: the
// carve-agent binary in an image made without a container engine, the
// Namespace, ServiceAccount, RBAC, ConfigMap and DaemonSet created through
// the API server with only what a local cluster needs changed (image,
// simulated DGX H100, kubelet paths, host network), and checks that the
// pod becomes Ready through its readiness probe, adopts the node as it is
// (the sample ConfigMap selects no node), realises a labelled profile with
// the ServiceAccount's least-privilege RBAC, and serves a pod a MIG device.
func TestDaemonSetOnTheLocalCluster(t *testing.T) {
	c := suite.Cluster(t)
	cs := c.Clientset()
	ctx := testCtx(t, 15*time.Minute)
	freshNode(t, c)
	node := c.NodeName()

	t0 := time.Now()
	importAgentImage(ctx, t, c)
	t.Logf("built and imported %s in %s", agentImage, time.Since(t0).Round(100*time.Millisecond))

	// Created before the DaemonSet, so that it is removed after the pod.
	stateDir := t.TempDir()
	objs := renderDeploy(t)
	metricsAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	localDaemonSet(t, c, objs, stateDir, metricsAddr)

	if err := harness.SetNodeLabels(ctx, cs, node, map[string]string{gpuPresent: "true"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := harness.SetNodeLabels(context.Background(), cs, node, map[string]string{gpuPresent: ""}); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	t0 = time.Now()
	createDeploy(ctx, t, c, objs)

	pod := waitAgentPodReady(ctx, t, cs, node)
	t.Logf("pod %s Ready %s after the objects were created", pod.Name, time.Since(t0).Round(100*time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent pod:\n%s", describePod(context.Background(), cs, deployNS, pod.Name))
		}
	})
	if pod.Spec.ServiceAccountName != deploySA || !pod.Spec.HostNetwork {
		t.Errorf("pod serviceAccountName %q hostNetwork %v", pod.Spec.ServiceAccountName, pod.Spec.HostNetwork)
	}
	// The admission policy holds the agent's token from here on at the
	// latest: the profile change below is written under it.
	waitPolicyInForce(ctx, t, tokenClient(t, c, podToken(t, c, pod)), node)
	err := harness.Poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		ds, err := cs.AppsV1().DaemonSets(deployNS).Get(ctx, deploySA, metav1.GetOptions{})
		if err != nil {
			return false, harness.Retry(err)
		}
		st := ds.Status
		return st.DesiredNumberScheduled == 1 && st.NumberReady == 1 && st.NumberAvailable == 1, nil
	})
	if err != nil {
		t.Fatalf("DaemonSet status never showed 1 of 1 ready: %v", err)
	}

	// The sample ConfigMap selects no node: the node's whole GPUs are
	// adopted as they are.
	n := waitState(ctx, t, c, carvev1.StateAdopted, "")
	if got := n.Labels[carvev1.LabelSource]; got != carvev1.SourceAdopted {
		t.Errorf("%s = %q, want %s", carvev1.LabelSource, got, carvev1.SourceAdopted)
	}
	if rec, err := harness.RecordOf(n); err != nil || rec.AgentVersion != agentVersion {
		t.Errorf("the node record says agent version %q (err %v), want the image's %s", rec.AgentVersion, err, agentVersion)
	}
	waitAllocatable(ctx, t, cs, node, map[string]int64{gpu: 8})

	since := time.Now()
	setProfileLabel(ctx, t, c, "all-1g")
	waitState(ctx, t, c, carvev1.StateSuccess, "all-1g")
	waitAllocatable(ctx, t, cs, node, map[string]int64{mig1g: 56})
	t.Logf("profile all-1g realised and advertised %s after the label", time.Since(since).Round(100*time.Millisecond))

	t.Run("an Event from carve-agent on the node", func(t *testing.T) {
		ev := waitEvent(ctx, t, c, carvev1.ReasonRepartitioned, "profile all-1g (label) applied", since)
		if ev.Source.Component != "carve-agent" || ev.Source.Host != node || ev.Namespace != metav1.NamespaceDefault {
			t.Errorf("event source %+v in namespace %q, want carve-agent on %s in default", ev.Source, ev.Namespace, node)
		}
	})

	t.Run("a pod gets a MIG device of the agent's GPUs", func(t *testing.T) {
		createPod(ctx, t, cs, harness.DevicePod("ds-one-mig", mig1g, 1, 0))
		got := terminationMessage(ctx, t, cs, "ds-one-mig")
		if !strings.HasPrefix(got, "MIG-") {
			t.Fatalf("NVIDIA_VISIBLE_DEVICES = %q, want one MIG device", got)
		}
		// The agent keeps the simulated GPUs in the state file on the
		// node's state hostPath.
		all := migUUIDs(t, openState(t, filepath.Join(stateDir, simStateFile)))
		if len(all) != 56 || !slices.Contains(all, got) {
			t.Errorf("%s is not one of the %d MIG devices in the agent's simulator state", got, len(all))
		}
	})

	t.Run("the agent runs as the carve-agent ServiceAccount, which may do what it needs and no more", func(t *testing.T) {
		user, groups := checkAgentIdentity(ctx, t, c, pod)
		checkAccess(ctx, t, cs, user, groups, node)
	})

	t.Run("probes, metrics and log", func(t *testing.T) {
		if err := checkServing(ctx, metricsAddr); err != nil {
			t.Error(err)
		}
		p, err := cs.CoreV1().Pods(deployNS).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].RestartCount != 0 || !podReady(p) {
			t.Errorf("container statuses %+v, want one Ready container never restarted", p.Status.ContainerStatuses)
		}
	})
}

// freePort returns a TCP port on 127.0.0.1 that nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// localDaemonSet changes the rendered DaemonSet, in place, for the local
// cluster, and nothing else:
//   - the image is agentImage, never pulled;
//   - --gpus=sim:dgx-h100, with --sim-state in the state directory, so a
//     restarted container finds the GPUs as it left them;
//   - the pod-resources hostPath is the cluster's kubelet root (the
//     device-plugin directory is the usual one on every kubelet);
//   - the state hostPath is stateDir, not the machine's /var/lib/carve;
//   - host network (the cluster has no pod network and no kube-proxy), with
//     KUBERNETES_SERVICE_HOST/PORT naming the API server on 127.0.0.1, so
//     that the in-cluster configuration reaches it;
//   - the metrics port (and so the probes') is metricsAddr on the host.
func localDaemonSet(t *testing.T, c *cluster.Cluster, objs []*unstructured.Unstructured, stateDir, metricsAddr string) {
	t.Helper()
	u := harness.FindObject(objs, "DaemonSet", deploySA)
	if u == nil {
		t.Fatalf("configs/deploy renders no DaemonSet %s", deploySA)
	}
	var ds appsv1.DaemonSet
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, &ds, true); err != nil {
		t.Fatalf("DaemonSet: %v", err)
	}
	spec := &ds.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("DaemonSet has %d containers, want 1", len(spec.Containers))
	}
	ctr := &spec.Containers[0]
	_, metricsPort, err := net.SplitHostPort(metricsAddr)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(metricsPort)
	if err != nil {
		t.Fatal(err)
	}

	mountOf := func(volume string) string {
		for _, m := range ctr.VolumeMounts {
			if m.Name == volume {
				return m.MountPath
			}
		}
		t.Fatalf("DaemonSet: no volume mount %s", volume)
		return ""
	}
	hostPath := func(volume string) *corev1.HostPathVolumeSource {
		for i := range spec.Volumes {
			if v := &spec.Volumes[i]; v.Name == volume && v.HostPath != nil {
				return v.HostPath
			}
		}
		t.Fatalf("DaemonSet: no hostPath volume %s", volume)
		return nil
	}
	stateMount := mountOf("state")
	if hp := hostPath("device-plugins"); hp.Path != c.DevicePluginDir() {
		t.Fatalf("device-plugins hostPath %s, the kubelet's is %s", hp.Path, c.DevicePluginDir())
	}
	hostPath("pod-resources").Path = filepath.Dir(c.PodResourcesSocket())
	hostPath("state").Path = stateDir

	replaced := map[string]bool{}
	for i, a := range ctr.Args {
		name, value, _ := strings.Cut(a, "=")
		switch name {
		case "--gpus":
			ctr.Args[i] = "--gpus=sim:dgx-h100"
		case "--metrics-addr":
			ctr.Args[i] = "--metrics-addr=" + metricsAddr
		case "--pod-resources-socket":
			// The flag names the socket inside the container: it must lie
			// in the mounted directory under the kubelet's name for it.
			if filepath.Dir(value) != mountOf("pod-resources") || filepath.Base(value) != filepath.Base(c.PodResourcesSocket()) {
				t.Fatalf("%s is not %s in the pod-resources mount %s", a, filepath.Base(c.PodResourcesSocket()), mountOf("pod-resources"))
			}
		case "--state-dir":
			if value != stateMount {
				t.Fatalf("%s is not the state mount %s", a, stateMount)
			}
		case "--kubeconfig", "--sim-state":
			t.Fatalf("the manifest sets %s; the test expects in-cluster access and real GPUs", a)
		}
		replaced[name] = true
	}
	for _, f := range []string{"--gpus", "--metrics-addr", "--pod-resources-socket", "--state-dir"} {
		if !replaced[f] {
			t.Fatalf("the DaemonSet has no %s argument", f)
		}
	}
	ctr.Args = append(ctr.Args, "--sim-state="+filepath.Join(stateMount, simStateFile))

	ctr.Image = agentImage
	ctr.ImagePullPolicy = corev1.PullNever
	spec.HostNetwork = true
	host, apiPort, err := net.SplitHostPort(strings.TrimPrefix(c.APIServerURL(), "https://"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ctr.Env {
		if e.Name == "KUBECONFIG" || strings.HasPrefix(e.Name, "KUBERNETES_SERVICE_") {
			t.Fatalf("the manifest sets %s", e.Name)
		}
	}
	ctr.Env = append(ctr.Env,
		corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: host},
		corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: apiPort})
	found := false
	for i := range ctr.Ports {
		if ctr.Ports[i].Name == "metrics" {
			ctr.Ports[i].ContainerPort = int32(port)
			found = true
		}
	}
	if !found {
		t.Fatal("DaemonSet: no container port metrics")
	}

	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&ds)
	if err != nil {
		t.Fatalf("DaemonSet: %v", err)
	}
	u.Object = obj
}

// createDeploy creates objs through the API server and deletes them when
// the test ends: the DaemonSet first, waiting until its pod is gone and
// the agent's device-plugin sockets with it, the Namespace last. A
// Namespace that exists already is used and left in place.
func createDeploy(ctx context.Context, t *testing.T, c *cluster.Cluster, objs []*unstructured.Unstructured) {
	t.Helper()
	cs := c.Clientset()
	objects, err := harness.NewObjects(c.RESTConfig(), cs)
	if err != nil {
		t.Fatal(err)
	}
	resource := objects.For
	// The order of creation; deletion goes the other way.
	deployOrder := []string{"Namespace", "ServiceAccount", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding",
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "ConfigMap", "Service", "DaemonSet"}
	sorted := slices.Clone(objs)
	for _, o := range sorted {
		if !slices.Contains(deployOrder, o.GetKind()) {
			t.Fatalf("configs/deploy renders a %s (%s), which this test does not know", o.GetKind(), o.GetName())
		}
	}
	slices.SortStableFunc(sorted, func(a, b *unstructured.Unstructured) int {
		return slices.Index(deployOrder, a.GetKind()) - slices.Index(deployOrder, b.GetKind())
	})

	var created []*unstructured.Unstructured
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		for _, o := range slices.Backward(created) {
			r, err := resource(o)
			if err == nil {
				err = r.Delete(ctx, o.GetName(), metav1.DeleteOptions{})
			}
			if err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("cleanup: delete %s %s: %v", o.GetKind(), o.GetName(), err)
				continue
			}
			switch o.GetKind() {
			case "DaemonSet":
				if err := waitAgentGone(ctx, cs); err != nil {
					t.Errorf("cleanup: %v", err)
				}
			case "Namespace":
				if err := harness.WaitNamespaceGone(ctx, cs, o.GetName(), 2*time.Minute); err != nil {
					t.Errorf("cleanup: namespace %s still there: %v", o.GetName(), err)
				}
			}
		}
	})
	for _, o := range sorted {
		r, err := resource(o)
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.Create(ctx, o.DeepCopy(), metav1.CreateOptions{FieldManager: "carve-e2e", FieldValidation: "Strict"})
		if apierrors.IsAlreadyExists(err) && o.GetKind() == "Namespace" {
			t.Logf("namespace %s exists already; using it and leaving it in place", o.GetName())
			continue
		}
		if err != nil {
			t.Fatalf("create %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
		created = append(created, o)
	}
}

// waitAgentGone waits until no pod of the DaemonSet is left, then checks
// that the agent removed its device-plugin sockets on its way out.
func waitAgentGone(ctx context.Context, cs kubernetes.Interface) error {
	return waitAgentPodsGone(ctx, cs, deployNS, agentPods)
}

// waitAgentPodsGone waits until no agent pod that selector picks in
// namespace is left, then checks that the agent removed its device-plugin
// sockets on its way out.
func waitAgentPodsGone(ctx context.Context, cs kubernetes.Interface, namespace, selector string) error {
	var left []string
	err := harness.Poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		list, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, harness.Retry(err)
		}
		left = left[:0]
		for _, p := range list.Items {
			left = append(left, p.Name)
		}
		return len(left) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("DaemonSet pods %v still there: %w", left, err)
	}
	socks, err := filepath.Glob(filepath.Join(cluster.DevicePluginDir, "carve-*.sock"))
	if err != nil {
		return fmt.Errorf("list device-plugin sockets: %w", err)
	}
	if len(socks) > 0 {
		return fmt.Errorf("device-plugin sockets left after the agent pod was gone: %v", socks)
	}
	return nil
}

// podReady reports the pod's Ready condition.
func podReady(p *corev1.Pod) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitAgentPodReady waits until the DaemonSet's only pod runs on the node
// and is Ready, which takes the readiness probe (/readyz, by the kubelet).
func waitAgentPodReady(ctx context.Context, t *testing.T, cs kubernetes.Interface, node string) *corev1.Pod {
	t.Helper()
	return waitDaemonSetPodReady(ctx, t, cs, deployNS, deploySA, agentPods, node)
}

// waitDaemonSetPodReady waits until the only pod that selector picks in
// namespace runs on the node and is Ready (through its readiness probe),
// and the DaemonSet ds counts it ready and available.
func waitDaemonSetPodReady(ctx context.Context, t *testing.T, cs kubernetes.Interface, namespace, ds, selector, node string) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	err := harness.Poll(ctx, 3*time.Minute, func(ctx context.Context) (bool, error) {
		list, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil || len(list.Items) == 0 {
			return false, harness.Retry(err)
		}
		if len(list.Items) > 1 {
			return false, fmt.Errorf("%d DaemonSet pods on a one-node cluster", len(list.Items))
		}
		last = &list.Items[0]
		if last.Spec.NodeName != "" && last.Spec.NodeName != node {
			return false, fmt.Errorf("pod %s on node %s, want %s", last.Name, last.Spec.NodeName, node)
		}
		d, err := cs.AppsV1().DaemonSets(namespace).Get(ctx, ds, metav1.GetOptions{})
		if err != nil {
			return false, harness.Retry(err)
		}
		st := d.Status
		return podReady(last) && st.DesiredNumberScheduled == 1 && st.NumberReady == 1 && st.NumberAvailable == 1, nil
	})
	if err != nil {
		if last == nil {
			t.Fatalf("the DaemonSet %s made no pod: %v", ds, err)
		}
		t.Fatalf("pod %s or its DaemonSet %s not Ready: %v\n%s", last.Name, ds, err, describePod(ctx, cs, namespace, last.Name))
	}
	return last
}

// checkAgentIdentity checks that the only credentials the agent has are
// its ServiceAccount's: the container gets no kubeconfig (so carve-agent
// uses the in-cluster configuration), and the token the kubelet mounted
// into the pod is carve-agent's, bound to this pod and naming its node (a
// TokenReview of the token file in the kubelet's pod directory). It returns
// the user and groups the token authenticates as.
func checkAgentIdentity(ctx context.Context, t *testing.T, c *cluster.Cluster, pod *corev1.Pod) (user string, groups []string) {
	t.Helper()
	ctr := pod.Spec.Containers[0]
	for _, a := range append(slices.Clone(ctr.Command), ctr.Args...) {
		if strings.HasPrefix(a, "--kubeconfig") {
			t.Errorf("the container has %s", a)
		}
	}
	for _, e := range ctr.Env {
		if e.Name == "KUBECONFIG" {
			t.Errorf("the container has KUBECONFIG")
		}
	}
	if pod.Spec.AutomountServiceAccountToken != nil && !*pod.Spec.AutomountServiceAccountToken {
		t.Fatal("the pod does not mount its ServiceAccount token")
	}
	review, err := c.Clientset().AuthenticationV1().TokenReviews().Create(ctx,
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: podToken(t, c, pod)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenReview: %v", err)
	}
	st := review.Status
	want := "system:serviceaccount:" + deployNS + ":" + deploySA
	if !st.Authenticated || st.User.Username != want {
		t.Fatalf("the pod's token authenticates %v as %q (%s), want %s", st.Authenticated, st.User.Username, st.Error, want)
	}
	if got := st.User.Extra["authentication.kubernetes.io/pod-name"]; !slices.Equal(got, authenticationv1.ExtraValue{pod.Name}) {
		t.Errorf("the token is bound to pod %v, want %s", got, pod.Name)
	}
	// What the admission policy holds the agent to.
	if got := st.User.Extra[nodeNameExtra]; !slices.Equal(got, authenticationv1.ExtraValue{pod.Spec.NodeName}) {
		t.Errorf("the token names node %v, want %s", got, pod.Spec.NodeName)
	}
	return st.User.Username, st.User.Groups
}

// podToken returns the ServiceAccount token the kubelet mounted into the
// pod (its projected token volume, read from the kubelet's pod directory).
func podToken(t *testing.T, c *cluster.Cluster, pod *corev1.Pod) string {
	t.Helper()
	for _, v := range pod.Spec.Volumes {
		if v.Projected == nil || !slices.ContainsFunc(v.Projected.Sources, func(s corev1.VolumeProjection) bool { return s.ServiceAccountToken != nil }) {
			continue
		}
		path := filepath.Join(c.KubeletRootDir(), "pods", string(pod.UID), "volumes", "kubernetes.io~projected", v.Name, "token")
		token, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("the pod's token: %v", err)
		}
		return strings.TrimSpace(string(token))
	}
	t.Fatal("the pod has no projected ServiceAccount token volume")
	return ""
}

// describePod says what a pod is doing, for failures: phase, conditions,
// container states, its Events and the end of its log.
func describePod(ctx context.Context, cs kubernetes.Interface, namespace, name string) string {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var b strings.Builder
	p, err := cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Sprintf("pod %s/%s: %v", namespace, name, err)
	}
	fmt.Fprintf(&b, "pod %s/%s on %q: phase %s, pod IP %s\n", namespace, name, p.Spec.NodeName, p.Status.Phase, p.Status.PodIP)
	for _, cond := range p.Status.Conditions {
		fmt.Fprintf(&b, "  condition %s=%s %s %s\n", cond.Type, cond.Status, cond.Reason, cond.Message)
	}
	previous := false
	for _, s := range p.Status.ContainerStatuses {
		fmt.Fprintf(&b, "  container %s: ready %v, restarts %d, image %s\n", s.Name, s.Ready, s.RestartCount, s.Image)
		if w := s.State.Waiting; w != nil {
			fmt.Fprintf(&b, "    waiting: %s %s\n", w.Reason, w.Message)
		}
		if x := s.State.Terminated; x != nil {
			fmt.Fprintf(&b, "    terminated: exit %d %s %s\n", x.ExitCode, x.Reason, x.Message)
		}
		if x := s.LastTerminationState.Terminated; x != nil {
			fmt.Fprintf(&b, "    last terminated: exit %d %s %s\n", x.ExitCode, x.Reason, x.Message)
			previous = true
		}
	}
	sel := fields.Set{"involvedObject.kind": "Pod", "involvedObject.name": name}.AsSelector().String()
	if evs, err := cs.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: sel}); err == nil {
		for _, e := range evs.Items {
			fmt.Fprintf(&b, "  event %s %s (x%d): %s\n", e.Type, e.Reason, e.Count, e.Message)
		}
	}
	tail := int64(60)
	for _, prev := range []bool{false, true} {
		if prev && !previous {
			continue
		}
		log, err := cs.CoreV1().Pods(namespace).GetLogs(name, &corev1.PodLogOptions{TailLines: &tail, Previous: prev}).DoRaw(ctx)
		fmt.Fprintf(&b, "  log (previous %v, last %d lines, err %v):\n%s\n", prev, tail, err, log)
	}
	return b.String()
}
