//go:build carve_kube

// Command kube is the Kubernetes control plane and kubelet of carve's local
// test cluster in one multi-call binary: kube-apiserver,
// kube-controller-manager, kube-scheduler and kubelet, linked once instead
// of four times. The component runs is the name the binary was started by
// (test/cluster links each name to it), or the first argument:
//
//	kube-apiserver --etcd-servers=...
//	kube kubelet --config=...
//
// Each component runs exactly as its upstream main package does (the same
// command, the same registered log formats and metrics). Only the build tag
// carve_kube builds it, so that go test, go vet and the linter over the
// test module's ./... do not compile Kubernetes.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format, as every component's main registers it
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // the version metric
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"

	_ "time/tzdata" // CronJob time zones, as kube-apiserver's and kube-controller-manager's mains embed them
)

// commands are the components, by the name each upstream binary has.
func commands() map[string]func() *cobra.Command {
	return map[string]func() *cobra.Command{
		"kube-apiserver":          apiserver.NewAPIServerCommand,
		"kube-controller-manager": controllermanager.NewControllerManagerCommand,
		"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
		"kubelet":                 func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
	}
}

func main() {
	os.Exit(run(os.Args))
}

// run starts the component named by args[0]'s base name, or by args[1]
// when the binary runs under its own name, and returns its exit code.
func run(args []string) int {
	cmds := commands()
	name, rest := filepath.Base(args[0]), args[1:]
	if _, ok := cmds[name]; !ok && len(rest) > 0 {
		name, rest = rest[0], rest[1:]
	}
	newCommand, ok := cmds[name]
	if !ok {
		names := make([]string, 0, len(cmds))
		for n := range cmds {
			names = append(names, n)
		}
		slices.Sort(names)
		fmt.Fprintf(os.Stderr, "usage: kube COMPONENT [flags], or run it as COMPONENT; COMPONENT is one of %s\n",
			strings.Join(names, ", "))
		return 2
	}
	command := newCommand()
	command.SetArgs(rest)
	return cli.Run(command)
}
