package claims

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/carve-dev/carve/dra"
	"github.com/carve-dev/carve/test/harness"
)

// sampleLimit bounds one sample's wait for the pod to run, and for its
// device to be gone after.
const sampleLimit = 2 * time.Minute

// sample creates a claim for one device of kind and a pod that takes it,
// times them to Running from the claim's create call, then deletes both
// and waits until the device is unprepared (CDI spec gone) and, for a
// dynamic device, destroyed.
func (m *measurer) sample(ctx context.Context, kind Kind, name string) (Sample, error) {
	ctx, cancel := context.WithTimeout(ctx, sampleLimit)
	defer cancel()
	// ResourceVersion 0: served from the watch cache at once, which a
	// cache that has seen no event of its kind yet cannot do for "now".
	byName := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(), ResourceVersion: "0"}
	podWatch, err := m.cs.CoreV1().Pods(objNamespace).Watch(ctx, byName)
	if err != nil {
		return Sample{}, fmt.Errorf("watch pod %s: %w", name, err)
	}
	claimWatch, err := m.cs.ResourceV1().ResourceClaims(objNamespace).Watch(ctx, byName)
	if err != nil {
		podWatch.Stop()
		return Sample{}, fmt.Errorf("watch claim %s: %w", name, err)
	}
	start := time.Now()
	claim, err := m.cs.ResourceV1().ResourceClaims(objNamespace).Create(ctx, claimOf(name, kind), metav1.CreateOptions{})
	if err == nil {
		_, err = m.cs.CoreV1().Pods(objNamespace).Create(ctx, podOf(name), metav1.CreateOptions{})
	}
	if err != nil {
		podWatch.Stop()
		claimWatch.Stop()
		return Sample{}, fmt.Errorf("create %s: %w", name, err)
	}
	type allocation struct {
		at     time.Time
		device string
		err    error
	}
	allocated := make(chan allocation, 1)
	go func() {
		var device string
		at, err := watchUntil(ctx, claimWatch, func(ev watch.Event) (bool, error) {
			c, ok := ev.Object.(*resourceapi.ResourceClaim)
			if !ok || c.Status.Allocation == nil || len(c.Status.Allocation.Devices.Results) == 0 {
				return false, nil
			}
			device = c.Status.Allocation.Devices.Results[0].Device
			return true, nil
		})
		allocated <- allocation{at, device, err}
	}()
	running, err := watchUntil(ctx, podWatch, podRunning)
	a := <-allocated
	if err = errors.Join(err, a.err); err != nil {
		return Sample{}, fmt.Errorf("claim %s to a running pod: %w", name, err)
	}
	s := Sample{Allocated: a.at.Sub(start), Running: running.Sub(start), Device: a.device}
	if kind.Dynamic {
		made, err := madeAt(m.agentLog, string(claim.UID))
		if err != nil {
			return s, err
		}
		s.Made = made.Sub(start)
	}
	return s, m.release(ctx, kind, name, string(claim.UID))
}

// podRunning is true once the pod is Running; a pod that ended is an
// error.
func podRunning(ev watch.Event) (bool, error) {
	p, ok := ev.Object.(*corev1.Pod)
	if !ok {
		return false, nil
	}
	switch p.Status.Phase {
	case corev1.PodRunning:
		return true, nil
	case corev1.PodFailed, corev1.PodSucceeded:
		return false, fmt.Errorf("pod %s ended (%s): %s %s", p.Name, p.Status.Phase, p.Status.Reason, p.Status.Message)
	}
	return false, nil
}

// watchUntil reads w until cond holds and returns the time the event that
// made it hold was received. It stops w.
func watchUntil(ctx context.Context, w watch.Interface, cond func(watch.Event) (bool, error)) (time.Time, error) {
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case ev, ok := <-w.ResultChan():
			at := time.Now()
			if !ok {
				return time.Time{}, errors.New("the watch ended")
			}
			if ev.Type == watch.Error {
				return time.Time{}, apierrors.FromObject(ev.Object)
			}
			if done, err := cond(ev); done || err != nil {
				return at, err
			}
		}
	}
}

// release deletes the pod and the claim and waits until the claim is
// gone, its CDI spec removed (the kubelet unprepared it) and, for a
// dynamic device, GPU 1 holds no instance; GPU 0 must keep its seven.
func (m *measurer) release(ctx context.Context, kind Kind, name, uid string) error {
	if err := harness.DeletePod(ctx, m.cs, objNamespace, name); err != nil {
		return err
	}
	claims := m.cs.ResourceV1().ResourceClaims(objNamespace)
	if err := claims.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete claim %s: %w", name, err)
	}
	spec := filepath.Join(m.c.CDIDir(), dra.DriverName+"_claim_"+uid+".json")
	var static, dynamic int
	err := harness.PollEvery(ctx, 50*time.Millisecond, sampleLimit, func(ctx context.Context) (bool, error) {
		if _, err := claims.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return false, harness.Retry(err)
		}
		if _, err := os.Stat(spec); !errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		var err error
		if static, err = m.gpuInstances(0); err != nil {
			return false, err
		}
		if dynamic, err = m.gpuInstances(1); err != nil {
			return false, err
		}
		return dynamic == 0, nil
	})
	if err != nil {
		return fmt.Errorf("after deleting %s, its claim, CDI spec or device is still there (GPU 1 holds %d instances): %w", name, dynamic, err)
	}
	if static != staticDevices {
		return fmt.Errorf("after %s (%s), the static GPU 0 holds %d instances, want %d", name, kind.Name, static, staticDevices)
	}
	return nil
}

// claimOf is a claim for one MIG device of kind's profile on kind's GPU.
func claimOf(name string, kind Kind) *resourceapi.ResourceClaim {
	attr := `device.attributes["` + dra.DriverName + `"].`
	cel := attr + `index == ` + strconv.Itoa(kind.GPU) + ` && ` + attr + `profile == "` + kind.Profile + `"`
	req := resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: className, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: cel}}},
	}}
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: objNamespace, Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{req}}}}
}

// podOf is a pod that takes the claim name and sleeps until deleted.
func podOf(name string) *corev1.Pod {
	p := harness.ResourcePod(name, nil, time.Hour)
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &name}}
	p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	return p
}
