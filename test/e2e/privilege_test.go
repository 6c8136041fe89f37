package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/carve-dev/carve/agent"
	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/kubeclient"
	"github.com/carve-dev/carve/test/cluster"
	"github.com/carve-dev/carve/test/harness"
)

const (
	// nodePolicy names the ValidatingAdmissionPolicy of configs/deploy
	// and its binding.
	nodePolicy = "carve-agent-node-writes"
	// nodeNameExtra is the user extra in which the API server names the
	// node of the pod a ServiceAccount token is bound to.
	nodeNameExtra = "authentication.kubernetes.io/node-name"
	// otherNode is a second Node object, with no kubelet behind it.
	otherNode = "carve-e2e-other-node"
	// tokenPod is the pod the agent's tokens of these tests are bound to.
	tokenPod = "carve-e2e-token-holder"
	// foreignLabel is a label of the node that the admin sets and carve
	// does not own.
	foreignLabel = "example.com/keep"
)

// The policy's rules, as its denial messages start.
const (
	ruleOwnNode     = "carve-agent may patch only its own Node: "
	ruleSubresource = "carve-agent writes no Node subresource: "
	ruleMetadata    = "carve-agent may change only labels and annotations of its Node: "
	ruleLabels      = "carve-agent may change only the Node labels carve writes "
	ruleAnnotations = "carve-agent may change only the Node annotation carve.dev/partition, "
)

// TestDeployNodePolicyMatchesTheAgent checks the ValidatingAdmissionPolicy
// configs/deploy renders, field by field where it is not CEL: it fails
// closed, applies to the carve-agent ServiceAccount's updates of Nodes and
// their status and nobody else's, and its binding denies. Needs no cluster.
func TestDeployNodePolicyMatchesTheAgent(t *testing.T) {
	objs := renderDeploy(t)
	var vap admissionregistrationv1.ValidatingAdmissionPolicy
	var binding admissionregistrationv1.ValidatingAdmissionPolicyBinding
	for kind, into := range map[string]any{"ValidatingAdmissionPolicy": &vap, "ValidatingAdmissionPolicyBinding": &binding} {
		o := harness.FindObject(objs, kind, nodePolicy)
		if o == nil {
			t.Fatalf("configs/deploy renders no %s %s", kind, nodePolicy)
		}
		if o.GetNamespace() != "" {
			t.Errorf("%s %s has namespace %q; it is cluster-scoped", kind, nodePolicy, o.GetNamespace())
		}
		fromUnstructured(t, o, into)
	}
	user, _ := serviceAccountUser(deployNS, deploySA)
	fail := admissionregistrationv1.Fail
	want := admissionregistrationv1.ValidatingAdmissionPolicySpec{
		FailurePolicy: &fail,
		MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
			RuleWithOperations: admissionregistrationv1.RuleWithOperations{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"nodes", "nodes/status"}},
			},
		}}},
		MatchConditions: []admissionregistrationv1.MatchCondition{{
			Name: "carve-agent-service-account", Expression: "request.userInfo.username == '" + user + "'",
		}},
	}
	got := vap.Spec
	got.Validations, got.Variables = nil, nil // CEL: TestAgentTokenPatchesOnlyItsOwnNode runs it
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ValidatingAdmissionPolicy %s (-want +rendered):\n%s", nodePolicy, diff)
	}
	for i, v := range vap.Spec.Validations {
		if v.Reason == nil || *v.Reason != metav1.StatusReasonForbidden || v.Message == "" {
			t.Errorf("validation %d (%s): want reason Forbidden and a message", i, v.Expression)
		}
	}
	wantBinding := admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
		PolicyName: nodePolicy, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
	}
	if diff := cmp.Diff(wantBinding, binding.Spec); diff != "" {
		t.Errorf("ValidatingAdmissionPolicyBinding %s (-want +rendered):\n%s", nodePolicy, diff)
	}
}

// patchCase is one Node patch and what the policy says of it.
type patchCase struct {
	name   string
	client kubernetes.Interface
	node   string
	patch  string // JSON merge patch
	// rule is how the denial message starts, "" when the patch is allowed;
	// detail is how it ends.
	rule, detail string
}

// TestAgentTokenPatchesOnlyItsOwnNode proves configs/deploy's
// ValidatingAdmissionPolicy on the real API server, with the agent's own
// credentials: the carve-agent ServiceAccount's token, bound to a pod on
// the node as the kubelet's is, which carries the node's name. With it the
// agent may patch carve's labels and annotation on that Node, and nothing
// else: not another key, not the spec, not another Node, not the status;
// and a token bound to no pod may patch no Node at all. Then the agent
// itself, in this process with that token, realises a MIG profile and goes
// back, pausing an operand and writing the MIG manager's state label: all
// its writes pass.
func TestAgentTokenPatchesOnlyItsOwnNode(t *testing.T) {
	c := suite.Cluster(t)
	cs := c.Clientset()
	ctx := testCtx(t, 8*time.Minute)
	freshNode(t, c)
	node := c.NodeName()
	checkAdmissionPolicyServed(t, cs)

	var objs []*unstructured.Unstructured
	for _, o := range renderDeploy(t) {
		if o.GetKind() != "DaemonSet" {
			objs = append(objs, o)
		}
	}
	createDeploy(ctx, t, c, objs)
	waitAllowed(ctx, t, cs, agentNeeds(node)[3])
	checkPolicyTypes(ctx, t, cs)

	pod := createTokenPod(ctx, t, cs, node)
	bound := requestToken(ctx, t, cs, pod)
	unbound := requestToken(ctx, t, cs, nil)
	if got := tokenNode(ctx, t, cs, bound); got != node {
		t.Fatalf("a token bound to pod %s on %s names node %q (%s); the API server needs ServiceAccountTokenPodNodeInfo (Kubernetes 1.30 or later)", pod.Name, node, got, nodeNameExtra)
	}
	if got := tokenNode(ctx, t, cs, unbound); got != "" {
		t.Fatalf("a token bound to no pod names node %q", got)
	}
	agentCS := tokenClient(t, c, bound)
	waitPolicyInForce(ctx, t, agentCS, node)
	createOtherNode(ctx, t, cs)

	t.Run("patches with the agent's token", func(t *testing.T) {
		cases := patchCases(node, agentCS, tokenClient(t, c, unbound))
		before, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { undoPatches(context.Background(), t, cs, before, cases) })
		if err := harness.SetNodeLabels(ctx, cs, node, map[string]string{foreignLabel: "yes"}); err != nil {
			t.Fatal(err)
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) { tc.check(ctx, t, cs) })
		}
	})
	t.Run("nodes/status, were it granted", func(t *testing.T) {
		grantNodeStatus(ctx, t, cs)
		tc := patchCase{client: agentCS, node: node, patch: labelPatch(carvev1.LabelState, "x"),
			rule: ruleSubresource, detail: "not nodes/status"}
		_, err := agentCS.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(tc.patch), metav1.PatchOptions{}, "status")
		tc.checkDenied(t, err)
	})
	t.Run("the agent's own writes pass", func(t *testing.T) {
		agentWritesPass(ctx, t, c, tokenAgentClient(t, c, bound))
	})
}

// patchCases are the patches of TestAgentTokenPatchesOnlyItsOwnNode: agent
// holds the token bound to a pod on node, unbound one bound to no pod.
func patchCases(node string, agent, unbound kubernetes.Interface) []patchCase {
	return []patchCase{
		{name: "own node: carve.dev/state", client: agent, node: node, patch: labelPatch(carvev1.LabelState, "success")},
		{name: "own node: remove carve.dev/state", client: agent, node: node, patch: labelPatch(carvev1.LabelState, "")},
		{name: "own node: a GPU feature discovery label", client: agent, node: node, patch: labelPatch(carvev1.LabelGPUProduct, "NVIDIA-H100-80GB-HBM3")},
		{name: "own node: a per-MIG-profile label", client: agent, node: node, patch: labelPatch(carvev1.MIGLabelKey("1g.24gb+me.all", carvev1.MIGLabelCount), "4")},
		{name: "own node: an operand label", client: agent, node: node, patch: labelPatch(carvev1.OperandLabel("dcgm-exporter"), carvev1.OperandPaused)},
		{name: "own node: the MIG manager's state label", client: agent, node: node, patch: labelPatch(carvev1.LabelMIGManagerState, "success")},
		{name: "own node: the node record", client: agent, node: node, patch: annotationPatch(carvev1.AnnotationRecord, "{}")},

		{name: "own node: a label not carve's", client: agent, node: node, patch: labelPatch("team", "a"),
			rule: ruleLabels, detail: ", not team"},
		{name: "own node: the operator's carve.dev/profile", client: agent, node: node, patch: labelPatch(carvev1.LabelProfile, "all-1g"),
			rule: ruleLabels, detail: ", not " + carvev1.LabelProfile},
		{name: "own node: the operator's carve.dev/hold", client: agent, node: node, patch: labelPatch(carvev1.LabelHold, carvev1.HoldTrue),
			rule: ruleLabels, detail: ", not " + carvev1.LabelHold},
		{name: "own node: the operator's nvidia.com/mig.config", client: agent, node: node, patch: labelPatch(carvev1.LabelMIGManagerConfig, "all-1g.10gb"),
			rule: ruleLabels, detail: ", not " + carvev1.LabelMIGManagerConfig},
		{name: "own node: nvidia.com/gpu.present, which GFD writes", client: agent, node: node, patch: labelPatch(gpuPresent, "true"),
			rule: ruleLabels, detail: ", not " + gpuPresent},
		{name: "own node: remove a label not carve's", client: agent, node: node, patch: labelPatch(foreignLabel, ""),
			rule: ruleLabels, detail: ", not " + foreignLabel},
		{name: "own node: an annotation not carve's", client: agent, node: node, patch: annotationPatch("example.com/owner", "someone"),
			rule: ruleAnnotations, detail: "not example.com/owner"},
		{name: "own node: the spec", client: agent, node: node, patch: `{"spec":{"unschedulable":true}}`,
			rule: ruleMetadata, detail: "not its spec, status, finalizers or owner references"},
		{name: "own node: a finalizer", client: agent, node: node, patch: `{"metadata":{"finalizers":["carve.dev/keep"]}}`,
			rule: ruleMetadata, detail: "not its spec, status, finalizers or owner references"},
		{name: "another node: carve.dev/state", client: agent, node: otherNode, patch: labelPatch(carvev1.LabelState, "success"),
			rule: ruleOwnNode, detail: "this request is for Node " + otherNode + " and its token is bound to a pod on Node " + node},
		{name: "a token bound to no pod: own node, carve.dev/state", client: unbound, node: node, patch: labelPatch(carvev1.LabelState, "success"),
			rule: ruleOwnNode, detail: "and its token names no node (" + nodeNameExtra + "; only a token bound to a pod on a node has it)"},
	}
}

// check makes the patch and checks the policy's answer: allowed, and the
// Node shows it; or denied by the policy with the rule's message.
func (tc patchCase) check(ctx context.Context, t *testing.T, admin kubernetes.Interface) {
	t.Helper()
	before, err := admin.CoreV1().Nodes().Get(ctx, tc.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := tc.client.CoreV1().Nodes().Patch(ctx, tc.node, types.MergePatchType, []byte(tc.patch), metav1.PatchOptions{FieldManager: "carve-e2e"})
	if tc.rule != "" {
		tc.checkDenied(t, err)
		after, err := admin.CoreV1().Nodes().Get(ctx, tc.node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.touched(t, before), tc.touched(t, after)); diff != "" {
			t.Errorf("a denied patch changed Node %s (-before +after):\n%s", tc.node, diff)
		}
		return
	}
	if err != nil {
		t.Fatalf("patch %s of Node %s with the agent's token: %v; want it allowed", tc.patch, tc.node, err)
	}
	p := tc.metadata(t)
	for k, v := range p.Labels {
		if gotV, ok := got.Labels[k]; ok != (v != nil) || v != nil && gotV != *v {
			t.Errorf("after the patch, label %s = %q (set %v)", k, gotV, ok)
		}
	}
	for k, v := range p.Annotations {
		if got.Annotations[k] != *v {
			t.Errorf("after the patch, annotation %s = %q, want %q", k, got.Annotations[k], *v)
		}
	}
}

// patchMetadata is what a case's patch sets in the metadata: nil removes.
type patchMetadata struct {
	Labels, Annotations map[string]*string
}

func (tc patchCase) metadata(t *testing.T) patchMetadata {
	t.Helper()
	var p struct{ Metadata patchMetadata }
	if err := json.Unmarshal([]byte(tc.patch), &p); err != nil {
		t.Fatalf("patch %s: %v", tc.patch, err)
	}
	return p.Metadata
}

// nodeFields are the fields of a Node that a case's patch would change
// (controllers change others, such as the TTL annotation, at any time).
type nodeFields struct {
	Labels, Annotations map[string]string
	Finalizers          []string
	Unschedulable       bool
}

func (tc patchCase) touched(t *testing.T, n *corev1.Node) nodeFields {
	t.Helper()
	p := tc.metadata(t)
	out := nodeFields{Labels: map[string]string{}, Annotations: map[string]string{}, Finalizers: n.Finalizers, Unschedulable: n.Spec.Unschedulable}
	for k := range p.Labels {
		if v, ok := n.Labels[k]; ok {
			out.Labels[k] = v
		}
	}
	for k := range p.Annotations {
		if v, ok := n.Annotations[k]; ok {
			out.Annotations[k] = v
		}
	}
	return out
}

// checkDenied checks that err is the policy's denial with the case's rule
// and detail.
func (tc patchCase) checkDenied(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("patch %s of Node %s allowed; want it denied: %s...%s", tc.patch, tc.node, tc.rule, tc.detail)
	}
	prefix := fmt.Sprintf("ValidatingAdmissionPolicy '%s' with binding '%s' denied request: ", nodePolicy, nodePolicy)
	_, msg, byPolicy := strings.Cut(err.Error(), prefix)
	got := struct {
		Forbidden, ByPolicy, Rule, Detail bool
	}{apierrors.IsForbidden(err), byPolicy, strings.HasPrefix(msg, tc.rule), strings.HasSuffix(msg, tc.detail)}
	want := got
	want.Forbidden, want.ByPolicy, want.Rule, want.Detail = true, true, true, true
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("patch %s of Node %s: %v\nwant a denial by %s that starts %q and ends %q (-want +got):\n%s",
			tc.patch, tc.node, err, nodePolicy, tc.rule, tc.detail, diff)
	}
}

func labelPatch(key, value string) string {
	if value == "" {
		return fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, key)
	}
	return fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, key, value)
}

func annotationPatch(key, value string) string {
	return fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, key, value)
}

// undoPatches puts back, as the admin, whatever of before the cases would
// have changed had they all been allowed.
func undoPatches(ctx context.Context, t *testing.T, cs kubernetes.Interface, before *corev1.Node, cases []patchCase) {
	t.Helper()
	labels, annotations := map[string]any{}, map[string]any{}
	was := func(m map[string]string, k string) any {
		if v, ok := m[k]; ok {
			return v
		}
		return nil // absent: removed
	}
	for _, tc := range cases {
		p := tc.metadata(t)
		for k := range p.Labels {
			labels[k] = was(before.Labels, k)
		}
		for k := range p.Annotations {
			annotations[k] = was(before.Annotations, k)
		}
	}
	undo, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"labels": labels, "annotations": annotations, "finalizers": before.Finalizers},
		"spec":     map[string]any{"unschedulable": before.Spec.Unschedulable},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Nodes().Patch(ctx, before.Name, types.MergePatchType, undo, metav1.PatchOptions{}); err != nil {
		t.Errorf("cleanup: undo the patches on Node %s: %v", before.Name, err)
	}
}

// checkAdmissionPolicyServed checks that the API server serves
// ValidatingAdmissionPolicies (GA, and on by default, since 1.30).
func checkAdmissionPolicyServed(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	gv := admissionregistrationv1.SchemeGroupVersion.String()
	list, err := cs.Discovery().ServerResourcesForGroupVersion(gv)
	if err != nil {
		t.Fatalf("the API server does not serve %s: %v", gv, err)
	}
	var got []string
	for _, r := range list.APIResources {
		got = append(got, r.Name)
	}
	for _, want := range []string{"validatingadmissionpolicies", "validatingadmissionpolicybindings"} {
		if !slices.Contains(got, want) {
			t.Fatalf("the API server serves no %s/%s (it serves %v): kube-apiserver 1.30 or later needed", gv, want, got)
		}
	}
}

// waitAllowed waits until a SubjectAccessReview allows the carve-agent
// ServiceAccount request a: new RBAC objects reach the authoriser's cache
// a moment after they are created.
func waitAllowed(ctx context.Context, t *testing.T, cs kubernetes.Interface, a access) {
	t.Helper()
	user, groups := serviceAccountUser(deployNS, deploySA)
	err := harness.Poll(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		return allowed(ctx, t, cs, user, groups, a), nil
	})
	if err != nil {
		t.Fatalf("%s still may not %+v: %v", user, a, err)
	}
}

// checkPolicyTypes waits until the API server has type-checked the
// policy's expressions against the Node schema, and fails on any warning.
func checkPolicyTypes(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	var vap *admissionregistrationv1.ValidatingAdmissionPolicy
	err := harness.Poll(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		var err error
		vap, err = cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, nodePolicy, metav1.GetOptions{})
		return err == nil && vap.Status.ObservedGeneration == vap.Generation, harness.Retry(err)
	})
	if err != nil {
		t.Fatalf("ValidatingAdmissionPolicy %s never type-checked: %v", nodePolicy, err)
	}
	if tc := vap.Status.TypeChecking; tc != nil {
		for _, w := range tc.ExpressionWarnings {
			t.Errorf("ValidatingAdmissionPolicy %s: %s: %s", nodePolicy, w.FieldRef, w.Warning)
		}
	}
	for _, cond := range vap.Status.Conditions {
		if cond.Status != metav1.ConditionTrue {
			t.Errorf("ValidatingAdmissionPolicy %s: condition %s=%s: %s", nodePolicy, cond.Type, cond.Status, cond.Message)
		}
	}
}

// createTokenPod creates a pod of the carve-agent ServiceAccount on node,
// as the DaemonSet's are (spec.nodeName set), for tokens bound to it; it is
// deleted when the test ends.
func createTokenPod(ctx context.Context, t *testing.T, cs kubernetes.Interface, node string) *corev1.Pod {
	t.Helper()
	no := false
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: deployNS, Name: tokenPod},
		Spec: corev1.PodSpec{
			ServiceAccountName: deploySA, AutomountServiceAccountToken: &no, NodeName: node,
			HostNetwork: true, TerminationGracePeriodSeconds: new(int64), RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "c", Image: cluster.BusyboxImage, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"},
			}},
		},
	}
	got, err := cs.CoreV1().Pods(deployNS).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := harness.DeletePod(context.Background(), cs, deployNS, tokenPod); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return got
}

// requestToken returns a token of the carve-agent ServiceAccount (a
// TokenRequest), bound to pod, or to nothing when pod is nil.
func requestToken(ctx context.Context, t *testing.T, cs kubernetes.Interface, pod *corev1.Pod) string {
	t.Helper()
	hour := int64(3600)
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &hour}}
	if pod != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	got, err := cs.CoreV1().ServiceAccounts(deployNS).CreateToken(ctx, deploySA, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s/%s: %v", deployNS, deploySA, err)
	}
	return got.Status.Token
}

// tokenNode returns the node a token names (TokenReview, user extra
// authentication.kubernetes.io/node-name), "" when it names none.
func tokenNode(ctx context.Context, t *testing.T, cs kubernetes.Interface, token string) string {
	t.Helper()
	review, err := cs.AuthenticationV1().TokenReviews().Create(ctx,
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenReview: %v", err)
	}
	st := review.Status
	if want, _ := serviceAccountUser(deployNS, deploySA); !st.Authenticated || st.User.Username != want {
		t.Fatalf("the token authenticates %v as %q (%s), want %s", st.Authenticated, st.User.Username, st.Error, want)
	}
	names := st.User.Extra[nodeNameExtra]
	if len(names) != 1 {
		return ""
	}
	return names[0]
}

// tokenClient returns a client of the test cluster's API server that
// authenticates with token alone.
func tokenClient(t *testing.T, c *cluster.Cluster, token string) kubernetes.Interface {
	t.Helper()
	cfg := rest.AnonymousClientConfig(c.RESTConfig())
	cfg.BearerToken = token
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// tokenAgentClient is tokenClient through the client carve-agent builds.
func tokenAgentClient(t *testing.T, c *cluster.Cluster, token string) kubeclient.Interface {
	t.Helper()
	cfg := rest.AnonymousClientConfig(c.RESTConfig())
	cfg.BearerToken = token
	client, err := kubeclient.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// waitPolicyInForce waits until the API server enforces the policy on the
// agent's client: a policy takes effect a moment after it is created. It
// asks with a dry run of a patch the policy denies.
func waitPolicyInForce(ctx context.Context, t *testing.T, client kubernetes.Interface, node string) {
	t.Helper()
	waitNamedPolicyInForce(ctx, t, client, node, nodePolicy)
}

// waitNamedPolicyInForce is waitPolicyInForce for the node-writes policy
// named policy (the chart names it after its release).
func waitNamedPolicyInForce(ctx context.Context, t *testing.T, client kubernetes.Interface, node, policy string) {
	t.Helper()
	denial := fmt.Sprintf("ValidatingAdmissionPolicy '%s'", policy)
	var last error
	err := harness.Poll(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		_, last = client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(labelPatch("team", "a")),
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return last != nil && strings.Contains(last.Error(), denial), nil
	})
	if err != nil {
		t.Fatalf("ValidatingAdmissionPolicy %s not in force after 30 s: the last dry run answered %v: %v", policy, last, err)
	}
}

// createOtherNode creates a second Node object, with no kubelet behind it,
// and deletes it when the test ends.
func createOtherNode(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: otherNode}}
	if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		err := cs.CoreV1().Nodes().Delete(context.Background(), otherNode, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("cleanup: %v", err)
		}
	})
}

// grantNodeStatus grants the carve-agent ServiceAccount what configs/deploy
// does not, patching nodes/status, until the test ends: so that the
// policy, not RBAC, has the last word on it.
func grantNodeStatus(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	const name = "carve-e2e-node-status"
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: deploySA, Namespace: deployNS}},
	}
	rbac := cs.RbacV1()
	if _, err := rbac.ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rbac.ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	if _, err := rbac.ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rbac.ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	waitAllowed(ctx, t, cs, access{"patch", "", "nodes", "status", "", otherNode})
}

// privilegeProfiles: whole GPUs, and a MIG mix with time-sliced 1g.10gb
// devices, so that the agent writes every kind of label it has.
const privilegeProfiles = `version: v1
defaultProfile: whole
profiles:
  whole:
    - gpus: all
  mixed:
    - gpus: all
      mig: {1g.10gb: 2, 2g.20gb: 1, 3g.40gb: 1}
      timeSlicing:
        replicas: {1g.10gb: 2}
`

// agentWritesPass runs the agent in this process with client (the
// ServiceAccount's pod-bound token) on a simulated H100, with the MIG
// manager's state label and the DCGM exporter's operand label: it realises
// a MIG profile, which pauses and restores the operand, and goes back to
// whole GPUs, which removes the MIG labels. Each step shows on the Node
// only if the policy let the agent's patches through.
func agentWritesPass(ctx context.Context, t *testing.T, c *cluster.Cluster, client kubeclient.Interface) {
	t.Helper()
	cs, node := c.Clientset(), c.NodeName()
	if err := harness.ApplyProfiles(ctx, cs, deployNS, profilesCM, privilegeProfiles); err != nil {
		t.Fatal(err)
	}
	operand := carvev1.OperandLabel("dcgm-exporter")
	if err := harness.SetNodeLabels(ctx, cs, node, map[string]string{operand: "true"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := harness.SetNodeLabels(context.Background(), cs, node, map[string]string{operand: ""}); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	since := time.Now()
	startAgent(t, c, newSim(t, "h100-80gb*1"), func(cfg *agent.Config) {
		cfg.Client = client
		cfg.ConfigMapNamespace, cfg.ConfigMapName = deployNS, profilesCM
		cfg.Labels.MIGManagerState = true
		cfg.PauseOperands = []string{"dcgm-exporter"}
	})
	waitState(ctx, t, c, carvev1.StateSuccess, "whole")
	setProfileLabel(ctx, t, c, "mixed")
	n := waitState(ctx, t, c, carvev1.StateSuccess, "mixed")
	want := map[string]string{
		operand: "true", carvev1.LabelMIGManagerState: carvev1.MIGManagerSuccess, carvev1.LabelMIGStrategy: carvev1.MIGStrategyMixed,
		carvev1.MIGLabelKey("1g.10gb", carvev1.MIGLabelCount): "2", carvev1.MIGLabelKey("1g.10gb", carvev1.MIGLabelReplicas): "2",
		carvev1.MIGLabelKey("3g.40gb", carvev1.MIGLabelCount): "1",
	}
	got := map[string]string{}
	for k := range want {
		got[k] = n.Labels[k]
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("labels after the agent realised mixed with its token (-want +got):\n%s", diff)
	}
	waitEvent(ctx, t, c, carvev1.ReasonOperandsRestored, operand, since)

	setProfileLabel(ctx, t, c, "whole")
	n = waitState(ctx, t, c, carvev1.StateSuccess, "whole")
	for k := range n.Labels {
		if strings.HasPrefix(k, "nvidia.com/mig-") {
			t.Errorf("label %s left after the agent went back to whole GPUs with its token", k)
		}
	}
}
