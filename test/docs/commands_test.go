package docs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
	helmcmd "helm.sh/helm/v4/pkg/cmd"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/component-base/logs"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	"mvdan.cc/sh/v3/pattern"
	"mvdan.cc/sh/v3/syntax"

	"github.com/carve-dev/carve/test/harness"
)

// placeholder stands for a part of a word only known when the command runs
// ($VAR, $(...), a glob): a value every flag type of pflag and Go's flag
// package accepts (string, bool, int, float, duration), so that the flag it
// is given to still parses.
const placeholder = "0"

// toolCall is one kubectl, helm or carvectl command of a shell snippet.
type toolCall struct {
	// Where is the page and line of the command, page.md:line.
	Where string
	// Tool is "kubectl", "helm" or "carvectl".
	Tool string
	// Args are the words after the tool's name, as the shell passes them.
	Args []string
}

// docCalls returns the kubectl, helm and carvectl commands of every sh and
// bash snippet of the documentation, and an error for each snippet that is
// not bash.
func docCalls(t *testing.T) ([]toolCall, []error) {
	t.Helper()
	var calls []toolCall
	var errs []error
	for _, p := range pages(t) {
		for _, s := range harness.Snippets(p.Text) {
			if s.Lang != "sh" && s.Lang != "bash" {
				continue
			}
			cs, err := shellCalls(p.Path, s)
			if err != nil {
				errs = append(errs, err)
			}
			calls = append(calls, cs...)
		}
	}
	return calls, errs
}

// shellCalls parses a sh or bash snippet of a page with a bash parser and
// returns the kubectl, helm and carvectl commands it runs, wherever they
// are: in pipelines, lists, loops, functions, $(...). A command of a shell
// function that passes its arguments on ("$@") is the function's too: with
// f() { kubectl -n ns "$@"; }, f get pods is kubectl -n ns get pods.
func shellCalls(page string, s harness.Snippet) ([]toolCall, error) {
	// Blank lines before the snippet put the parser's lines on the page's.
	src := strings.Repeat("\n", max(s.Line-1, 0)) + s.Text
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(src), page)
	if err != nil {
		return nil, fmt.Errorf("%w: the %s snippet is no bash (a usage synopsis belongs in a text block)", err, s.Lang)
	}
	var out []toolCall
	funcs := map[string][]*syntax.Word{}
	syntax.Walk(f, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.FuncDecl:
			if ws := passedOn(n, funcs); ws != nil {
				funcs[n.Name.Value] = ws
			}
		case *syntax.CallExpr:
			if tool, args := toolOf(words(withFunc(n.Args, funcs))); tool != "" {
				out = append(out, toolCall{Where: fmt.Sprintf("%s:%d", page, n.Pos().Line()), Tool: tool, Args: args})
			}
		}
		return true
	})
	return out, nil
}

// passedOn returns the words of the first command of a shell function that
// passes the function's arguments on ("$@"), nil if none does.
func passedOn(fd *syntax.FuncDecl, funcs map[string][]*syntax.Word) []*syntax.Word {
	var out []*syntax.Word
	syntax.Walk(fd.Body, func(n syntax.Node) bool {
		if c, ok := n.(*syntax.CallExpr); ok && out == nil && slices.ContainsFunc(c.Args, passesArgs) {
			out = withFunc(c.Args, funcs)
		}
		return out == nil
	})
	return out
}

// withFunc returns a command's words, with a call of a shell function that
// passes its arguments on replaced by the command it passes them to.
func withFunc(ws []*syntax.Word, funcs map[string][]*syntax.Word) []*syntax.Word {
	if len(ws) == 0 || funcs[ws[0].Lit()] == nil {
		return ws
	}
	var out []*syntax.Word
	for _, w := range funcs[ws[0].Lit()] {
		if passesArgs(w) {
			out = append(out, ws[1:]...)
		} else {
			out = append(out, w)
		}
	}
	return out
}

// passesArgs reports whether a word is a function's or script's arguments,
// "$@", $@, "$*" or $*.
func passesArgs(w *syntax.Word) bool {
	if len(w.Parts) != 1 {
		return false
	}
	part := w.Parts[0]
	if q, ok := part.(*syntax.DblQuoted); ok && len(q.Parts) == 1 {
		part = q.Parts[0]
	}
	pe, ok := part.(*syntax.ParamExp)
	return ok && (pe.Param.Value == "@" || pe.Param.Value == "*")
}

// words returns the values of a command's words, without the arguments it
// passes on ("$@"): what they hold is not known.
func words(ws []*syntax.Word) []string {
	out := make([]string, 0, len(ws))
	for _, w := range ws {
		if !passesArgs(w) {
			out = append(out, wordValue(w))
		}
	}
	return out
}

// wordValue returns a word as the shell passes it to a command: quotes and
// backslash escapes removed, each part only known when it runs (a
// parameter, a command substitution, an unquoted glob, $'...')
// placeholder.
func wordValue(w *syntax.Word) string {
	var b strings.Builder
	for _, p := range w.Parts {
		writePart(&b, p, false)
	}
	return b.String()
}

// writePart writes the value of a part of a word, inside double quotes or
// not, to b.
func writePart(b *strings.Builder, p syntax.WordPart, quoted bool) {
	switch p := p.(type) {
	case *syntax.Lit:
		if !quoted && pattern.HasMeta(p.Value, 0) {
			b.WriteString(placeholder)
			return
		}
		b.WriteString(unescape(p.Value, quoted))
	case *syntax.SglQuoted:
		if p.Dollar {
			b.WriteString(placeholder)
			return
		}
		b.WriteString(p.Value)
	case *syntax.DblQuoted:
		for _, q := range p.Parts {
			writePart(b, q, true)
		}
	default:
		b.WriteString(placeholder)
	}
}

// unescape drops the backslashes of a literal that the shell drops: before
// any character outside quotes, before $ ` " \ and a newline inside double
// quotes; an escaped newline goes with its backslash.
func unescape(s string, quoted bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) && (!quoted || strings.IndexByte("$`\"\\\n", s[i+1]) >= 0) {
			i++
			if s[i] == '\n' {
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// toolOf returns the tool a command's words run, kubectl, helm or
// carvectl, and the words it passes it; "" for any other command. A tool
// is named by its name or a path to it, after sudo or env and their options
// and variables; carvectl also as go run ./cmd/carvectl, as kubectl-carve
// and as kubectl carve (the kubectl plugin), kubectl also as carve-cluster
// kubectl (the local cluster's).
func toolOf(ws []string) (string, []string) {
	for len(ws) > 0 {
		switch name := path.Base(ws[0]); {
		case name == "kubectl" && len(ws) > 1 && ws[1] == "carve":
			return "carvectl", ws[2:]
		case name == "kubectl-carve":
			return "carvectl", ws[1:]
		case name == "kubectl" || name == "helm" || name == "carvectl":
			return name, ws[1:]
		case name == "sudo" || name == "env":
			ws = skipOptions(ws[1:], name == "env")
		case name == "carve-cluster" && len(ws) > 1 && ws[1] == "kubectl":
			return "kubectl", ws[2:]
		case name == "go" && len(ws) > 2 && ws[1] == "run":
			if pkg := skipOptions(ws[2:], false); len(pkg) > 0 && isCarvectl(pkg[0]) {
				return "carvectl", pkg[1:]
			}
			return "", nil
		default:
			return "", nil
		}
	}
	return "", nil
}

// skipOptions returns words without their leading options (-x), and
// variables (VAR=value) where vars.
func skipOptions(ws []string, vars bool) []string {
	for len(ws) > 0 && (strings.HasPrefix(ws[0], "-") || vars && strings.Contains(ws[0], "=")) {
		ws = ws[1:]
	}
	return ws
}

// isCarvectl reports whether a package go run builds is carvectl's.
func isCarvectl(pkg string) bool {
	pkg, _, _ = strings.Cut(pkg, "@")
	pkg = path.Clean(pkg)
	return pkg == "cmd/carvectl" || strings.HasSuffix(pkg, "/cmd/carvectl")
}

// newKubectl returns kubectl's command tree: NewKubectlCommand with the
// logging flags (-v, --vmodule) k8s.io/component-base/cli adds, as
// cmd/kubectl runs it. It looks up no plugin and reads no kuberc.
func newKubectl() *cobra.Command {
	root := kubectlcmd.NewKubectlCommand(kubectlcmd.KubectlOptions{IOStreams: genericiooptions.NewTestIOStreamsDiscard()})
	logs.AddFlags(root.PersistentFlags())
	return root
}

// newHelm returns helm's command tree, as cmd/helm builds it (with the
// plugins installed here, if any). NewRootCmd also registers a cobra
// initializer, which only Execute runs; nothing here calls it.
func newHelm() (*cobra.Command, error) {
	root, err := helmcmd.NewRootCmd(io.Discard, nil, func(bool) {})
	if err != nil {
		return nil, fmt.Errorf("helm: %w", err)
	}
	return root, nil
}

// checkCall checks a kubectl or helm call against the tool's command tree,
// as checkCobra does; the error names the call's page and line. The tree
// is built fresh for each call, as the tool's binary builds it: parsing
// leaves values behind.
func checkCall(c toolCall) error {
	var root *cobra.Command
	var err error
	switch c.Tool {
	case "kubectl":
		root = newKubectl()
	case "helm":
		root, err = newHelm()
	default:
		err = fmt.Errorf("%s is neither kubectl nor helm", c.Tool)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", c.Where, err)
	}
	if err := checkCobra(root, c.Args); err != nil {
		return fmt.Errorf("%s: %w", c.Where, err)
	}
	return nil
}

// checkCobra checks a command's words against a cobra command tree, as
// cobra does before it runs anything: the words lead to a command of the
// tree (no word is left where a subcommand goes), that command's flags,
// its parents' persistent ones with them, parse them, and its arguments
// and flags are of the number and combination it takes. It runs nothing.
func checkCobra(root *cobra.Command, args []string) error {
	root.InitDefaultHelpCmd()
	cmd, rest, err := root.Find(args)
	if err != nil {
		return fmt.Errorf("%s: %w", root.Name(), err)
	}
	cmd.InitDefaultHelpFlag()
	if err := cmd.ParseFlags(rest); err != nil {
		return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	positional := cmd.Flags().Args()
	if cmd.HasSubCommands() && cmd.Args == nil && len(positional) > 0 {
		return fmt.Errorf("%s: unknown command %q for %q", cmd.CommandPath(), positional[0], cmd.CommandPath())
	}
	for _, validate := range []func() error{func() error { return cmd.ValidateArgs(positional) }, cmd.ValidateRequiredFlags, cmd.ValidateFlagGroups} {
		if err := validate(); err != nil {
			return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
		}
	}
	return nil
}

// carvectlCommand splits a carvectl call's words into its command (with
// the import format, or the rollout command) and the names of the flags
// it passes.
func carvectlCommand(args []string) (command, flags []string) {
	command = args[:min(1, len(args))]
	if len(args) > 1 && (args[0] == "import" || args[0] == "rollout") {
		command = args[:2]
	}
	for _, a := range args[len(command):] {
		if a == "--" {
			break
		}
		if strings.HasPrefix(a, "-") && a != "-" {
			name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			flags = append(flags, name)
		}
	}
	return command, flags
}

// checkCarvectl checks a carvectl call against the carvectl binary at bin:
// its command exists, and has each flag the call passes, as the command's
// -h lists them. helps keeps each command's -h.
func checkCarvectl(ctx context.Context, bin string, helps map[string]string, c toolCall) error {
	command, flags := carvectlCommand(c.Args)
	key := strings.Join(command, " ")
	help, ok := helps[key]
	if !ok {
		// -h exits 0 or 2, as the command has it or not; the text says which.
		out, _ := exec.CommandContext(ctx, bin, append(slices.Clone(command), "-h")...).CombinedOutput()
		help = string(out)
		helps[key] = help
	}
	if strings.Contains(help, "unknown command") || strings.Contains(help, "unknown format") {
		return fmt.Errorf("%s: carvectl has no command %q", c.Where, key)
	}
	var errs []error
	for _, f := range flags {
		if f != "h" && f != "help" && !regexp.MustCompile(`(?m)^  -`+regexp.QuoteMeta(f)+`(\s|$)`).MatchString(help) {
			errs = append(errs, fmt.Errorf("%s: carvectl %s has no flag -%s", c.Where, key, f))
		}
	}
	return errors.Join(errs...)
}

// minCalls is how many commands of each tool the documentation has at
// least: fewer found means the extraction is broken.
var minCalls = map[string]int{"kubectl": 20, "helm": 5, "carvectl": 10}

// callsOf returns the documentation's commands of a tool, and fails the
// test if there are fewer than minCalls.
func callsOf(t *testing.T, tool string) []toolCall {
	t.Helper()
	all, _ := docCalls(t) // TestShellSnippets reports the snippets that are no bash
	var out []toolCall
	for _, c := range all {
		if c.Tool == tool {
			out = append(out, c)
		}
	}
	if len(out) < minCalls[tool] {
		t.Fatalf("%d %s commands found in the documentation, fewer than %d: the extraction is broken", len(out), tool, minCalls[tool])
	}
	return out
}

// TestShellSnippets: every sh and bash snippet of the documentation is
// bash (a usage synopsis belongs in a text block).
func TestShellSnippets(t *testing.T) {
	_, errs := docCalls(t)
	for _, err := range errs {
		t.Error(err)
	}
}

// TestKubectlCommands: every kubectl command the documentation shows names
// a command kubectl has, with flags and arguments that command takes.
func TestKubectlCommands(t *testing.T) {
	for _, c := range callsOf(t, "kubectl") {
		if err := checkCall(c); err != nil {
			t.Error(err)
		}
	}
}

// TestHelmCommands: every helm command the documentation shows names a
// command helm has, with flags and arguments that command takes.
func TestHelmCommands(t *testing.T) {
	for _, c := range callsOf(t, "helm") {
		if err := checkCall(c); err != nil {
			t.Error(err)
		}
	}
}

// TestCarvectlCommands: every carvectl command the documentation shows
// names a command carvectl has, with flags that command has (as its -h
// lists them); and the check finds a command or a flag carvectl lacks.
func TestCarvectlCommands(t *testing.T) {
	calls := callsOf(t, "carvectl")
	bin, err := harness.Build(t.Context(), root, t.TempDir(), "carvectl")
	if err != nil {
		t.Fatal(err)
	}
	helps := map[string]string{}
	for args, want := range map[string]string{
		"statu -w":                        `p.md:1: carvectl has no command "statu"`,
		"status -w --watch-all":           "p.md:1: carvectl status has no flag -watch-all",
		"rollout relase NODE":             `p.md:1: carvectl has no command "rollout relase"`,
		"rollout release NODE --dry-runs": "p.md:1: carvectl rollout release has no flag -dry-runs",
	} {
		if err := checkCarvectl(t.Context(), bin, helps, toolCall{Where: "p.md:1", Tool: "carvectl", Args: strings.Fields(args)}); err == nil || err.Error() != want {
			t.Errorf("carvectl %s: error %v, want %q", args, err, want)
		}
	}
	for _, c := range calls {
		if err := checkCarvectl(t.Context(), bin, helps, c); err != nil {
			t.Error(err)
		}
	}
}

// TestCallExtraction: the commands of kubectl, helm and carvectl are found
// wherever a snippet runs them, with their words as the shell passes them,
// and a snippet that is no bash is an error naming its page and line.
func TestCallExtraction(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       []toolCall
	}{{
		name: "pipeline and list",
		text: "kubectl create cm x --dry-run=client -o yaml | kubectl apply -f - && helm list -A; echo kubectl get\n",
		want: []toolCall{
			{"p.md:10", "kubectl", []string{"create", "cm", "x", "--dry-run=client", "-o", "yaml"}},
			{"p.md:10", "kubectl", []string{"apply", "-f", "-"}},
			{"p.md:10", "helm", []string{"list", "-A"}},
		},
	}, {
		name: "command substitution, quotes and escapes",
		text: "NODE=n1\nPOD=$(kubectl get pods --field-selector spec.nodeName=\"$NODE\" -o jsonpath='{.items[0].metadata.name}')\n" +
			"kubectl wait node/\"$NODE\" --for=jsonpath='{.metadata.labels.carve\\.dev/state}'=success \"a \\\"b\\\"\" c\\ d *.yaml\n",
		want: []toolCall{
			{"p.md:11", "kubectl", []string{"get", "pods", "--field-selector", "spec.nodeName=0", "-o", "jsonpath={.items[0].metadata.name}"}},
			{"p.md:12", "kubectl", []string{"wait", "node/0", `--for=jsonpath={.metadata.labels.carve\.dev/state}=success`, `a "b"`, "c d", "0"}},
		},
	}, {
		name: "line continuations, and the first line",
		text: "# install\nhelm install carve charts/carve -n carve-system \\\n  --set image.repository=r \\\n  --set-file profiles.data=p.yaml\n",
		want: []toolCall{{"p.md:11", "helm", []string{"install", "carve", "charts/carve", "-n", "carve-system", "--set", "image.repository=r", "--set-file", "profiles.data=p.yaml"}}},
	}, {
		name: "go run, sudo, env, paths, carve-cluster",
		text: "go run ./cmd/carvectl status -w\nsudo -E env KUBECONFIG=k bin/carvectl prune --dry-run\n" +
			"bin/carve-cluster kubectl get nodes\ngo run ./cmd/carve-agent -h\ngo test ./...\n",
		want: []toolCall{
			{"p.md:10", "carvectl", []string{"status", "-w"}},
			{"p.md:11", "carvectl", []string{"prune", "--dry-run"}},
			{"p.md:12", "kubectl", []string{"get", "nodes"}},
		},
	}, {
		name: "the kubectl plugin",
		text: "kubectl carve status -w\n/usr/local/bin/kubectl-carve version --client\nkubectl get nodes\n",
		want: []toolCall{
			{"p.md:10", "carvectl", []string{"status", "-w"}},
			{"p.md:11", "carvectl", []string{"version", "--client"}},
			{"p.md:12", "kubectl", []string{"get", "nodes"}},
		},
	}, {
		name: "loops, functions passing their arguments on",
		text: "k() { kubectl --context=c --token=\"$T\" \"$@\"; }\nfor n in a b; do\n  k drain \"$n\" --ignore-daemonsets || k uncordon \"$n\"\ndone\n",
		want: []toolCall{
			{"p.md:10", "kubectl", []string{"--context=c", "--token=0"}},
			{"p.md:12", "kubectl", []string{"--context=c", "--token=0", "drain", "0", "--ignore-daemonsets"}},
			{"p.md:12", "kubectl", []string{"--context=c", "--token=0", "uncordon", "0"}},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := shellCalls("p.md", harness.Snippet{Lang: "sh", Line: 10, Text: tc.text})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
		})
	}
	_, err := shellCalls("p.md", harness.Snippet{Lang: "sh", Line: 10, Text: "kubectl get pods\nkubectl get 'pods\n"})
	if err == nil || !strings.Contains(err.Error(), "p.md:11:") {
		t.Errorf("unclosed quote: error %v, want one at p.md:11", err)
	}
}

// TestCommandChecks: the kubectl and helm checks pass commands the tools
// take, and find a command, a flag, a flag value and a number of arguments
// they refuse.
func TestCommandChecks(t *testing.T) {
	for _, tc := range []struct {
		tool, args, wantErr string
	}{
		{"kubectl", "-n carve-system get configmap carve-profiles -o yaml", ""},
		{"kubectl", "--kubeconfig=/dev/null --token=0", ""},
		{"kubectl", "get pods -A --context=c --field-selector spec.nodeName=0 -o wide -v=0", ""},
		{"kubectl", "help get", ""},
		{"kubectl", "-n 0 exec 0 -- printenv NVIDIA_VISIBLE_DEVICES", ""},
		{"kubectl", "gett pods", `kubectl: unknown command "gett" for "kubectl"`},
		{"kubectl", "-n ns gett pods", `unknown command "gett"`},
		{"kubectl", "config vieww", `kubectl config: unknown command "vieww" for "kubectl config"`},
		{"kubectl", "get pods --all-namespace", "kubectl get: unknown flag: --all-namespace"},
		{"kubectl", "label node n a=b -x", "kubectl label: unknown shorthand flag: 'x' in -x"},
		{"kubectl", "logs pod --tail=many", `kubectl logs: invalid argument "many" for "--tail" flag`},
		{"helm", "upgrade --install carve charts/carve -n carve-system --set a=b --reuse-values", ""},
		{"helm", "instal carve charts/carve", `helm: unknown command "instal" for "helm"`},
		{"helm", "install carve charts/carve --set-files p=x", "helm install: unknown flag: --set-files"},
		{"helm", "upgrade carve", `helm upgrade: "helm upgrade" requires 2 arguments`},
	} {
		err := checkCall(toolCall{Where: "p.md:1", Tool: tc.tool, Args: strings.Fields(tc.args)})
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s %s: %v", tc.tool, tc.args, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), "p.md:1: ") || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s %s: error %v, want one with %q", tc.tool, tc.args, err, tc.wantErr)
		}
	}
}
