package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/carve-dev/carve/partition/sim"
)

// commands are carvectl's commands as typed, each with its subcommand
// where it has one.
var commands = [][]string{
	{"validate"}, {"plan"}, {"windows"}, {"status"}, {"import", "mig-parted"},
	{"prune"}, {"rollout", "release"}, {"version"},
}

// commandFlags returns the flags a command's -h lists.
func commandFlags(t *testing.T, cmd []string) []string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	runWith(append(append([]string{}, cmd...), "-h"), &stdout, &stderr, nil)
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z][-a-z]*)`).FindAllStringSubmatch(stderr.String()+stdout.String(), -1) {
		names = append(names, m[1])
	}
	if len(names) == 0 {
		t.Fatalf("carvectl %s -h lists no flags:\n%s%s", strings.Join(cmd, " "), stdout.String(), stderr.String())
	}
	return names
}

// mentionsFlag reports whether text names the flag as -name or --name.
func mentionsFlag(text, name string) bool {
	return regexp.MustCompile(`(^|[\s\[|(` + "`" + `])--?` + regexp.QuoteMeta(name) + `($|[\s\]|=,)` + "`" + `])`).MatchString(text)
}

// TestUsageListsEverything: carvectl's usage names every command, every
// flag of each, and every simulated machine and GPU model.
func TestUsageListsEverything(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := runWith([]string{"help"}, &stdout, &stderr, nil); code != 0 {
		t.Fatalf("carvectl help: exit %d: %s", code, stderr.String())
	}
	usage := stdout.String()
	// A command's usage is every line that starts "carvectl COMMAND" and
	// the indented lines after each.
	blocks := map[string]string{}
	cur := ""
	for line := range strings.SplitSeq(usage, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 1 && f[0] == "carvectl":
			cur = f[1]
		case !strings.HasPrefix(line, "    "):
			cur = ""
		}
		if cur != "" {
			blocks[cur] += line + "\n"
		}
	}
	for _, cmd := range commands {
		block, ok := blocks[cmd[0]]
		if !ok {
			t.Errorf("the usage has no line for carvectl %s", cmd[0])
			continue
		}
		for _, name := range commandFlags(t, cmd) {
			if !mentionsFlag(block, name) {
				t.Errorf("the usage of carvectl %s lacks its flag --%s", strings.Join(cmd, " "), name)
			}
		}
	}
	for _, name := range append(sim.MachineNames(), sim.ModelKeys()...) {
		if !strings.Contains(usage, name) {
			t.Errorf("the usage lacks the simulated machine or model %s", name)
		}
	}
}

// TestReferenceListsEveryCommand: docs/reference.md has a section for
// every carvectl command that names each of its flags.
func TestReferenceListsEveryCommand(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "reference.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range commands {
		heading := "### carvectl " + cmd[0]
		_, section, ok := strings.Cut(string(doc), heading)
		if !ok {
			t.Errorf("docs/reference.md has no section %q", heading)
			continue
		}
		section, _, _ = strings.Cut(section, "\n## ")
		section, _, _ = strings.Cut(section, "\n### ")
		for _, name := range commandFlags(t, cmd) {
			if !mentionsFlag(section, name) {
				t.Errorf("docs/reference.md's section %q lacks the flag --%s", heading, name)
			}
		}
	}
}
