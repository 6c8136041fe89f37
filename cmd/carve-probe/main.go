package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"time"

	"github.com/carve-dev/carve/internal/buildinfo"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/nvml"
)

func main() {
	os.Exit(run(os.Args[1:], nvml.New(), os.Stdout, os.Stderr))
}

// report is the JSON carve-probe prints.
type report struct {
	GPUs []gpuReport `json:"gpus"`
	// Topology[a][b] links GPU a to GPU b.
	Topology [][]linkReport `json:"topology"`
	// XIDWatch says how registering for XID events went.
	XIDWatch string   `json:"xidWatch"`
	Errors   []string `json:"errors,omitempty"`
}

type gpuReport struct {
	partition.GPU
	// Mode is the MIG mode in words, e.g. "disabled (pending enabled)".
	Mode      string `json:"mode"`
	Processes *int   `json:"processes,omitempty"`
	// Profiles are the GPU instance profiles NVML reports.
	Profiles     []profileReport `json:"profiles,omitempty"`
	ProfilesNote string          `json:"profilesNote,omitempty"`
	Errors       []string        `json:"errors,omitempty"`
}

type profileReport struct {
	partition.GIProfile
	// BuiltName is partition.ProfileName for the profile's size, the name
	// carve falls back to where NVML gives none.
	BuiltName string `json:"builtName"`
	// Catalogue compares the profile with the built-in catalogue's.
	Catalogue string `json:"catalogue"`
}

type linkReport struct {
	NVLinks int    `json:"nvlinks"`
	PCIe    int    `json:"pcie"`
	Error   string `json:"error,omitempty"`
}

// run probes lib and writes the report; it returns the exit code.
func run(args []string, lib partition.NVML, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("carve-probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	xidWait := fs.Duration("xid-wait", 100*time.Millisecond, "how long to wait for an XID event (0: do not register for them)")
	version := fs.Bool("version", false, "print the version, revision and Go version, and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *version {
		fmt.Fprintln(stdout, buildinfo.Get().Line("carve-probe"))
		return 0
	}
	if err := lib.Init(); err != nil {
		if errors.Is(err, partition.ErrLibraryNotFound) {
			fmt.Fprintf(stderr, "carve-probe: NVML library not found; is the NVIDIA driver installed? (%v)\n", err)
		} else {
			fmt.Fprintf(stderr, "carve-probe: cannot open NVML: %v\n", err)
		}
		return 1
	}
	defer func() {
		if err := lib.Shutdown(); err != nil {
			fmt.Fprintf(stderr, "carve-probe: %v\n", err)
		}
	}()

	rep, failed := probe(lib, *xidWait)
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		fmt.Fprintf(stderr, "carve-probe: write report: %v\n", err)
		return 1
	}
	if failed {
		fmt.Fprintln(stderr, "carve-probe: some reads failed; see the errors in the report")
		return 2
	}
	return 0
}

// probe reads everything; failed is true when some read failed.
func probe(lib partition.NVML, xidWait time.Duration) (rep report, failed bool) {
	note := func(list *[]string, format string, args ...any) {
		*list = append(*list, fmt.Sprintf(format, args...))
		failed = true
	}
	gpus, err := partition.ReadInventory(lib)
	readErrs := map[int]error{}
	if err != nil {
		// Read GPU by GPU, so one bad GPU does not hide the others.
		n, err := lib.DeviceCount()
		if err != nil {
			note(&rep.Errors, "count GPUs: %v", err)
			return rep, failed
		}
		gpus = make([]partition.GPU, n)
		for i := range n {
			gpus[i].Index = i
			d, err := lib.Device(i)
			if err == nil {
				gpus[i], err = partition.ReadGPU(d)
			}
			if err != nil {
				readErrs[i] = err
			}
		}
	}
	for _, g := range gpus {
		gr := gpuReport{GPU: g, Mode: modeWords(g)}
		if err := readErrs[g.Index]; err != nil {
			note(&gr.Errors, "read: %v", err)
		}
		d, err := lib.Device(g.Index)
		if err != nil {
			note(&gr.Errors, "%v", err)
			rep.GPUs = append(rep.GPUs, gr)
			continue
		}
		if n, err := d.Processes(); err != nil {
			note(&gr.Errors, "processes: %v", err)
		} else {
			gr.Processes = &n
		}
		if g.MIGCapable {
			profiles(&gr, d, note)
		}
		rep.GPUs = append(rep.GPUs, gr)
	}

	rep.Topology = make([][]linkReport, len(gpus))
	for a := range gpus {
		rep.Topology[a] = make([]linkReport, len(gpus))
		for b := range gpus {
			l, err := lib.Topology(a, b)
			if err != nil {
				rep.Topology[a][b].Error = err.Error()
				failed = true
				continue
			}
			rep.Topology[a][b] = linkReport{NVLinks: l.NVLinks, PCIe: l.PCIe}
		}
	}
	rep.XIDWatch = watchXIDs(lib, len(gpus), xidWait, &failed)
	return rep, failed
}

func modeWords(g partition.GPU) string {
	if !g.MIGCapable {
		return "no MIG"
	}
	if g.PendingMIGMode != g.MIGMode {
		return fmt.Sprintf("%s (pending %s)", g.MIGMode, g.PendingMIGMode)
	}
	return g.MIGMode.String()
}

// profiles adds the GPU's instance profiles, compared with the catalogue.
func profiles(gr *gpuReport, d partition.Device, note func(*[]string, string, ...any)) {
	ps, err := d.GPUInstanceProfiles()
	switch {
	case err != nil && gr.MIGMode != partition.MIGEnabled:
		gr.ProfilesNote = fmt.Sprintf("GPU instance profiles need MIG mode enabled (%v)", err)
		return
	case err != nil:
		note(&gr.Errors, "GPU instance profiles: %v", err)
		return
	case gr.MIGMode != partition.MIGEnabled:
		gr.ProfilesNote = "read with MIG mode disabled"
	}
	model, known := partition.LookupModel(gr.Model)
	for _, p := range ps {
		pr := profileReport{GIProfile: p, BuiltName: partition.ProfileName(p.ComputeSlices, p.MemoryMiB, p.MediaExtensions)}
		want, ok := model.ProfileByID(p.ID)
		sameButMemory := want
		sameButMemory.MemoryMiB = p.MemoryMiB
		switch {
		case !known:
			pr.Catalogue = fmt.Sprintf("model %s not in the catalogue", gr.Model)
		case !ok:
			pr.Catalogue = "profile not in the catalogue"
		case reflect.DeepEqual(p, want):
			pr.Catalogue = "same"
		case reflect.DeepEqual(p, sameButMemory):
			pr.Catalogue = fmt.Sprintf("same geometry; catalogue memory %d MiB", want.MemoryMiB)
		default:
			pr.Catalogue = fmt.Sprintf("differs: catalogue has %+v", want)
		}
		gr.Profiles = append(gr.Profiles, pr)
	}
}

// watchXIDs registers every GPU for XID events and waits once.
func watchXIDs(lib partition.NVML, n int, wait time.Duration, failed *bool) string {
	if wait <= 0 || n == 0 {
		return "not tried"
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	es, err := lib.WatchXIDs(idx)
	if err != nil {
		*failed = true
		return fmt.Sprintf("cannot watch: %v", err)
	}
	defer func() { _ = es.Close() }()
	ev, err := es.Wait(wait)
	switch {
	case errors.Is(err, partition.ErrTimeout):
		return fmt.Sprintf("registered; no XID within %s", wait)
	case err != nil:
		*failed = true
		return fmt.Sprintf("registered; wait failed: %v", err)
	}
	return fmt.Sprintf("registered; XID %d on %s (GPU instance %d, compute instance %d)", ev.XID, ev.UUID, ev.GIID, ev.CIID)
}
