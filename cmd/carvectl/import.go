package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/carve-dev/carve/configs/nvimport"
)

const importUsage = `Usage:
  carvectl import mig-parted -f config.yaml [--device-plugin-config dp.yaml ...] [--device-plugin-default NAME]

Prints a carve profile file made from a mig-parted (GPU Operator MIG manager)
configuration, and optionally NVIDIA device plugin sharing configs; what
cannot be carried over is named on stderr. See docs/import.md.
`

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	*l = append(*l, v)
	return nil
}

func runImport(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, importUsage)
		if len(args) == 0 {
			return exitError{2}
		}
		return nil
	}
	if args[0] != "mig-parted" {
		fmt.Fprintf(stderr, "carvectl import: unknown format %q: want mig-parted\n\n%s", args[0], importUsage)
		return exitError{2}
	}
	fs := flag.NewFlagSet("import mig-parted", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("f", "", "the mig-parted configuration (config.yaml), or a ConfigMap manifest holding it")
	var dps stringList
	fs.Var(&dps, "device-plugin-config", "an NVIDIA device plugin config file, or a ConfigMap manifest of named configs (repeatable)")
	def := fs.String("device-plugin-default", "", "the device plugin config the profiles get under their own names (default: the only one given)")
	if err := fs.Parse(args[1:]); err != nil {
		return exitError{2}
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if *file == "" {
		return errors.New("-f config.yaml is required")
	}
	mp, err := readInput(*file)
	if err != nil {
		return err
	}
	opts := nvimport.Options{DefaultDevicePlugin: *def}
	for _, p := range dps {
		f, err := readInput(p)
		if err != nil {
			return err
		}
		opts.DevicePlugin = append(opts.DevicePlugin, f)
	}
	res, err := nvimport.MigParted(mp, opts)
	if ierr, ok := errors.AsType[*nvimport.Error](err); ok {
		for _, p := range ierr.Problems {
			fmt.Fprintln(stderr, p)
		}
		fmt.Fprintln(stderr, "carvectl import: nothing written")
		return exitError{1}
	}
	if err != nil {
		return err
	}
	if _, err := stdout.Write(res.YAML); err != nil {
		return err
	}
	for _, n := range res.Notes {
		fmt.Fprintln(stderr, n)
	}
	summary := fmt.Sprintf("carvectl import: %d profiles written", len(res.Profiles))
	if len(res.Notes) > 0 {
		summary += fmt.Sprintf("; %d notes above: read them before use", len(res.Notes))
	}
	fmt.Fprintln(stderr, summary)
	return nil
}

// readInput reads a file of at most nvimport.MaxFileSize bytes.
func readInput(path string) (nvimport.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nvimport.File{}, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, nvimport.MaxFileSize+1))
	if err != nil {
		return nvimport.File{}, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > nvimport.MaxFileSize {
		return nvimport.File{}, fmt.Errorf("%s: larger than %d bytes; not a configuration this command reads", path, nvimport.MaxFileSize)
	}
	return nvimport.File{Name: filepath.Base(path), Data: data}, nil
}
