package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/carve-dev/carve/partition/sim"
)

// usageHead is the usage text up to the simulated machines, which
// usageText adds from the simulator's own lists.
const usageHead = `carvectl — the operator's CLI for carve

Usage:
  carvectl validate -f profiles.yaml [--gpus sim:<machine>|nvml]
  carvectl plan     -f profiles.yaml --profile NAME --gpus sim:<machine>|nvml [--from STATE.json]
                    [--sim-latency realistic|DURATION|op=DURATION,...] [-o table|json]
  carvectl plan     --node NAME [--profile NAME] [--config-map NS/NAME] [--kubeconfig PATH] [-o table|json]
                    (the plan the node's agent would make now, from its record; nothing on the node is touched)
  carvectl windows  -f profiles.yaml [--node-labels k=v,...] [--from TIME] [--for 7d] [--tz ZONE]
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
  carvectl help     (this text; also -h, --help)
`

// usageText is carvectl's usage: every command with every flag, and every
// simulated machine and GPU model --gpus accepts.
func usageText() string {
	var b strings.Builder
	b.WriteString(usageHead)
	b.WriteString("\nSimulated machines (--gpus sim:NAME):\n")
	writeWrapped(&b, "  ", sim.MachineNames())
	b.WriteString("or a list of GPU models, each with an optional *COUNT (sim:h100-80gb*2,a100-40gb):\n")
	writeWrapped(&b, "  ", sim.ModelKeys())
	b.WriteString("\nRun 'carvectl COMMAND -h' for a command's flags.\n")
	return b.String()
}

// writeWrapped writes words comma-separated, in lines of at most about
// 80 characters, each starting with indent.
func writeWrapped(b *strings.Builder, indent string, words []string) {
	line := indent
	for i, w := range words {
		if i < len(words)-1 {
			w += ","
		}
		if len(line)+len(w)+1 > 80 && line != indent {
			b.WriteString(strings.TrimRight(line, " ") + "\n")
			line = indent
		}
		line += w + " "
	}
	b.WriteString(strings.TrimRight(line, " ") + "\n")
}

// splitConfigMap splits a --config-map value, namespace/name.
func splitConfigMap(v string) (namespace, name string, err error) {
	namespace, name, ok := strings.Cut(v, "/")
	if !ok || namespace == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("--config-map %q: want namespace/name", v)
	}
	return namespace, name, nil
}

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
		fmt.Fprint(stderr, usageText())
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
		fmt.Fprint(stdout, usageText())
		return 0
	default:
		fmt.Fprintf(stderr, "carvectl: unknown command %q\n\n%s", args[0], usageText())
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
