package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// cdiTestSpec is a CDI spec with one device, carve.dev/test=one, whose
// only edit is an environment variable.
const cdiTestSpec = `{
  "cdiVersion": "0.6.0",
  "kind": "carve.dev/test",
  "devices": [{"name": "one", "containerEdits": {"env": ["CARVE_CDI_DEVICE=one"]}}]
}
`

// checkCDI shows that containerd applies CDI specs from c.CDIDir(): a
// container that asks for a device a spec there names gets the spec's
// edits, and one that asks for an unknown device is refused. The container
// runs through the CRI, as the kubelet would run it with the CDI devices of
// a DRA claim or a device plugin's answer; the kubelet is stopped meanwhile,
// so that it does not remove a pod it did not create.
func checkCDI(ctx context.Context, t *testing.T, c *Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := os.WriteFile(filepath.Join(c.CDIDir(), "carve-test.json"), []byte(cdiTestSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.StopKubelet(); err != nil {
		t.Fatalf("stop kubelet: %v", err)
	}
	defer func() {
		if err := c.RestartKubelet(ctx); err != nil {
			t.Errorf("start kubelet again: %v", err)
		}
	}()
	logDir := filepath.Join(c.Dir(), "cdi-check")
	var out string
	err := withCRI(c.ContainerdSocket(), func(rs runtimeapi.RuntimeServiceClient, _ runtimeapi.ImageServiceClient) error {
		sandbox, err := runSandbox(ctx, rs, c.cgroupRoot, logDir)
		if err != nil {
			return err
		}
		defer func() {
			_, _ = rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sandbox.id})
			_, _ = rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sandbox.id})
		}()
		if _, err := sandbox.create(ctx, rs, "unknown", "carve.dev/test=two"); err == nil || !strings.Contains(err.Error(), "unresolvable CDI devices") {
			return fmt.Errorf("container with an unknown CDI device: %w, want unresolvable CDI devices", err)
		}
		out, err = sandbox.run(ctx, rs, "known", "carve.dev/test=one")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "CARVE_CDI_DEVICE=one") {
		t.Errorf("the container's environment lacks the CDI spec's CARVE_CDI_DEVICE=one:\n%s", out)
	}
}

// criSandbox is a pod sandbox made through the CRI.
type criSandbox struct {
	id     string
	config *runtimeapi.PodSandboxConfig
}

// runSandbox starts a host-network pod sandbox under cgroupParent that
// logs to logDir.
func runSandbox(ctx context.Context, rs runtimeapi.RuntimeServiceClient, cgroupParent, logDir string) (criSandbox, error) {
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "cdi-check", Uid: "cdi-check", Namespace: "carve-test"},
		LogDirectory: logDir,
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: cgroupParent,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
			},
		},
	}
	resp, err := rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		return criSandbox{}, fmt.Errorf("run pod sandbox: %w", err)
	}
	return criSandbox{id: resp.GetPodSandboxId(), config: cfg}, nil
}

// create creates a busybox container that prints its environment and asks
// for the CDI device cdiDevice.
func (s criSandbox) create(ctx context.Context, rs runtimeapi.RuntimeServiceClient, name, cdiDevice string) (string, error) {
	resp, err := rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId:  s.id,
		SandboxConfig: s.config,
		Config: &runtimeapi.ContainerConfig{
			Metadata:   &runtimeapi.ContainerMetadata{Name: name},
			Image:      &runtimeapi.ImageSpec{Image: BusyboxImage},
			Command:    []string{"env"},
			LogPath:    name + ".log",
			CDIDevices: []*runtimeapi.CDIDevice{{Name: cdiDevice}},
		},
	})
	if err != nil {
		return "", fmt.Errorf("create container %s: %w", name, err)
	}
	return resp.GetContainerId(), nil
}

// run creates and starts a container (see create), waits for it to exit 0
// and returns its log.
func (s criSandbox) run(ctx context.Context, rs runtimeapi.RuntimeServiceClient, name, cdiDevice string) (string, error) {
	id, err := s.create(ctx, rs, name, cdiDevice)
	if err != nil {
		return "", err
	}
	if _, err := rs.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		return "", fmt.Errorf("start container %s: %w", name, err)
	}
	for {
		st, err := rs.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			return "", fmt.Errorf("status of container %s: %w", name, err)
		}
		if st.GetStatus().GetState() == runtimeapi.ContainerState_CONTAINER_EXITED {
			if code := st.GetStatus().GetExitCode(); code != 0 {
				return "", fmt.Errorf("container %s exited with %d: %s", name, code, st.GetStatus().GetMessage())
			}
			break
		}
		select {
		case <-ctx.Done():
			return "", errors.Join(fmt.Errorf("waiting for container %s to exit", name), ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	log, err := os.ReadFile(filepath.Join(s.config.GetLogDirectory(), name+".log"))
	if err != nil {
		return "", fmt.Errorf("log of container %s: %w", name, err)
	}
	return string(log), nil
}
