package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fuzzSeeds are profile files to start from: the example, and the shapes
// of the defects found by hand (overlaps, YAML 1.1 words, a second
// document, .inf, list keys, many windows).
func fuzzSeeds(f *testing.F) []string {
	f.Helper()
	example, err := os.ReadFile(example)
	if err != nil {
		f.Fatal(err)
	}
	return []string{
		string(example),
		"version: v1\nprofiles:\n  on: [{gpus: all}, {gpus: all}, {gpus: [0], model: H100}]\n",
		"version: v1\nprofiles: {a: []}\n---\nprofiles: {b: []}\n",
		"version: v1\nprofiles:\n  a: [{gpus: all, timeSlicing: {replicas: .inf}}]\n",
		"version: v1\nprofiles:\n  ? [a]\n  : []\n",
		"version: v1\ndefaultProfile: a\nprofiles: {a: [], b: []}\nwindows:\n  - {name: x, schedule: \"* * * * *\", duration: 2m, profile: b}\n  - {name: y, schedule: \"0 8 * * 1-5\", duration: 12h, timeZone: Europe/Berlin, profile: a, nodeSelector: {pool: x}}\n",
		"version: v1\nprofiles:\n  a: [{gpus: [0, 1], model: H100-80GB, mig: {1g.10gb: 7}}, {gpus: [1], model: NVIDIA H100 80GB HBM3, mig: {}}]\n",
	}
}

// checkCLIOutput checks what every carvectl command owes its user: a known
// exit code, and every line of output naming the file, or a table.
func checkCLIOutput(t *testing.T, args []string, code int, out, errOut string) {
	t.Helper()
	if code != 0 && code != 1 && code != 2 {
		t.Fatalf("carvectl %v: exit %d", args, code)
	}
	if code == 2 && !strings.HasPrefix(errOut, "carvectl ") {
		t.Fatalf("carvectl %v: exit 2 without saying why on stderr: %q", args, errOut)
	}
	if strings.Contains(out, "%!") || strings.Contains(errOut, "%!") {
		t.Fatalf("carvectl %v: a formatting verb went wrong:\n%s%s", args, out, errOut)
	}
	if strings.Contains(out, "map[") || strings.Contains(out, "interface {}") {
		t.Fatalf("carvectl %v: a Go value printed:\n%s", args, out)
	}
}

// validate as the CLI runs it, on any file: exit 0 with "valid", or exit 1
// with one line per problem, each naming the file and a place or the
// whole file.
func FuzzValidateCLI(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, src string, onNode bool) {
		p := filepath.Join(t.TempDir(), "profiles.yaml")
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		args := []string{"validate", "-f", p}
		if onNode {
			args = append(args, "--gpus", "sim:dgx-h100")
		}
		code, out, errOut := carvectl(args...)
		checkCLIOutput(t, args, code, out, errOut)
		switch code {
		case 0:
			if !strings.Contains(out, "profiles.yaml: valid: ") {
				t.Fatalf("exit 0 without 'valid':\n%s", out)
			}
		case 1:
			for line := range strings.Lines(out) {
				if !strings.HasPrefix(line, "profiles.yaml: ") || len(strings.TrimSpace(line)) <= len("profiles.yaml:") {
					t.Fatalf("a problem line without the file or a message: %q", line)
				}
			}
		default:
			t.Fatalf("exit %d on a file: %s", code, errOut)
		}
	})
}

// windows as the CLI runs it, on any file, labels, start and span: a
// table whose first row starts at --from, or a clear error.
func FuzzWindowsCLI(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s, "pool=x", int64(0), uint16(7))
		f.Add(s, "carve.dev/profile=nope", int64(86400*200), uint16(1))
	}
	f.Fuzz(func(t *testing.T, src, labels string, fromSecs int64, days uint16) {
		p := filepath.Join(t.TempDir(), "profiles.yaml")
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(fromSecs%(5*366*86400)) * time.Second)
		span := fmt.Sprintf("%dd", 1+days%30)
		args := []string{"windows", "-f", p, "--node-labels", labels, "--from", from.Format(time.RFC3339), "--for", span, "--tz", "UTC"}
		code, out, errOut := carvectl(args...)
		checkCLIOutput(t, args, code, out, errOut)
		if code == 0 {
			lines := strings.Split(out, "\n")
			if len(lines) < 2 || !strings.HasPrefix(lines[1], from.Format("2006-01-02 15:04 MST")) {
				t.Fatalf("the timeline does not start at --from %s:\n%s", from, out)
			}
		}
	})
}
