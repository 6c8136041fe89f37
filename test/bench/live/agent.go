package live

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/carve-dev/carve/test/cluster"
	"github.com/carve-dev/carve/test/harness"
)

// agentProc is one carve-agent process.
type agentProc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

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
func (r *agentRunner) start() (*agentProc, error) {
	log, err := os.OpenFile(r.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start carve-agent: %w", err)
	}
	// The process lives until stop, not as long as a context.
	cmd := exec.CommandContext(context.Background(), r.bin, r.args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, errors.Join(fmt.Errorf("start carve-agent: %w", err), log.Close())
	}
	p := &agentProc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = errors.Join(cmd.Wait(), log.Close())
		close(p.done)
	}()
	return p, nil
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

// pid is the process's id.
func (p *agentProc) pid() int { return p.cmd.Process.Pid }

// running reports whether the process has not exited.
func (p *agentProc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// terminate sends SIGTERM.
func (p *agentProc) terminate() error {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("SIGTERM to carve-agent %d: %w", p.pid(), err)
	}
	return nil
}

// wait waits up to limit for the process to exit (killing it then) and
// reports an exit other than a clean one.
func (p *agentProc) wait(limit time.Duration) error {
	select {
	case <-p.done:
	case <-time.After(limit):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("carve-agent %d did not exit within %s of SIGTERM; killed", p.pid(), limit)
	}
	if p.err != nil {
		return fmt.Errorf("carve-agent %d: %w", p.pid(), p.err)
	}
	return nil
}

// stop terminates the process and waits for it; a process already gone
// is reported as it ended.
func (p *agentProc) stop() error {
	if p.running() {
		_ = p.terminate()
	}
	return p.wait(30 * time.Second)
}
