package cluster

import (
	"bytes"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// buildHeartbeat is how often a running build (Kubernetes, containerd)
// reports progress.
const buildHeartbeat = 20 * time.Second

// buildTailLines is how many lines of the build's other output (compiler
// errors and warnings, go command messages) are kept for an error message.
const buildTailLines = 200

// buildProgress follows the output of `go build -v` (one import path per
// package it compiles, as it starts compiling it) and reports to log: at
// once when a binary's main package is reached (it is linked next), and on
// each heartbeat the time taken so far and how many packages are compiled.
// Other output is kept (the last buildTailLines lines) for error messages.
// It is an io.Writer for the build's stdout and stderr; its methods are safe
// for concurrent use.
type buildProgress struct {
	log   io.Writer
	now   func() time.Time
	start time.Time
	what  string            // what is being built: "Kubernetes v1.37.2"
	mains map[string]string // main package import path -> binary name

	mu        sync.Mutex
	partial   []byte // the unfinished last line written
	compiled  int    // packages compiled so far
	total     int    // packages in the build; 0 while unknown
	downloads int    // modules downloaded so far
	latest    string // the package compiled last
	linking   int    // main packages reached (their binaries link next)
	tail      []string
}

// newBuildProgress returns a progress tracker for a build of what's main
// packages (import path -> binary name), started now.
func newBuildProgress(log io.Writer, now func() time.Time, what string, mains map[string]string) *buildProgress {
	return &buildProgress{log: log, now: now, start: now(), what: what, mains: mains}
}

// Write takes build output; complete lines are processed at once. It never
// fails: the build must not stop because of its progress report.
func (p *buildProgress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.partial = append(p.partial, b...)
	for {
		i := bytes.IndexByte(p.partial, '\n')
		if i < 0 {
			break
		}
		p.lineLocked(string(p.partial[:i]))
		p.partial = p.partial[i+1:]
	}
	return len(b), nil
}

// Flush processes an unfinished last line, if any.
func (p *buildProgress) Flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.partial) > 0 {
		p.lineLocked(string(p.partial))
		p.partial = nil
	}
}

// lineLocked classifies one line of output; p.mu is held.
func (p *buildProgress) lineLocked(line string) {
	line = strings.TrimRight(line, "\r")
	if line == "" {
		return
	}
	if isImportPath(line) {
		p.compiled++
		p.latest = line
		if bin, ok := p.mains[line]; ok {
			p.linking++
			fmt.Fprintf(p.log, "  %s: compiling its main package, then linking (%s)\n", bin, p.elapsed())
		}
		return
	}
	if mod, ok := strings.CutPrefix(line, "go: downloading "); ok {
		if p.downloads == 0 {
			fmt.Fprintf(p.log, "  downloading modules (first %s)\n", strings.TrimSpace(mod))
		}
		p.downloads++
	}
	p.tail = append(p.tail, line)
	if len(p.tail) > buildTailLines {
		p.tail = p.tail[len(p.tail)-buildTailLines:]
	}
}

// isImportPath reports whether a line of `go build -v` output names a
// package: one word, no colon (file positions and messages have one), not a
// "# package" header.
func isImportPath(line string) bool {
	return !strings.ContainsAny(line, " \t:#")
}

// setTotal records how many packages the build has (see countPackages).
func (p *buildProgress) setTotal(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.total = n
}

// elapsed is the time since the build started, to the second.
func (p *buildProgress) elapsed() time.Duration {
	return p.now().Sub(p.start).Round(time.Second)
}

// statusLocked is the heartbeat line: time taken, packages compiled (of how
// many and the percentage, once known) and the latest one (or "linking" once every main package
// is reached), or the modules downloaded while none is; p.mu is held.
func (p *buildProgress) statusLocked() string {
	var b strings.Builder
	fmt.Fprintf(&b, "  still building %s: %s", p.what, p.elapsed())
	switch {
	case p.compiled == 0 && p.downloads > 0:
		fmt.Fprintf(&b, ", %d modules downloaded", p.downloads)
	case p.total > 0:
		fmt.Fprintf(&b, ", %d of %d packages compiled, %d%%", p.compiled, p.total, 100*p.compiled/p.total)
	default:
		fmt.Fprintf(&b, ", %d packages compiled", p.compiled)
	}
	switch {
	case len(p.mains) > 0 && p.linking == len(p.mains):
		b.WriteString(", linking")
	case p.latest != "":
		fmt.Fprintf(&b, " (latest %s)", p.latest)
	}
	return b.String()
}

// heartbeat writes the status line to the log on every tick until stop is
// closed. Like every write to the log here, it holds p.mu: the log need not
// be safe for concurrent use.
func (p *buildProgress) heartbeat(tick <-chan time.Time, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-tick:
			p.mu.Lock()
			fmt.Fprintln(p.log, p.statusLocked())
			p.mu.Unlock()
		}
	}
}

// run runs cmd, whose output goes to p, writing the status line to the
// log every interval until cmd ends; then it processes an unfinished last
// line of output.
func (p *buildProgress) run(cmd *exec.Cmd, interval time.Duration) error {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	stop := make(chan struct{})
	beating := make(chan struct{})
	go func() {
		defer close(beating)
		p.heartbeat(ticker.C, stop)
	}()
	err := cmd.Run()
	close(stop)
	<-beating
	p.Flush()
	return err
}

// counts returns the packages compiled so far and the build's total (0
// while unknown).
func (p *buildProgress) counts() (compiled, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.compiled, p.total
}

// output returns the kept non-package output, one line each.
func (p *buildProgress) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, "\n")
}

// countPackages counts the import paths in `go list -deps` output, but for
// unsafe, which is never compiled.
func countPackages(out string) int {
	n := 0
	for line := range strings.Lines(out) {
		if l := strings.TrimSpace(line); l != "" && l != "unsafe" && isImportPath(l) {
			n++
		}
	}
	return n
}
