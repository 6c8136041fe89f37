package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// withCRI dials containerd's CRI service at socket and calls fn.
func withCRI(socket string, fn func(runtimeapi.RuntimeServiceClient, runtimeapi.ImageServiceClient) error) error {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connect to CRI at %s: %w", socket, err)
	}
	defer conn.Close()
	return fn(runtimeapi.NewRuntimeServiceClient(conn), runtimeapi.NewImageServiceClient(conn))
}

// criReady checks that the runtime answers and reports both RuntimeReady
// and NetworkReady (the CNI config was loaded), the conditions the kubelet
// requires. Others are informational and ignored, as the kubelet does:
// containerd 2 reports ContainerdHasNoDeprecationWarnings false on a host
// with cgroup v1, for instance.
func criReady(ctx context.Context, socket string) error {
	return withCRI(socket, func(rs runtimeapi.RuntimeServiceClient, _ runtimeapi.ImageServiceClient) error {
		st, err := rs.Status(ctx, &runtimeapi.StatusRequest{})
		if err != nil {
			return fmt.Errorf("CRI status: %w", err)
		}
		return requiredConditions(st.GetStatus().GetConditions())
	})
}

// requiredConditions checks that conds has RuntimeReady and NetworkReady,
// both true.
func requiredConditions(conds []*runtimeapi.RuntimeCondition) error {
	for _, want := range []string{runtimeapi.RuntimeReady, runtimeapi.NetworkReady} {
		i := slices.IndexFunc(conds, func(c *runtimeapi.RuntimeCondition) bool { return c.GetType() == want })
		if i < 0 {
			return fmt.Errorf("CRI reports no condition %s yet", want)
		}
		if c := conds[i]; !c.GetStatus() {
			return fmt.Errorf("CRI condition %s is false: %s %s", want, c.GetReason(), c.GetMessage())
		}
	}
	return nil
}

// criHasImage checks that the CRI image service knows image.
func criHasImage(ctx context.Context, socket, image string) error {
	return withCRI(socket, func(_ runtimeapi.RuntimeServiceClient, is runtimeapi.ImageServiceClient) error {
		resp, err := is.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: image}})
		if err != nil {
			return fmt.Errorf("CRI image status of %s: %w", image, err)
		}
		if resp.GetImage() == nil {
			return fmt.Errorf("CRI does not know image %s yet", image)
		}
		return nil
	})
}

// removeAllPods stops and removes every pod sandbox (and so every container)
// through the CRI, so that containerd kills the containers, unmounts their
// file systems and lets their shims exit before it is stopped itself.
func removeAllPods(socket string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return withCRI(socket, func(rs runtimeapi.RuntimeServiceClient, _ runtimeapi.ImageServiceClient) error {
		var errs []error
		ctrs, err := rs.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
		if err != nil {
			return fmt.Errorf("list containers: %w", err)
		}
		for _, ct := range ctrs.GetContainers() {
			if _, err := rs.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: ct.GetId(), Timeout: 2}); err != nil {
				errs = append(errs, fmt.Errorf("stop container %s: %w", ct.GetId(), err))
			}
		}
		pods, err := rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("list pod sandboxes: %w", err))...)
		}
		for _, pod := range pods.GetItems() {
			id := pod.GetId()
			if _, err := rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
				errs = append(errs, fmt.Errorf("stop pod sandbox %s: %w", id, err))
				continue
			}
			if _, err := rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
				errs = append(errs, fmt.Errorf("remove pod sandbox %s: %w", id, err))
			}
		}
		return errors.Join(errs...)
	})
}
