package report

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

// The markers around the part of docs/benchmarks.md that Rewrite replaces.
// Text outside them is kept as it is.
const (
	BeginMarker = "<!-- make bench: begin (generated; edit test/cmd/carve-bench, not this part) -->"
	EndMarker   = "<!-- make bench: end -->"
)

// Section is a numbered part of a run: one figure and its tables.
type Section struct {
	// Title names the figure ("Allocate over gRPC").
	Title string
	// Tables are its tables; Err, when not nil, is why there are none.
	Tables []Table
	Err    error
	// Took is how long the section's measurement ran.
	Took time.Duration
}

// Machine is what the run ran on.
type Machine struct {
	Cores      int
	CPU        string
	Kernel     string
	Go         string
	LoadBefore string
	LoadAfter  string
}

// Run is one `make bench`: its sections and where they were measured.
type Run struct {
	Command           string
	Started, Finished time.Time
	Machine           Machine
	Sections          []Section
}

// Markdown writes the generated part of docs/benchmarks.md: a summary of
// the run and every section, between the markers.
func (r Run) Markdown() string {
	var b strings.Builder
	b.WriteString(BeginMarker + "\n\n")
	fmt.Fprintf(&b, "Measured by `%s` on %s (%s in all).\n", r.Command, r.Started.UTC().Format("2006-01-02 15:04 MST"),
		r.Finished.Sub(r.Started).Round(time.Second))
	m := r.Machine
	fmt.Fprintf(&b, "Machine: %d cores (%s), Linux %s, %s; load average (1, 5, 15 min) %s before and %s after.\n\n",
		m.Cores, m.CPU, m.Kernel, m.Go, m.LoadBefore, m.LoadAfter)
	b.WriteString(r.Goals())
	for i, s := range r.Sections {
		fmt.Fprintf(&b, "## %d. %s\n\n", i+1, s.Title)
		if s.Err != nil {
			fmt.Fprintf(&b, "**Not measured in this run**: %s\n\n", oneLine(s.Err.Error()))
			continue
		}
		for _, t := range s.Tables {
			b.WriteString(t.Markdown())
		}
		fmt.Fprintf(&b, "_Section measured in %s._\n\n", s.Took.Round(100*time.Millisecond))
	}
	b.WriteString(EndMarker + "\n")
	return b.String()
}

// Goals writes the Goals section: every goal of the run's tables, met or
// not, with its figures, and the sections not measured.
func (r Run) Goals() string {
	var b strings.Builder
	b.WriteString("## Goals\n\n| goal | section | met | figures |\n|---|---|---|---|\n")
	for i, s := range r.Sections {
		where := fmt.Sprintf("%d. %s", i+1, s.Title)
		if s.Err != nil {
			fmt.Fprintf(&b, "| - | %s | not measured in this run | - |\n", where)
			continue
		}
		for _, t := range s.Tables {
			for _, g := range t.Goals {
				met := "**not met**"
				if g.Met {
					met = "met"
				}
				fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", cell(g.Name), where, met, cell(g.Figures))
			}
		}
	}
	b.WriteString("\n")
	return b.String()
}

// cell makes s fit in a markdown table cell.
func cell(s string) string { return strings.ReplaceAll(oneLine(s), "|", `\|`) }

// Rewrite replaces the generated part of the file at path with generated
// (Run.Markdown's output, markers included), keeping the text before and
// after it. A file without the markers gets the part after its first line
// (its title). The file is replaced atomically.
func Rewrite(path, generated string) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("rewrite benchmarks: %w", err)
	}
	updated, err := splice(old, generated)
	if err != nil {
		return fmt.Errorf("rewrite %s: %w", path, err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, updated, 0o644); err != nil {
		return fmt.Errorf("rewrite benchmarks: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rewrite benchmarks: %w", err)
	}
	return nil
}

// splice puts generated in place of the marked part of doc.
func splice(doc []byte, generated string) ([]byte, error) {
	begin := bytes.Index(doc, []byte(BeginMarker))
	end := bytes.Index(doc, []byte(EndMarker))
	switch {
	case begin < 0 && end < 0:
		title, rest, _ := bytes.Cut(doc, []byte("\n"))
		return fmt.Appendf(nil, "%s\n\n%s\n%s", title, generated, bytes.TrimLeft(rest, "\n")), nil
	case begin < 0 || end < begin:
		return nil, errors.New("the markers of the generated part are missing or out of order")
	}
	end += len(EndMarker)
	if end < len(doc) && doc[end] == '\n' {
		end++
	}
	out := append([]byte{}, doc[:begin]...)
	out = append(out, generated...)
	return append(out, doc[end:]...), nil
}

// ReadMachine describes this machine; loadBefore is the load average read
// when the run started.
func ReadMachine(loadBefore string) Machine {
	return Machine{
		Cores:      runtime.NumCPU(),
		CPU:        cpuModel(),
		Kernel:     firstField("/proc/sys/kernel/osrelease"),
		Go:         runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH,
		LoadBefore: loadBefore,
		LoadAfter:  LoadAverage(),
	}
}

// LoadAverage returns the 1, 5 and 15 minute load averages as
// "0.52, 0.61, 0.70", or "unknown".
func LoadAverage() string {
	f := strings.Fields(readFile("/proc/loadavg"))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], ", ")
}

// cpuModel returns the first "model name" of /proc/cpuinfo.
func cpuModel() string {
	for line := range strings.SplitSeq(readFile("/proc/cpuinfo"), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func firstField(path string) string {
	if f := strings.Fields(readFile(path)); len(f) > 0 {
		return f[0]
	}
	return "unknown"
}

func readFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return string(b)
}

// oneLine folds s onto one line for a markdown paragraph.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
