package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Read returns the Records of every .jsonl file in dir, the files in name
// order and each file's Records in the order written.
func Read(dir string) ([]Record, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, fmt.Errorf("chaos records in %s: %w", dir, err)
	}
	slices.Sort(paths)
	var out []Record
	for _, p := range paths {
		recs, err := readFile(p)
		if err != nil {
			return nil, err
		}
		out = append(out, recs...)
	}
	return out, nil
}

// readFile reads one JSON-lines file of Records.
func readFile(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("chaos records: %w", err)
	}
	defer f.Close()
	var out []Record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for n := 1; sc.Scan(); n++ {
		if len(strings.TrimSpace(sc.Text())) == 0 {
			continue
		}
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("chaos records %s:%d: %w", path, n, err)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("chaos records %s: %w", path, err)
	}
	return out, nil
}

// Info is what the report says about the run besides its Records.
type Info struct {
	// Date is when the report was written.
	Date time.Time
	// Command is what ran the chaos tests ("make chaos").
	Command string
	// Took is how long they ran; zero when unknown.
	Took time.Duration
	// Cores is the machine's CPU count; LoadAverage its 1, 5 and 15
	// minute load averages when the report was written, as
	// /proc/loadavg gives them ("" when unknown).
	Cores       int
	LoadAverage string
	// Platform names the OS, architecture and Go version.
	Platform string
}

// Tally counts the cases of one fault, one scenario or all of them.
type Tally struct {
	Cases, Survived, Lost int
}

func (t *Tally) add(r Record) {
	t.Cases++
	if r.Survived {
		t.Survived++
	}
	if r.Lost != "" {
		t.Lost++
	}
}

// Scenario is a scenario's cases, tallied per fault in the order the
// faults first appear.
type Scenario struct {
	Name    string
	Checked string
	Faults  []string
	ByFault map[string]*Tally
	Total   Tally
	// Bad are the cases that did not survive or lost something.
	Bad []Record
}

// Summarise groups the cases of recs by scenario, in the order the
// scenarios first appear, and returns them with the total over all.
func Summarise(recs []Record) ([]*Scenario, Tally) {
	var (
		order []*Scenario
		by    = map[string]*Scenario{}
		total Tally
	)
	for _, r := range recs {
		s := by[r.Scenario]
		if s == nil {
			s = &Scenario{Name: r.Scenario, ByFault: map[string]*Tally{}}
			by[r.Scenario] = s
			order = append(order, s)
		}
		if s.Checked == "" {
			s.Checked = r.Checked
		}
		if !r.IsCase() {
			continue
		}
		f := s.ByFault[r.Fault]
		if f == nil {
			f = &Tally{}
			s.ByFault[r.Fault] = f
			s.Faults = append(s.Faults, r.Fault)
		}
		f.add(r)
		s.Total.add(r)
		total.add(r)
		if !r.Survived || r.Lost != "" {
			s.Bad = append(s.Bad, r)
		}
	}
	return order, total
}

// maxBad bounds the cases listed per scenario that did not survive.
const maxBad = 20

// WriteReport writes the report (docs/reliability.md) of recs.
func WriteReport(w io.Writer, recs []Record, info Info) error {
	scenarios, total := Summarise(recs)
	var b strings.Builder
	b.WriteString("# Reliability: what `make chaos` tried\n\n")
	b.WriteString("Written by `make chaos` from the records of its runs; ")
	b.WriteString("do not edit by hand. Every case is also a test assertion: a case that did not ")
	b.WriteString("survive failed `make chaos`. \"Lost\" counts the cases that lost something (an instance a pod held or ")
	b.WriteString("both geometries hold, an orphan instance, a checkpoint, a device the kubelet dropped); it must be 0.\n\n")
	writeInfo(&b, info, total)
	b.WriteString("| scenario | cases | survived | lost |\n|---|---:|---:|---:|\n")
	for _, s := range scenarios {
		fmt.Fprintf(&b, "| %s | %d | %d | %d |\n", cell(s.Name), s.Total.Cases, s.Total.Survived, s.Total.Lost)
	}
	fmt.Fprintf(&b, "| **all** | **%d** | **%d** | **%d** |\n", total.Cases, total.Survived, total.Lost)
	for _, s := range scenarios {
		writeScenario(&b, s)
	}
	b.WriteString("\nDevelopers: see [internals/reliability.md](internals/reliability.md).\n")
	_, err := io.WriteString(w, b.String())
	if err != nil {
		return fmt.Errorf("write chaos report: %w", err)
	}
	return nil
}

// writeInfo writes the run's date, machine, command and outcome.
func writeInfo(b *strings.Builder, info Info, total Tally) {
	fmt.Fprintf(b, "- Date: %s\n", info.Date.UTC().Format("2006-01-02 15:04 MST"))
	machine := fmt.Sprintf("%d CPU cores", info.Cores)
	if info.LoadAverage != "" {
		machine += ", load average " + info.LoadAverage + " (1, 5, 15 min) at the end"
	}
	if info.Platform != "" {
		machine += "; " + info.Platform
	}
	fmt.Fprintf(b, "- Machine: %s\n", machine)
	cmd := "`" + info.Command + "`"
	if info.Took > 0 {
		cmd += fmt.Sprintf(", which took %s", info.Took.Round(time.Second))
	}
	fmt.Fprintf(b, "- Command: %s\n", cmd)
	lost := "nothing lost"
	if total.Lost > 0 {
		lost = fmt.Sprintf("**%d lost something**", total.Lost)
	}
	fmt.Fprintf(b, "- Outcome: %d cases tried, %d survived, %s\n\n", total.Cases, total.Survived, lost)
}

// writeScenario writes one scenario's section.
func writeScenario(b *strings.Builder, s *Scenario) {
	fmt.Fprintf(b, "\n## %s\n\n", s.Name)
	if s.Checked != "" {
		b.WriteString(s.Checked + "\n\n")
	}
	b.WriteString("| fault | cases | survived | lost |\n|---|---:|---:|---:|\n")
	for _, f := range s.Faults {
		t := s.ByFault[f]
		fmt.Fprintf(b, "| %s | %d | %d | %d |\n", cell(f), t.Cases, t.Survived, t.Lost)
	}
	fmt.Fprintf(b, "| **total** | **%d** | **%d** | **%d** |\n", s.Total.Cases, s.Total.Survived, s.Total.Lost)
	if len(s.Bad) == 0 {
		return
	}
	b.WriteString("\nCases that did not survive or lost something:\n\n")
	for i, r := range s.Bad {
		if i == maxBad {
			fmt.Fprintf(b, "- and %d more\n", len(s.Bad)-maxBad)
			break
		}
		what := r.Lost
		if what == "" {
			what = r.Detail
		}
		fmt.Fprintf(b, "- %s (%s): %s\n", oneLine(r.Case), oneLine(r.Fault), oneLine(what))
	}
}

// cell makes s safe in a Markdown table cell.
func cell(s string) string { return strings.ReplaceAll(oneLine(s), "|", `\|`) }

// oneLine joins the lines of s.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
