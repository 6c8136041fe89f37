package nvimport

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/desired"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
)

// nvidiaDefault is NVIDIA's published default MIG configuration, as the GPU
// Operator installs it (a ConfigMap holding config.yaml).
const nvidiaDefault = "testdata/gpu-operator-default-mig-parted-config.yaml"

// timeSlicing is a device plugin config as NVIDIA documents them for the
// GPU Operator.
const timeSlicing = `version: v1
flags:
  migStrategy: mixed
sharing:
  timeSlicing:
    renameByDefault: true
    resources:
    - name: nvidia.com/gpu
      replicas: 4
    - name: nvidia.com/mig-1g.10gb
      replicas: 2
`

// rawMigParted is the fixture read independently of the importer.
type rawMigParted struct {
	MigConfigs map[string][]struct {
		DeviceFilter any            `json:"device-filter"`
		Devices      any            `json:"devices"`
		MigEnabled   bool           `json:"mig-enabled"`
		MigDevices   map[string]int `json:"mig-devices"`
	} `json:"mig-configs"`
}

func readNVIDIADefault(t *testing.T) ([]byte, rawMigParted) {
	t.Helper()
	data, err := os.ReadFile(nvidiaDefault)
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(data, &cm); err != nil {
		t.Fatal(err)
	}
	var raw rawMigParted
	if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &raw); err != nil {
		t.Fatal(err)
	}
	if len(raw.MigConfigs) < 50 {
		t.Fatalf("the fixture holds %d configurations; expected NVIDIA's full default", len(raw.MigConfigs))
	}
	return data, raw
}

// TestNVIDIADefault imports NVIDIA's published default configuration, with
// and without a time-slicing config, checks that the output passes
// validation and that everything not carried over is named, and plans every
// profile on a simulated machine of every model it is meant for.
func TestNVIDIADefault(t *testing.T) {
	data, raw := readNVIDIADefault(t)
	for _, withDP := range []bool{false, true} {
		t.Run(fmt.Sprintf("device plugin config %v", withDP), func(t *testing.T) {
			var opts Options
			if withDP {
				opts.DevicePlugin = []File{{Name: "ts.yaml", Data: []byte(timeSlicing)}}
			}
			res, err := MigParted(File{Name: "default.yaml", Data: data}, opts)
			if err != nil {
				t.Fatal(err)
			}
			f := checkValid(t, res.YAML)
			notes := make([]string, len(res.Notes))
			for i, n := range res.Notes {
				notes[i] = n.String()
				t.Log(n)
			}
			checkEveryConfig(t, raw, f, notes)
			checkFilters(t, raw, f, notes)
			planEveryProfile(t, f)
		})
	}
}

// checkEveryConfig: every mig-configs entry is a profile of the same name,
// or a note says why it was left out.
func checkEveryConfig(t *testing.T, raw rawMigParted, f *configs.File, notes []string) {
	t.Helper()
	for name := range raw.MigConfigs {
		if _, ok := f.Profiles[name]; ok {
			continue
		}
		if !slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, "profile "+name+" left out") }) {
			t.Errorf("mig-configs.%s is neither a profile nor named as left out", name)
		}
	}
}

// checkFilters: each PCI ID of a device filter is a model filter naming the
// catalogue model of that ID, or a note names it; each model filter
// written selects exactly its model; the boards a filter selects beyond the
// ID list are named.
func checkFilters(t *testing.T, raw rawMigParted, f *configs.File, notes []string) {
	t.Helper()
	cat := partition.Catalogue()
	for name, items := range raw.MigConfigs {
		for i, it := range items {
			var ids []string
			switch x := it.DeviceFilter.(type) {
			case string:
				ids = []string{x}
			case []any:
				for _, s := range x {
					ids = append(ids, fmt.Sprint(s))
				}
			}
			place := fmt.Sprintf("mig-configs.%s[%d]", name, i)
			for _, s := range ids {
				id, err := partition.ParsePCIDeviceID(s)
				if err != nil {
					t.Errorf("%s: %q is no PCI device ID", place, s)
					continue
				}
				m, ok := partition.ModelForPCIDeviceID(id)
				if !ok {
					if !slices.ContainsFunc(notes, func(n string) bool {
						return strings.Contains(n, place+".device-filter") && strings.Contains(n, partition.FormatPCIDeviceID(id))
					}) {
						t.Errorf("%s: %s maps to no catalogue model, and no note names it", place, s)
					}
					continue
				}
				if p, ok := f.Profiles[name]; ok && !slices.ContainsFunc(p, func(e configs.Entry) bool { return e.Model == m.Key }) {
					t.Errorf("profile %s has no entry for model %s (%s of %s)", name, m.Key, s, place)
				}
				for _, other := range m.PCIDeviceIDs {
					if !slices.ContainsFunc(ids, func(s string) bool { v, _ := partition.ParsePCIDeviceID(s); return v == other }) &&
						!slices.ContainsFunc(notes, func(n string) bool {
							return strings.Contains(n, place+".device-filter") && strings.Contains(n, partition.FormatPCIDeviceID(other))
						}) {
						t.Errorf("%s: model filter %s also selects %s, which no note names", place, m.Key, partition.FormatPCIDeviceID(other))
					}
				}
			}
		}
	}
	for name, p := range f.Profiles {
		for i, e := range p {
			if e.Model == "" {
				continue
			}
			var matched []string
			for _, m := range cat {
				if configs.MatchModel(e.Model, configs.GPUModel{Key: m.Key, Product: m.Product}) {
					matched = append(matched, m.Key)
				}
			}
			if diff := cmp.Diff([]string{e.Model}, matched); diff != "" {
				t.Errorf("profiles.%s[%d].model %s selects other models too (-want +got):\n%s", name, i, e.Model, diff)
			}
		}
	}
}

// targetModels returns the catalogue models an entry is meant for: its
// filter's, or, without one, those with all of its MIG profiles (every
// model for whole GPUs).
func targetModels(e configs.Entry) []partition.Model {
	var out []partition.Model
	for _, m := range partition.Catalogue() {
		switch {
		case e.Model != "":
			if e.Model == m.Key {
				out = append(out, m)
			}
		case !slices.ContainsFunc(mapKeys(e.MIG), func(p string) bool { _, ok := m.Profile(p); return !ok }):
			out = append(out, m)
		}
	}
	return out
}

func mapKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// planEveryProfile plans each profile, as carvectl plan does, on a
// simulated machine of two GPUs of each model its entries are meant for,
// and checks the resources it would advertise.
func planEveryProfile(t *testing.T, f *configs.File) {
	t.Helper()
	keys := sim.ModelKeys()
	planned := 0
	for _, name := range slices.Sorted(maps.Keys(f.Profiles)) {
		models := map[string]partition.Model{}
		for _, e := range f.Profiles[name] {
			for _, m := range targetModels(e) {
				models[m.Key] = m
			}
		}
		if len(models) == 0 {
			t.Logf("profile %s: no catalogue model has its MIG profiles; not planned", name)
		}
		for _, key := range slices.Sorted(maps.Keys(models)) {
			if !slices.Contains(keys, strings.ToLower(key)) {
				t.Logf("profile %s: the simulator has no %s; not planned there", name, key)
				continue
			}
			planOn(t, f, name, models[key])
			planned++
		}
	}
	t.Logf("%d plans of %d profiles", planned, len(f.Profiles))
	if planned < len(f.Profiles) {
		t.Errorf("%d plans for %d profiles", planned, len(f.Profiles))
	}
}

func planOn(t *testing.T, f *configs.File, profile string, m partition.Model) {
	t.Helper()
	machine, err := sim.New(strings.ToLower(m.Key) + "*2")
	if err != nil {
		t.Errorf("profile %s on %s: %v", profile, m.Key, err)
		return
	}
	if err := machine.Init(); err != nil {
		t.Fatal(err)
	}
	node, err := partition.ReadNode(machine)
	if err != nil {
		t.Fatal(err)
	}
	want, err := desired.For(f, profile, node)
	if err != nil {
		t.Errorf("profile %s on 2x %s: %v", profile, m.Key, err)
		return
	}
	plan, err := want.Plan(node, nil)
	if err != nil {
		t.Errorf("profile %s on 2x %s: cannot be planned: %v", profile, m.Key, err)
		return
	}
	res, err := want.Resources(node, plan)
	if err != nil {
		t.Errorf("profile %s on 2x %s: %v", profile, m.Key, err)
		return
	}
	if diff := cmp.Diff(expectedResources(f.Profiles[profile], m.Key, 2), res.Counts()); diff != "" {
		t.Errorf("profile %s on 2x %s: resources (-want +got):\n%s", profile, m.Key, diff)
	}
}

// expectedResources counts the devices a profile's entries advertise on n
// GPUs of a model.
func expectedResources(p configs.Profile, model string, n int) map[string]int {
	want := map[string]int{}
	for gpu := range n {
		i := slices.IndexFunc(p, func(e configs.Entry) bool {
			return e.GPUs.Selects(gpu) && (e.Model == "" || e.Model == model)
		})
		if i < 0 {
			want[carvev1.GPUResource]++
			continue
		}
		e := p[i]
		replicas := func(profile string) int {
			switch {
			case e.TimeSlicing == nil:
				return 1
			case e.TimeSlicing.Replicas.PerProfile != nil:
				return max(e.TimeSlicing.Replicas.PerProfile[profile], 1)
			}
			return e.TimeSlicing.Replicas.Count
		}
		rename := e.TimeSlicing != nil && e.TimeSlicing.RenameShared
		if e.MIG == nil {
			r := replicas("")
			want[carvev1.ResourceName("", rename && r > 1)] += r
			continue
		}
		for profile, count := range e.MIG {
			r := replicas(profile)
			want[carvev1.ResourceName(profile, rename && r > 1)] += count * r
		}
	}
	return want
}
