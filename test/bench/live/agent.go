package live

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/carve-dev/carve/test/cluster"
	"github.com/carve-dev/carve/test/harness"
)

// agentRunner starts carve-agent processes, each with the same flags.
type agentRunner struct {
	bin  string
	args []string
	log  string
}

// newAgentRunner prepares the flags of the agent for node c with the
// kubeconfig, its simulator state and state directory in dir.
func newAgentRunner(bin, kubeconfig, dir string, c *cluster.Cluster) *agentRunner {
	return &agentRunner{
		bin: bin,
		args: []string{
			"--node-name", c.NodeName(), "--kubeconfig", kubeconfig, "--config-map", namespace + "/" + configMapName,
			"--gpus", "sim:" + machine, "--sim-state", filepath.Join(dir, "sim-state.json"), "--sim-latency", "none",
			"--device-plugin-dir", c.DevicePluginDir(), "--pod-resources-socket", c.PodResourcesSocket(),
			"--state-dir", filepath.Join(dir, "state"), "--metrics-addr", "127.0.0.1:0",
		},
		log: filepath.Join(dir, "agent.log"),
	}
}

// start starts a process; its output is appended to the runner's log.
func (r *agentRunner) start() (*harness.Process, error) {
	return harness.Start(r.bin, r.args, nil, r.log)
}

// rateLimited counts the agents' PodResources calls the kubelet rejected
// for its rate limit: a sign that the benchmark's own polling disturbed
// what it measures.
func (r *agentRunner) rateLimited() (int, error) {
	b, err := os.ReadFile(r.log)
	if err != nil {
		return 0, fmt.Errorf("agent log: %w", err)
	}
	return bytes.Count(b, []byte("rejected by rate limit")), nil
}

// tail is the end of the agents' log, for an error message.
func (r *agentRunner) tail() string { return harness.Tail(r.log, 30) }

// waitExit waits up to limit for p to exit (killing it then) and reports
// an exit other than a clean one.
func waitExit(p *harness.Process, limit time.Duration) error {
	code, err := p.Wait(limit)
	if errors.Is(err, harness.ErrNotExited) {
		_ = p.Signal(syscall.SIGKILL)
		_, _ = p.Wait(5 * time.Second)
		return fmt.Errorf("carve-agent %d did not exit within %s of SIGTERM; killed", p.PID(), limit)
	}
	if err == nil && code != 0 {
		err = fmt.Errorf("exit code %d", code)
	}
	if err != nil {
		return fmt.Errorf("carve-agent %d: %w", p.PID(), err)
	}
	return nil
}

// stopAgent terminates p and waits for it; a process already gone is
// reported as it ended.
func stopAgent(p *harness.Process) error {
	if !p.Exited() {
		_ = p.Signal(syscall.SIGTERM)
	}
	return waitExit(p, 30*time.Second)
}
