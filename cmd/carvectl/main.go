package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

const usage = `carvectl — the operator's CLI for carve

Usage:
  carvectl validate -f profiles.yaml [--gpus sim:<machine>|nvml]
  carvectl plan     -f profiles.yaml --profile NAME --gpus sim:<machine>|nvml [--from STATE.json]
                    [--sim-latency realistic|DURATION|op=DURATION,...] [-o table|json]
  carvectl plan     --node NAME [--profile NAME] [--config-map NS/NAME] [--kubeconfig PATH] [-o table|json]
                    (the plan the node's agent would make now, from its record; nothing on the node is touched)
  carvectl windows  -f profiles.yaml [--node-labels k=v,...] [--from TIME] [--for 7d]
  carvectl status   [--kubeconfig PATH] [--selector k=v] [--config-map NS/NAME] [-o table|json]
                    [-w|--watch]
  carvectl import   mig-parted -f config.yaml [--device-plugin-config dp.yaml ...]
                    [--device-plugin-default NAME]
  carvectl prune    [--kubeconfig PATH] [--selector k=v | --node NAME] [--dry-run] [--force]
                    (after uninstalling: removes carve's node labels and annotation)
  carvectl rollout  release NODE [--config-map NS/NAME] [--dry-run] [--force] [--kubeconfig PATH]
                    (frees the rollout slot NODE holds; refused while its agent renews it, unless --force)
  carvectl version  [--client] [--kubeconfig PATH] [--selector k=v] [-o table|json]
                    (carvectl's version, and the agents' versions across the cluster)

Simulated machines: sim:dgx-a100, sim:dgx-a100-80, sim:dgx-h100, sim:hgx-h200,
sim:a30x4, or a list such as sim:h100-80gb*2,a100-40gb*1.

Run 'carvectl COMMAND -h' for a command's flags.
`

// exitError carries a process exit code; its message has been printed.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

// parseFlags parses a command's flags and refuses arguments that are not
// flags: Go's flag package stops at the first one, so the flags after a
// stray word would otherwise be dropped without a word.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return exitError{2}
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: %s takes flags only (the flags after it were not read)", fs.Arg(0), fs.Name())
	}
	return nil
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one carvectl command and returns the process exit code:
// 0 success, 1 a problem found (invalid profile, impossible plan), 2 bad
// usage or an error running the command.
func run(args []string, stdout, stderr io.Writer) int {
	return runWith(args, stdout, stderr, newStatusClient)
}

// runWith is run with the Kubernetes client factory of carvectl status,
// prune, rollout and version given, so tests can use a fake API.
func runWith(args []string, stdout, stderr io.Writer, newClient statusClientFunc) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "validate":
		err = runValidate(args[1:], stdout, stderr)
	case "plan":
		err = runPlan(args[1:], stdout, stderr, newClient)
	case "windows":
		err = runWindows(args[1:], stdout, stderr)
	case "status":
		err = runStatus(args[1:], stdout, stderr, newClient)
	case "import":
		err = runImport(args[1:], stdout, stderr)
	case "prune":
		err = runPrune(args[1:], stdout, stderr, newClient)
	case "rollout":
		err = runRollout(args[1:], stdout, stderr, newClient)
	case "version":
		err = runVersion(args[1:], stdout, stderr, newClient)
	case "--version":
		err = runVersion(append([]string{"--client"}, args[1:]...), stdout, stderr, newClient)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "carvectl: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	default:
		fmt.Fprintf(stderr, "carvectl %s: %v\n", args[0], err)
		return 2
	}
}
