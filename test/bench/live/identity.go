package live

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/carve-dev/carve/test/harness"
)

// Names of what Run creates. The namespace is its own, so that the
// deployment tests' carve-system is never touched; the ConfigMap keeps the
// name configs/deploy's Role grants (resourceNames), the ServiceAccount
// configs/deploy's name.
const (
	namespace      = "carve-bench-live"
	configMapName  = "carve-profiles"
	serviceAccount = "carve-agent"
	// clusterName names the cluster-scoped objects: the ClusterRole and its
	// binding (configs/deploy's carve-agent renamed, so as not to collide
	// with a deployment test's) and the prefix of the FlowSchemas.
	clusterName = "carve-bench-live"
	// writeSchema and readSchema are the FlowSchemas that catch the
	// agent's write and read requests.
	writeSchema = clusterName + "-writes"
	readSchema  = clusterName + "-reads"
	// schemaPrecedence wins over every built-in FlowSchema that could match
	// a ServiceAccount (service-accounts is 9000, global-default 9900);
	// exempt (1) and probes (2) match only system:masters and health probes.
	schemaPrecedence = 90
)

// writeVerbs and readVerbs are the verbs the two FlowSchemas match.
var (
	writeVerbs = []string{"create", "update", "patch", "delete", "deletecollection"}
	readVerbs  = []string{"get", "list", "watch"}
)

// identity is the agent's own identity on the cluster: a ServiceAccount
// with configs/deploy's RBAC, a kubeconfig with a token for it, and the
// FlowSchemas that count its requests.
type identity struct {
	// kubeconfig is the agent's kubeconfig file.
	kubeconfig string
	// client talks to the API server as the ServiceAccount.
	client kubernetes.Interface
}

// deployObjects reads the ServiceAccount and RBAC objects of
// configs/deploy/base under root, moved into namespace and with the
// cluster-scoped ones renamed to clusterName.
func deployObjects(root string) ([]runtime.Object, error) {
	var out []runtime.Object
	for _, name := range []string{"serviceaccount.yaml", "rbac.yaml"} {
		data, err := os.ReadFile(filepath.Join(root, "configs", "deploy", "base", name))
		if err != nil {
			return nil, fmt.Errorf("configs/deploy: %w", err)
		}
		objs, err := decodeObjects(data)
		if err != nil {
			return nil, fmt.Errorf("configs/deploy/base/%s: %w", name, err)
		}
		out = append(out, objs...)
	}
	return out, nil
}

// decodeObjects decodes a YAML stream of ServiceAccounts and RBAC objects
// and moves them into this package's namespace and names.
func decodeObjects(data []byte) ([]runtime.Object, error) {
	objs, err := harness.DecodeObjects(data)
	if err != nil {
		return nil, err
	}
	out := make([]runtime.Object, 0, len(objs))
	for _, u := range objs {
		obj, err := typed(u)
		if err != nil {
			return nil, err
		}
		out = append(out, obj)
	}
	return out, nil
}

// typed converts one object and renames it.
func typed(u *unstructured.Unstructured) (runtime.Object, error) {
	var obj runtime.Object
	switch u.GetKind() {
	case "ServiceAccount":
		obj = &corev1.ServiceAccount{}
	case "Role":
		obj = &rbacv1.Role{}
	case "RoleBinding":
		obj = &rbacv1.RoleBinding{}
	case "ClusterRole":
		obj = &rbacv1.ClusterRole{}
	case "ClusterRoleBinding":
		obj = &rbacv1.ClusterRoleBinding{}
	default:
		return nil, fmt.Errorf("unexpected %s %s", u.GetKind(), u.GetName())
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj); err != nil {
		return nil, fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
	}
	relocate(obj)
	return obj, nil
}

// relocate moves a namespaced object into namespace, renames a
// cluster-scoped one, and points bindings at the moved ServiceAccount and
// the renamed roles.
func relocate(obj runtime.Object) {
	subjects := func(ss []rbacv1.Subject) {
		for i := range ss {
			if ss[i].Kind == rbacv1.ServiceAccountKind {
				ss[i].Namespace = namespace
			}
		}
	}
	switch o := obj.(type) {
	case *corev1.ServiceAccount:
		o.Namespace = namespace
	case *rbacv1.Role:
		o.Namespace = namespace
	case *rbacv1.RoleBinding:
		o.Namespace = namespace
		subjects(o.Subjects)
	case *rbacv1.ClusterRole:
		o.Name = clusterName
	case *rbacv1.ClusterRoleBinding:
		o.Name, o.RoleRef.Name = clusterName, clusterName
		subjects(o.Subjects)
	}
}

// createObject creates one of the objects deployObjects returns.
func createObject(ctx context.Context, cs kubernetes.Interface, obj runtime.Object) error {
	opts := metav1.CreateOptions{}
	var err error
	switch o := obj.(type) {
	case *corev1.ServiceAccount:
		_, err = cs.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, opts)
	case *rbacv1.Role:
		_, err = cs.RbacV1().Roles(o.Namespace).Create(ctx, o, opts)
	case *rbacv1.RoleBinding:
		_, err = cs.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, opts)
	case *rbacv1.ClusterRole:
		_, err = cs.RbacV1().ClusterRoles().Create(ctx, o, opts)
	case *rbacv1.ClusterRoleBinding:
		_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, o, opts)
	default:
		return fmt.Errorf("cannot create a %T", obj)
	}
	if err != nil {
		return fmt.Errorf("create %T: %w", obj, err)
	}
	return nil
}

// setUpIdentity creates the namespace, the ServiceAccount and its RBAC (from
// configs/deploy under root), the FlowSchemas, and a kubeconfig in dir with
// a token for the ServiceAccount from the TokenRequest API.
func setUpIdentity(ctx context.Context, base *rest.Config, cs kubernetes.Interface, root, dir string) (*identity, error) {
	objs, err := deployObjects(root)
	if err != nil {
		return nil, err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create namespace %s (left over from a run that did not clean up?): %w", namespace, err)
	}
	for _, o := range objs {
		if err := createObject(ctx, cs, o); err != nil {
			return nil, err
		}
	}
	if err := createFlowSchemas(ctx, cs); err != nil {
		return nil, err
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(2 * 3600))}}
	tok, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, serviceAccount, tr, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("token for ServiceAccount %s/%s: %w", namespace, serviceAccount, err)
	}
	id := &identity{kubeconfig: filepath.Join(dir, "agent.kubeconfig")}
	if err := writeKubeconfig(base, tok.Status.Token, id.kubeconfig); err != nil {
		return nil, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", id.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("agent kubeconfig: %w", err)
	}
	if id.client, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("agent client: %w", err)
	}
	return id, nil
}

// writeKubeconfig writes a kubeconfig for the API server of base that
// authenticates with token.
func writeKubeconfig(base *rest.Config, token, path string) error {
	ca := base.CAData
	if len(ca) == 0 && base.CAFile != "" {
		var err error
		if ca, err = os.ReadFile(base.CAFile); err != nil {
			return fmt.Errorf("cluster CA: %w", err)
		}
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: base.Host, CertificateAuthorityData: ca}
	cfg.AuthInfos["carve-agent"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["carve-agent"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "carve-agent"}
	cfg.CurrentContext = "carve-agent"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write agent kubeconfig: %w", err)
	}
	return nil
}

// priorityLevel picks the priority level the FlowSchemas use: a
// non-exempt one of the API server's suggested configuration.
func priorityLevel(ctx context.Context, cs kubernetes.Interface) (string, error) {
	var errs []error
	for _, name := range []string{"workload-high", "global-default"} {
		_, err := cs.FlowcontrolV1().PriorityLevelConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			return name, nil
		}
		errs = append(errs, err)
	}
	return "", fmt.Errorf("no priority level for the FlowSchemas: %w", errors.Join(errs...))
}

// flowSchema matches the ServiceAccount's resource requests with verbs,
// and its non-resource requests when nonResource is set.
func flowSchema(name, level string, verbs []string, nonResource bool) *flowcontrolv1.FlowSchema {
	rule := flowcontrolv1.PolicyRulesWithSubjects{
		Subjects: []flowcontrolv1.Subject{{
			Kind:           flowcontrolv1.SubjectKindServiceAccount,
			ServiceAccount: &flowcontrolv1.ServiceAccountSubject{Namespace: namespace, Name: serviceAccount},
		}},
		ResourceRules: []flowcontrolv1.ResourcePolicyRule{{
			Verbs: verbs, APIGroups: []string{"*"}, Resources: []string{"*"}, ClusterScope: true, Namespaces: []string{"*"},
		}},
	}
	if nonResource {
		rule.NonResourceRules = []flowcontrolv1.NonResourcePolicyRule{{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}}
	}
	return &flowcontrolv1.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: level},
			MatchingPrecedence:         schemaPrecedence,
			Rules:                      []flowcontrolv1.PolicyRulesWithSubjects{rule},
		},
	}
}

// createFlowSchemas creates the two FlowSchemas: writes, and reads (with
// the non-resource requests, which the agent does not make).
func createFlowSchemas(ctx context.Context, cs kubernetes.Interface) error {
	level, err := priorityLevel(ctx, cs)
	if err != nil {
		return err
	}
	for _, fs := range []*flowcontrolv1.FlowSchema{
		flowSchema(writeSchema, level, writeVerbs, false),
		flowSchema(readSchema, level, readVerbs, true),
	} {
		if _, err := cs.FlowcontrolV1().FlowSchemas().Create(ctx, fs, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create FlowSchema %s: %w", fs.Name, err)
		}
	}
	return nil
}

// tearDownIdentity deletes what setUpIdentity created (whatever of it
// exists) and waits until the namespace is gone.
func tearDownIdentity(ctx context.Context, cs kubernetes.Interface) error {
	var errs []error
	keep := func(err error, what string) {
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete %s: %w", what, err))
		}
	}
	for _, name := range []string{writeSchema, readSchema} {
		keep(cs.FlowcontrolV1().FlowSchemas().Delete(ctx, name, metav1.DeleteOptions{}), "FlowSchema "+name)
	}
	keep(cs.RbacV1().ClusterRoleBindings().Delete(ctx, clusterName, metav1.DeleteOptions{}), "ClusterRoleBinding "+clusterName)
	keep(cs.RbacV1().ClusterRoles().Delete(ctx, clusterName, metav1.DeleteOptions{}), "ClusterRole "+clusterName)
	keep(cs.CoreV1().Namespaces().Delete(ctx, namespace, metav1.DeleteOptions{}), "namespace "+namespace)
	for {
		_, err := cs.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		select {
		case <-ctx.Done():
			return errors.Join(append(errs, fmt.Errorf("namespace %s still there: %w", namespace, ctx.Err()))...)
		case <-time.After(250 * time.Millisecond):
		}
	}
	return errors.Join(errs...)
}
