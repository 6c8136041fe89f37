package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/desired"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/gpus"
)

func runValidate(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("f", "", "profiles file (profiles.yaml)")
	gpuSpec := fs.String("gpus", "", "check against these GPUs: sim:<machine> or nvml (default: every model carve knows)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	f, err := loadFile(*file, stdout)
	if err != nil {
		return err
	}
	geo := partition.NewGeometry(partition.Catalogue())
	var cgpus []configs.GPU // nil: no node, check every known model
	against := "every GPU model in carve's catalogue"
	if *gpuSpec != "" {
		n, closeFn, err := openNode(*gpuSpec, gpus.Options{})
		if err != nil {
			return err
		}
		defer closeFn()
		geo, cgpus, against = n.Geometry(), desired.ConfigGPUs(n), describeNode(n)
	}
	unverified, err := f.Check(geo, cgpus)
	if err != nil {
		return reportProblems(*file, err, stdout)
	}
	for _, p := range unverified {
		fmt.Fprintf(stdout, "%s: unverified: %s\n", filepath.Base(*file), p)
	}
	note := ""
	if len(unverified) > 0 {
		note = fmt.Sprintf("; %s for GPU models not known here checked only on nodes that have them", entries(len(unverified)))
	}
	note += noteDynamic(stdout, filepath.Base(*file), f)
	if none := f.SelectingNone(cgpus); len(none) > 0 {
		for _, name := range none {
			fmt.Fprintf(stdout, "%s: profiles.%s: selects none of these GPUs: a node of this kind given it stays as it is, state failed (keep it off these nodes with rules and labels)\n", filepath.Base(*file), name)
		}
		note += fmt.Sprintf("; %d of the profiles select none of these GPUs (above)", len(none))
	}
	fmt.Fprintf(stdout, "%s: valid: %s, checked against %s%s\n", filepath.Base(*file), summarize(f), against, note)
	return nil
}

// noteDynamic notes each entry with dynamic GPUs, which only an agent that
// runs --advertise dra realises (a file does not say which nodes run
// that), and returns what the summary adds for them.
func noteDynamic(w io.Writer, base string, f *configs.File) string {
	places := f.DynamicPlaces()
	for _, place := range places {
		fmt.Fprintf(w, "%s: note: %s: dynamic GPUs (MIG devices made on demand for DRA claims) need nodes whose agent runs --advertise dra; elsewhere a node given this profile reports it unrealisable and keeps its GPUs as they are\n", base, place)
	}
	switch len(places) {
	case 0:
		return ""
	case 1:
		return "; 1 entry with dynamic GPUs needs nodes running --advertise dra (above)"
	}
	return fmt.Sprintf("; %d entries with dynamic GPUs need nodes running --advertise dra (above)", len(places))
}

// loadFile reads and parses a profiles file; parse problems are printed one
// per line and end the command with exit code 1.
func loadFile(path string, stdout io.Writer) (*configs.File, error) {
	if path == "" {
		return nil, fmt.Errorf("-f profiles.yaml is required")
	}
	data, err := readLimited(path, configs.MaxFileBytes)
	if err != nil {
		return nil, err
	}
	f, err := configs.Parse(data)
	if err != nil {
		return nil, reportProblems(path, err, stdout)
	}
	return f, nil
}

// reportProblems prints one line per problem, prefixed with the file name,
// and returns exit code 1.
func reportProblems(path string, err error, stdout io.Writer) error {
	if cerr, ok := errors.AsType[*configs.Error](err); ok {
		for _, p := range cerr.Problems {
			fmt.Fprintf(stdout, "%s: %s\n", filepath.Base(path), p)
		}
	} else {
		fmt.Fprintf(stdout, "%s: %v\n", filepath.Base(path), err)
	}
	return exitError{1}
}

func summarize(f *configs.File) string {
	names := make([]string, 0, len(f.Profiles))
	for name := range f.Profiles {
		names = append(names, name)
	}
	sort.Strings(names)
	return fmt.Sprintf("%d profiles (%s), %d rules, %d windows, %d maintenance windows",
		len(names), strings.Join(names, ", "), len(f.Rules), len(f.Windows), len(f.Maintenance))
}

// describeNode says "8x NVIDIA H100 80GB HBM3" or lists mixed models.
func describeNode(n partition.Node) string {
	counts := map[string]int{}
	var order []string
	for _, g := range n.GPUs {
		if counts[g.Product] == 0 {
			order = append(order, g.Product)
		}
		counts[g.Product]++
	}
	parts := make([]string, len(order))
	for i, p := range order {
		parts[i] = fmt.Sprintf("%dx %s", counts[p], p)
	}
	return strings.Join(parts, " + ")
}

// entries says "1 entry" or "n entries".
func entries(n int) string {
	if n == 1 {
		return "1 entry"
	}
	return fmt.Sprintf("%d entries", n)
}

// readLimited reads a file, but no more than limit+1 bytes of it, so that
// a huge file (or a device such as /dev/zero) costs no more memory than a
// file just over the limit; Parse then refuses it by its size.
func readLimited(path string, limit int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read profiles: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("read profiles %s: %w", path, err)
	}
	return data, nil
}
