package memory

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/carve-dev/carve/dra"
	"github.com/carve-dev/carve/test/harness"
)

// DRA mode's states: the whole GPUs of a DGX H100, and the dense profile,
// whose 8 x 7 MIG devices are each one device of the ResourceSlice that
// 16 allocations may share (time-slicing is a device's consumable
// capacity under DRA, not 16 devices).
const (
	DRAWholeDevices = 8
	DRADenseDevices = 8 * 7
)

// dra runs carve-agent with --advertise dra, idle on whole GPUs and then
// dense, and reads it in each state; the node's ResourceSlices count the
// devices.
func (m *measurer) dra(ctx context.Context, res *Result) error {
	agent, err := m.startAgent("agent-dra", []string{"--advertise", "dra",
		"--kubelet-root-dir", m.c.KubeletRootDir(), "--cdi-dir", m.c.CDIDir()})
	if err != nil {
		return err
	}
	defer func() { _, _ = agent.Stop() }()
	idle, err := m.phase(ctx, agent, "DRA: idle, whole GPUs", DRAWholeDevices, func(ctx context.Context) error {
		if err := m.waitProfile(ctx, "whole"); err != nil {
			return err
		}
		_, err := m.waitSliceDevices(ctx, DRAWholeDevices)
		return err
	})
	if err != nil {
		return fmt.Errorf("%w (agent log %s:\n%s)", err, agent.log, harness.Tail(agent.log, 15))
	}
	dense, err := m.phase(ctx, agent, "DRA: dense, 8 x 7 MIG 1g.10gb, each shared by 16", DRADenseDevices, func(ctx context.Context) error {
		if err := m.setProfile(ctx, "dense"); err != nil {
			return err
		}
		n, err := m.waitSliceDevices(ctx, DRADenseDevices)
		res.DRADevices = n
		return err
	})
	if err != nil {
		return fmt.Errorf("%w (agent log %s:\n%s)", err, agent.log, harness.Tail(agent.log, 15))
	}
	res.DRA = []Reading{idle, dense}
	return stopAgent(agent)
}

// waitSliceDevices waits until carve's ResourceSlices of the node list
// want devices, and returns the count.
func (m *measurer) waitSliceDevices(ctx context.Context, want int) (int, error) {
	selector := fields.OneTermEqualSelector("spec.nodeName", m.c.NodeName()).String()
	var n int
	err := harness.PollEvery(ctx, 100*time.Millisecond, 2*time.Minute, func(ctx context.Context) (bool, error) {
		list, err := m.cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			return false, err
		}
		n = 0
		for _, s := range list.Items {
			if s.Spec.Driver == dra.DriverName {
				n += len(s.Spec.Devices)
			}
		}
		return n == want, nil
	})
	if err != nil {
		return n, fmt.Errorf("ResourceSlices of %s: %d devices, want %d: %w", m.c.NodeName(), n, want, err)
	}
	return n, nil
}
