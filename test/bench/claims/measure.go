package claims

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/dra"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/test/cluster"
	"github.com/carve-dev/carve/test/harness"
)

// The run's objects: the profile ConfigMap in a namespace of its own, the
// DeviceClass of carve's MIG devices, and the claims and pods in default.
const (
	cmNamespace  = "carve-bench-claims"
	cmName       = "carve-profiles"
	className    = "carve-bench-claims-mig"
	objNamespace = metav1.NamespaceDefault
	// Machine is the simulated machine: two H100s.
	Machine = "h100-80gb*2"
)

// profiles is the run's profile file: GPU 0 static with seven 1g.10gb,
// GPU 1 dynamic offering 1g.10gb and 3g.40gb.
const profiles = `version: v1
defaultProfile: hybrid
profiles:
  hybrid:
    - gpus: [0]
      mig: {1g.10gb: 7}
    - gpus: [1]
      dynamic: {profiles: [1g.10gb, 3g.40gb]}
`

// staticDevices is the number of static devices GPU 0 has under profiles.
const staticDevices = 7

// measurer runs one measurement.
type measurer struct {
	o       Options
	c       *cluster.Cluster
	cs      kubernetes.Interface
	latency string
	samples int
	// agentLog and simState are the agent's log and its simulator's state
	// file.
	agentLog, simState string
}

func (m *measurer) logf(format string, args ...any) {
	fmt.Fprintf(m.o.Log, "claims: "+format+"\n", args...)
}

// measure starts the agent and takes the samples, the kinds in turn.
func (m *measurer) measure(ctx context.Context) ([]Series, error) {
	if err := harness.ApplyProfiles(ctx, m.cs, cmNamespace, cmName, profiles); err != nil {
		return nil, err
	}
	if _, err := m.cs.ResourceV1().DeviceClasses().Create(ctx, migClass(), metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("DeviceClass %s: %w", className, err)
	}
	agent, err := m.startAgent()
	if err != nil {
		return nil, err
	}
	defer func() { _, _ = agent.Stop() }()
	if err := m.waitReady(ctx); err != nil {
		return nil, fmt.Errorf("%w (agent log %s:\n%s)", err, m.agentLog, harness.Tail(m.agentLog, 15))
	}
	kinds := Kinds()
	series := make([]Series, len(kinds))
	for i := range m.samples {
		for k, kind := range kinds {
			s, err := m.sample(ctx, kind, fmt.Sprintf("carve-bench-claims-%d-%d", k, i))
			if err != nil {
				return nil, fmt.Errorf("%s, sample %d: %w (agent log %s:\n%s)", kind.Name, i+1, err, m.agentLog, harness.Tail(m.agentLog, 15))
			}
			m.logf("%s: running after %s", kind.Name, s.Running.Round(time.Millisecond))
			series[k].Kind = kind
			series[k].Samples = append(series[k].Samples, s)
		}
	}
	code, err := agent.Stop()
	if err == nil && code != 0 {
		err = fmt.Errorf("exit code %d", code)
	}
	if err != nil {
		return nil, fmt.Errorf("carve-agent did not stop cleanly: %w (log %s:\n%s)", err, m.agentLog, harness.Tail(m.agentLog, 15))
	}
	return series, nil
}

// migClass selects carve's MIG devices, static and dynamic.
func migClass() *resourceapi.DeviceClass {
	cel := `device.driver == "` + dra.DriverName + `" && device.attributes["` + dra.DriverName + `"].type == "mig"`
	return &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: className},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: cel}}}}}
}

// startAgent starts carve-agent on the node as a DRA driver, with the
// simulated GPUs at the run's latency.
func (m *measurer) startAgent() (*harness.Process, error) {
	dir := filepath.Join(m.o.WorkDir, "agent")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("start carve-agent: %w", err)
	}
	m.agentLog, m.simState = filepath.Join(dir, "agent.log"), filepath.Join(dir, "sim-state.json")
	args := []string{
		"--node-name", m.c.NodeName(), "--kubeconfig", m.c.Kubeconfig(), "--config-map", cmNamespace + "/" + cmName,
		"--gpus", "sim:" + Machine, "--sim-state", m.simState, "--sim-latency", m.latency,
		"--state-dir", filepath.Join(dir, "state"), "--pod-resources-socket", m.c.PodResourcesSocket(),
		"--metrics-addr", "127.0.0.1:0", "--advertise", "dra",
		"--kubelet-root-dir", m.c.KubeletRootDir(), "--cdi-dir", m.c.CDIDir(),
	}
	m.logf("carve-agent --gpus sim:%s --sim-latency %s --advertise dra", Machine, m.latency)
	return harness.Start(m.o.Agent, args, nil, m.agentLog)
}

// waitReady waits until the hybrid profile is in force and the node's
// pool offers GPU 0's static devices and GPU 1's dynamic ones.
func (m *measurer) waitReady(ctx context.Context) error {
	if _, err := harness.WaitState(ctx, m.cs, m.c.NodeName(), carvev1.StateSuccess, "hybrid", 3*time.Minute); err != nil {
		return err
	}
	selector := fields.OneTermEqualSelector("spec.nodeName", m.c.NodeName()).String()
	var static, dynamic int
	err := harness.Poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		list, err := m.cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			return false, harness.Retry(err)
		}
		static, dynamic = 0, 0
		for _, s := range list.Items {
			if s.Spec.Driver != dra.DriverName {
				continue
			}
			for _, d := range s.Spec.Devices {
				switch {
				case strings.HasPrefix(d.Name, "gpu-0-mig-1g10gb-"):
					static++
				case strings.HasPrefix(d.Name, "gpu-1-dyn-"):
					dynamic++
				}
			}
		}
		return static == staticDevices && dynamic > 0, nil
	})
	if err != nil {
		return fmt.Errorf("the pool offers %d static 1g.10gb on GPU 0 (want %d) and %d dynamic devices on GPU 1: %w", static, staticDevices, dynamic, err)
	}
	return nil
}

// gpuInstances returns the number of GPU instances the simulator's state
// file holds on GPU index.
func (m *measurer) gpuInstances(index int) (int, error) {
	b, err := os.ReadFile(m.simState)
	if err != nil {
		return 0, fmt.Errorf("simulator state: %w", err)
	}
	st, err := sim.ParseState(b)
	if err != nil {
		return 0, fmt.Errorf("simulator state %s: %w", m.simState, err)
	}
	for _, g := range st.GPUs {
		if g.Index == index {
			return len(g.Instances), nil
		}
	}
	return 0, nil
}

// clean deletes the run's claims, pods, DeviceClass and ConfigMap and
// resets the node.
func (m *measurer) clean(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var errs []error
	pods, err := m.cs.CoreV1().Pods(objNamespace).List(ctx, metav1.ListOptions{})
	errs = append(errs, err)
	if err == nil {
		for _, p := range pods.Items {
			if strings.HasPrefix(p.Name, "carve-bench-claims-") {
				errs = append(errs, harness.DeletePod(ctx, m.cs, objNamespace, p.Name))
			}
		}
	}
	claims, err := m.cs.ResourceV1().ResourceClaims(objNamespace).List(ctx, metav1.ListOptions{})
	errs = append(errs, err)
	if err == nil {
		for _, c := range claims.Items {
			if strings.HasPrefix(c.Name, "carve-bench-claims-") {
				errs = append(errs, ignoreNotFound(m.cs.ResourceV1().ResourceClaims(objNamespace).Delete(ctx, c.Name, metav1.DeleteOptions{})))
			}
		}
	}
	errs = append(errs, ignoreNotFound(m.cs.ResourceV1().DeviceClasses().Delete(ctx, className, metav1.DeleteOptions{})),
		harness.DeleteProfiles(ctx, m.cs, cmNamespace, cmName), harness.ResetNode(ctx, m.cs, m.c.NodeName()))
	return errors.Join(errs...)
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
