package e2e

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestDeployReapplyOnAPIServer installs with kustomize as docs/agent.md
// says, with the real kubectl, replaces the sample profiles the way an
// operator would, and re-applies: neither `kubectl apply -k configs/deploy`
// nor a second `kubectl create -k configs/deploy/profiles` touches the
// operator's ConfigMap. The node carries no nvidia.com/gpu.present label,
// so no agent pod starts.
func TestDeployReapplyOnAPIServer(t *testing.T) {
	c := suite.Cluster(t)
	cs := c.Clientset()
	ctx := testCtx(t, 3*time.Minute)
	if _, err := cs.CoreV1().Namespaces().Get(ctx, deployNS, metav1.GetOptions{}); err == nil {
		t.Fatalf("namespace %s already exists; a previous run did not clean up", deployNS)
	}
	kubectl := kubectlRunner(ctx, t, c)
	t.Cleanup(func() {
		if out, err := kubectl("delete", "-k", deployDir, "--wait=true", "--ignore-not-found"); err != nil {
			t.Errorf("clean up: %v: %s", err, out)
		}
	})
	mustRun := func(args ...string) {
		t.Helper()
		if out, err := kubectl(args...); err != nil {
			t.Fatalf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	mustRun("apply", "-k", deployDir)
	mustRun("create", "-k", profilesDir)

	cms := cs.CoreV1().ConfigMaps(deployNS)
	cm, err := cms.Get(ctx, profilesCM, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mine := "version: v1\ndefaultProfile: mine\nprofiles:\n  mine: []\n"
	cm.Data = map[string]string{"profiles.yaml": mine}
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	mustRun("apply", "-k", deployDir)
	out, err := kubectl("create", "-k", profilesDir)
	if err == nil || !strings.Contains(out, "AlreadyExists") && !strings.Contains(out, "already exists") {
		t.Errorf("a second kubectl create -k %s: err %v, output %q; want it refused as AlreadyExists", profilesDir, err, out)
	}
	got, err := cms.Get(ctx, profilesCM, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Data["profiles.yaml"] != mine {
		t.Errorf("after re-applying, %s/%s holds\n%s\nwant the operator's\n%s", deployNS, profilesCM, got.Data["profiles.yaml"], mine)
	}
}
