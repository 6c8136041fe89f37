package e2e

import (
	"context"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/google/go-cmp/cmp"
)

// agentRules are exactly the RBAC rules configs/deploy grants carve-agent,
// by role kind: the API calls agent/controller.go and cmd/carve-agent make,
// nothing more. A new grant (pods/exec, nodes/proxy, secrets, ...) must be
// added here on purpose, or TestDeployRBACIsExactlyTheAgentsNeeds fails.
var agentRules = map[string][]rbacv1.PolicyRule{
	"Role": {
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{profilesCM}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "create", "update", "delete"}},
	},
	"ClusterRole": {
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"pods/eviction"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
	},
}

// TestDeployRBACIsExactlyTheAgentsNeeds compares the roles and bindings
// configs/deploy renders with agentRules and the carve-agent
// ServiceAccount, field by field: no rule more, none less, bound to nobody
// else. Needs no cluster.
func TestDeployRBACIsExactlyTheAgentsNeeds(t *testing.T) {
	objs := renderDeploy(t)
	got := map[string][]rbacv1.PolicyRule{}
	for _, kind := range []string{"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"} {
		var n int
		for _, o := range objs {
			if o.GetKind() != kind {
				continue
			}
			n++
			if o.GetName() != deploySA {
				t.Errorf("%s %s: want only %s", kind, o.GetName(), deploySA)
			}
			switch kind {
			case "Role":
				var r rbacv1.Role
				fromUnstructured(t, o, &r)
				got[kind] = r.Rules
				if r.Namespace != deployNS {
					t.Errorf("Role in namespace %q, want %s", r.Namespace, deployNS)
				}
			case "ClusterRole":
				var r rbacv1.ClusterRole
				fromUnstructured(t, o, &r)
				got[kind] = r.Rules
				if r.AggregationRule != nil {
					t.Errorf("ClusterRole aggregates %+v", r.AggregationRule)
				}
			default:
				checkBinding(t, o, kind)
			}
		}
		if n != 1 {
			t.Errorf("configs/deploy renders %d %s objects, want 1", n, kind)
		}
	}
	if diff := cmp.Diff(agentRules, got); diff != "" {
		t.Errorf("configs/deploy grants carve-agent other rules than it needs (-need +rendered):\n%s", diff)
	}
}

// checkBinding checks that a rendered binding binds the role of its kind
// and name to the carve-agent ServiceAccount and nobody else.
func checkBinding(t *testing.T, o *unstructured.Unstructured, kind string) {
	t.Helper()
	var b rbacv1.RoleBinding // a ClusterRoleBinding has the same fields
	fromUnstructured(t, o, &b)
	want := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: deploySA}
	if kind == "RoleBinding" {
		want.Kind = "Role"
		if b.Namespace != deployNS {
			t.Errorf("RoleBinding in namespace %q, want %s", b.Namespace, deployNS)
		}
	}
	if diff := cmp.Diff(want, b.RoleRef); diff != "" {
		t.Errorf("%s %s roleRef (-want +got):\n%s", kind, o.GetName(), diff)
	}
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: deploySA, Namespace: deployNS}}
	if diff := cmp.Diff(subjects, b.Subjects); diff != "" {
		t.Errorf("%s %s subjects (-want +got):\n%s", kind, o.GetName(), diff)
	}
}

func fromUnstructured(t *testing.T, o *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, into, true); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
}

// access is one API request, as a SubjectAccessReview asks about it.
type access struct {
	verb, group, resource, sub, ns, name string
}

// agentNeeds are the requests carve-agent on node makes: each must be
// allowed.
func agentNeeds(node string) []access {
	return []access{
		{"get", "", "nodes", "", "", node},
		{"list", "", "nodes", "", "", node},
		{"watch", "", "nodes", "", "", node},
		{"patch", "", "nodes", "", "", node},
		{"get", "", "configmaps", "", deployNS, profilesCM},
		{"list", "", "configmaps", "", deployNS, profilesCM},
		{"watch", "", "configmaps", "", deployNS, profilesCM},
		{"create", "", "events", "", "default", ""},
		{"patch", "", "events", "", "default", ""},
		{"create", "", "pods", "eviction", "default", "some-pod"},
		{"list", "", "pods", "", "", ""},
		{"list", "coordination.k8s.io", "leases", "", deployNS, ""},
		{"create", "coordination.k8s.io", "leases", "", deployNS, ""},
		{"update", "coordination.k8s.io", "leases", "", deployNS, "carve-rollout-carve-profiles-0"},
		{"delete", "coordination.k8s.io", "leases", "", deployNS, "carve-rollout-carve-profiles-0"},
		{"get", "coordination.k8s.io", "leases", "", deployNS, "carve-member-carve-profiles-" + node},
	}
}

// tokenCan are requests beyond the agent's own that RBAC lets its token
// make all the same, as docs/agent.md ("What a stolen agent token can do")
// states them: read every Node, Events in any namespace, list every pod,
// evict any pod (as PodDisruptionBudgets allow), any Lease of its
// namespace. Each must be allowed, so that the page stays true.
func tokenCan() []access {
	return []access{
		{"list", "", "nodes", "", "", ""},
		{"get", "", "nodes", "", "", "another-node"},
		{"watch", "", "nodes", "", "", ""},
		{"create", "", "events", "", "kube-system", ""},
		{"list", "", "pods", "", "kube-system", ""},
		{"create", "", "pods", "eviction", "kube-system", "any-pod"},
		{"delete", "coordination.k8s.io", "leases", "", deployNS, "carve-rollout-carve-profiles-1"},
		{"update", "coordination.k8s.io", "leases", "", deployNS, "carve-failed-other-node"},
	}
}

// agentMustNot are requests near the agent's that it does not make, and
// that must be denied, as the API server's authoriser decides.
func agentMustNot(node string) []access {
	return []access{
		{"delete", "", "nodes", "", "", node},
		{"update", "", "nodes", "", "", node},
		{"create", "", "nodes", "", "", ""},
		{"patch", "", "nodes", "status", "", node},
		{"get", "", "nodes", "proxy", "", node},
		{"create", "", "pods", "exec", "default", "some-pod"},
		{"get", "", "secrets", "", deployNS, "any"},
		{"list", "", "secrets", "", deployNS, ""},
		{"get", "", "secrets", "", "kube-system", "any"},
		{"get", "", "configmaps", "", deployNS, "other"},
		{"list", "", "configmaps", "", deployNS, ""},
		{"watch", "", "configmaps", "", deployNS, ""},
		{"get", "", "configmaps", "", "kube-system", profilesCM},
		{"update", "", "configmaps", "", deployNS, profilesCM},
		{"patch", "", "configmaps", "", deployNS, profilesCM},
		{"delete", "", "configmaps", "", deployNS, profilesCM},
		{"get", "", "pods", "", "default", ""},
		{"get", "", "pods", "log", "default", "some-pod"},
		{"create", "", "pods", "attach", "default", "some-pod"},
		{"create", "", "pods", "portforward", "default", "some-pod"},
		{"create", "", "pods", "", "default", ""},
		{"update", "", "pods", "status", "default", "some-pod"},
		{"deletecollection", "", "pods", "", "default", ""},
		{"update", "", "nodes", "status", "", node},
		{"get", "", "configmaps", "", "kube-system", "any"},
		{"list", "", "serviceaccounts", "", "", ""},
		{"create", "rbac.authorization.k8s.io", "rolebindings", "", deployNS, ""},
		{"update", "admissionregistration.k8s.io", "validatingadmissionpolicies", "", "", "carve-agent-node-writes"},
		{"list", "resource.k8s.io", "resourceclaims", "", "", ""},
		{"watch", "", "pods", "", "", ""},
		{"patch", "", "pods", "", "default", "some-pod"},
		{"delete", "", "pods", "", "default", "some-pod"},
		{"delete", "", "events", "", "default", ""},
		{"create", "events.k8s.io", "events", "", "default", ""},
		{"create", "", "serviceaccounts", "token", deployNS, deploySA},
		{"create", "coordination.k8s.io", "leases", "", "kube-node-lease", ""},
		{"update", "coordination.k8s.io", "leases", "", "kube-system", "kube-scheduler"},
		{"list", "coordination.k8s.io", "leases", "", "", ""},
		{"watch", "coordination.k8s.io", "leases", "", deployNS, ""},
		{"patch", "coordination.k8s.io", "leases", "", deployNS, "carve-rollout-carve-profiles-0"},
	}
}

// serviceAccountUser is the user name and groups of a ServiceAccount's
// token.
func serviceAccountUser(ns, name string) (string, []string) {
	return "system:serviceaccount:" + ns + ":" + name, []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
}

// allowed asks the API server (a SubjectAccessReview) whether user in
// groups may make request a.
func allowed(ctx context.Context, t *testing.T, cs kubernetes.Interface, user string, groups []string, a access) bool {
	t.Helper()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user, Groups: groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.sub, Namespace: a.ns, Name: a.name,
		},
	}}
	got, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SubjectAccessReview %+v: %v", a, err)
	}
	return got.Status.Allowed
}

// checkAccess checks through SubjectAccessReviews that user in groups may
// make every request the agent on node needs and those of tokenCan, and
// none of agentMustNot.
func checkAccess(ctx context.Context, t *testing.T, cs kubernetes.Interface, user string, groups []string, node string) {
	t.Helper()
	for _, a := range agentNeeds(node) {
		if !allowed(ctx, t, cs, user, groups, a) {
			t.Errorf("%s may not %+v; the agent needs it", user, a)
		}
	}
	for _, a := range tokenCan() {
		if !allowed(ctx, t, cs, user, groups, a) {
			t.Errorf("%s may not %+v; docs/agent.md says a stolen token can", user, a)
		}
	}
	for _, a := range agentMustNot(node) {
		if allowed(ctx, t, cs, user, groups, a) {
			t.Errorf("%s may %+v; the agent does not need it", user, a)
		}
	}
}
