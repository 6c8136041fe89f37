package memory

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/test/cluster"
	"github.com/carve-dev/carve/test/harness"
)

// The profile ConfigMap of the run, in a namespace of its own.
const (
	cmNamespace = "carve-bench-memory"
	cmName      = "carve-profiles"
)

// profiles is the run's profile file for a DGX H100: whole GPUs, two MIG
// geometries to repartition between, and dense, 896 devices (8 GPUs x 7
// 1g.10gb x 16 replicas).
const profiles = `version: v1
defaultProfile: whole
profiles:
  whole: []
  balanced:
    - gpus: all
      mig: {1g.10gb: 2, 2g.20gb: 1, 3g.40gb: 1}
  small:
    - gpus: all
      mig: {1g.10gb: 7}
  dense:
    - gpus: all
      mig: {1g.10gb: 7}
      timeSlicing: {replicas: 16}
`

// DenseResource and DenseDevices are what the dense profile advertises.
const (
	DenseResource = "nvidia.com/mig-1g.10gb"
	DenseDevices  = 8 * 7 * 16
)

// Result is what Measure read.
type Result struct {
	// Agent holds carve-agent's readings, one per state: idle on whole
	// GPUs, whole again after repartitions, dense.
	Agent []Reading
	// Floor is the floor (clientset)'s reading, NarrowFloor the floor
	// (narrow client)'s and DRAFloor the floor (DRA library)'s, each
	// taken while the agent idled in device-plugin mode.
	Floor, NarrowFloor, DRAFloor Reading
	// DRA holds carve-agent's readings with --advertise dra: idle on
	// whole GPUs, and dense.
	DRA []Reading
	// DRADevices is the count of devices of the node's ResourceSlices
	// once dense was in force with --advertise dra.
	DRADevices int
	// DenseAllocatable is the Node's allocatable DenseResource once dense
	// was in force.
	DenseAllocatable int64
	// NodeJSON and NodeManagedFieldsJSON are the sizes of the Node object
	// as the API server serves it (JSON) and of its managedFields, and
	// ConfigMapJSON that of the profile ConfigMap: what the agent's
	// informers cache, at 896 devices.
	NodeJSON, NodeManagedFieldsJSON, ConfigMapJSON int
	// Took is how long the measurement ran.
	Took time.Duration
}

// Reading is one process's memory in one state.
type Reading struct {
	// State names it ("idle, whole GPUs").
	State string
	// Devices is the number of devices advertised (0 for a floor).
	Devices int
	// Max is the most RSS seen from the start of the state's change to
	// the settled reading, sampled every 100 ms.
	Max uint64
	// Settled is read after Options' idle period; Go after it.
	Settled Mem
	Go      GoMem
}

// measurer runs one measurement.
type measurer struct {
	o            Options
	c            *cluster.Cluster
	cs           kubernetes.Interface
	settle       time.Duration
	repartitions int
}

func (m *measurer) logf(format string, args ...any) {
	fmt.Fprintf(m.o.Log, "memory: "+format+"\n", args...)
}

// cleanNode removes the run's ConfigMap and what an agent wrote on the
// node.
func (m *measurer) cleanNode(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := harness.DeleteProfiles(ctx, m.cs, cmNamespace, cmName); err != nil {
		return err
	}
	return harness.ResetNode(ctx, m.cs, m.c.NodeName())
}

// measure starts the floors and the agent and reads them in each state,
// then the agent again with --advertise dra.
func (m *measurer) measure(ctx context.Context) (Result, error) {
	var res Result
	if err := harness.ApplyProfiles(ctx, m.cs, cmNamespace, cmName, profiles); err != nil {
		return res, err
	}
	floors, err := m.startFloors(ctx)
	defer m.stopFloors(floors)
	if err != nil {
		return res, err
	}
	if err := m.devicePlugin(ctx, &res, floors); err != nil {
		return res, err
	}
	if err := harness.ResetNode(ctx, m.cs, m.c.NodeName()); err != nil {
		return res, err
	}
	return res, m.dra(ctx, &res)
}

// devicePlugin runs the agent in device-plugin mode through its states,
// and reads the floors while it idles.
func (m *measurer) devicePlugin(ctx context.Context, res *Result, floors []*proc) error {
	agent, err := m.startAgent("agent", nil)
	if err != nil {
		return err
	}
	defer func() { _, _ = agent.Stop() }()
	if res.Agent, err = m.states(ctx, agent); err != nil {
		return fmt.Errorf("%w (agent log %s:\n%s)", err, agent.log, harness.Tail(agent.log, 15))
	}
	for i, dst := range []*Reading{&res.Floor, &res.NarrowFloor, &res.DRAFloor} {
		if *dst, err = m.readFloor(ctx, floors[i], floorPrograms[i].state); err != nil {
			return err
		}
	}
	if res.DenseAllocatable, err = m.allocatable(ctx); err != nil {
		return err
	}
	if err := m.objectSizes(ctx, res); err != nil {
		return err
	}
	return stopAgent(agent)
}

// stopAgent stops the agent and says if it did not stop cleanly.
func stopAgent(agent *proc) error {
	code, err := agent.Stop()
	if err == nil && code != 0 {
		err = fmt.Errorf("exit code %d", code)
	}
	if err != nil {
		return fmt.Errorf("carve-agent did not stop cleanly: %w (log %s:\n%s)", err, agent.log, harness.Tail(agent.log, 15))
	}
	return nil
}

// states takes the agent through its three states and reads it in each.
func (m *measurer) states(ctx context.Context, agent *proc) ([]Reading, error) {
	idle, err := m.phase(ctx, agent, "idle, whole GPUs", 8, func(ctx context.Context) error {
		return m.waitProfile(ctx, "whole")
	})
	if err != nil {
		return nil, err
	}
	again, err := m.phase(ctx, agent, fmt.Sprintf("whole GPUs after %d repartitions", m.repartitions), 8, m.repartition)
	if err != nil {
		return nil, err
	}
	dense, err := m.phase(ctx, agent, "dense: 8 x 7 MIG 1g.10gb x 16 replicas", DenseDevices, func(ctx context.Context) error {
		if err := m.setProfile(ctx, "dense"); err != nil {
			return err
		}
		_, err := harness.WaitAllocatable(ctx, m.cs, m.c.NodeName(), map[string]int64{DenseResource: DenseDevices}, 2*time.Minute)
		return err
	})
	if err != nil {
		return nil, err
	}
	return []Reading{idle, again, dense}, nil
}

// repartition changes the GPUs between two MIG geometries, and back to
// whole GPUs.
func (m *measurer) repartition(ctx context.Context) error {
	for i := range m.repartitions {
		p := "balanced"
		if i%2 == 1 {
			p = "small"
		}
		if err := m.setProfile(ctx, p); err != nil {
			return err
		}
	}
	return m.setProfile(ctx, "whole")
}

// setProfile labels the node with a profile and waits until it is in
// force.
func (m *measurer) setProfile(ctx context.Context, profile string) error {
	m.logf("profile %s", profile)
	if err := harness.SetNodeLabels(ctx, m.cs, m.c.NodeName(), map[string]string{carvev1.LabelProfile: profile}); err != nil {
		return err
	}
	return m.waitProfile(ctx, profile)
}

func (m *measurer) waitProfile(ctx context.Context, profile string) error {
	_, err := harness.WaitState(ctx, m.cs, m.c.NodeName(), carvev1.StateSuccess, profile, 2*time.Minute)
	return err
}

// allocatable returns the Node's allocatable DenseResource.
func (m *measurer) allocatable(ctx context.Context) (int64, error) {
	n, err := m.cs.CoreV1().Nodes().Get(ctx, m.c.NodeName(), metav1.GetOptions{})
	if err != nil {
		return 0, fmt.Errorf("node %s: %w", m.c.NodeName(), err)
	}
	return harness.Allocatable(n)[DenseResource], nil
}

// objectSizes measures the objects the agent's informers cache.
func (m *measurer) objectSizes(ctx context.Context, res *Result) error {
	n, err := m.cs.CoreV1().Nodes().Get(ctx, m.c.NodeName(), metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("node %s: %w", m.c.NodeName(), err)
	}
	cm, err := m.cs.CoreV1().ConfigMaps(cmNamespace).Get(ctx, cmName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("ConfigMap %s/%s: %w", cmNamespace, cmName, err)
	}
	sizes := []struct {
		dst *int
		v   any
	}{{&res.NodeJSON, n}, {&res.NodeManagedFieldsJSON, n.ManagedFields}, {&res.ConfigMapJSON, cm}}
	for _, s := range sizes {
		b, err := json.Marshal(s.v)
		if err != nil {
			return fmt.Errorf("object sizes: %w", err)
		}
		*s.dst = len(b)
	}
	return nil
}

// agentArgs are carve-agent's flags for the run: the cluster's node, a
// simulated DGX H100 whose state is kept in dir, no simulated latency.
func (m *measurer) agentArgs(dir string, port int, extra []string) []string {
	return append([]string{
		"--node-name", m.c.NodeName(), "--kubeconfig", m.c.Kubeconfig(), "--config-map", cmNamespace + "/" + cmName,
		"--gpus", "sim:dgx-h100", "--sim-state", filepath.Join(dir, "sim-state.json"), "--sim-latency", "none",
		"--state-dir", filepath.Join(dir, "state"), "--device-plugin-dir", m.c.DevicePluginDir(),
		"--pod-resources-socket", m.c.PodResourcesSocket(), "--metrics-addr", "127.0.0.1:" + strconv.Itoa(port),
	}, extra...)
}
