package nvimport

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/partition"
)

// convert imports a mig-parted config (mp.yaml) with device plugin configs
// and returns the profiles part of the output and the notes, one string
// each. It fails the test unless the output parses and validates.
func convert(t *testing.T, migParted string, opts Options) (profiles string, notes []string) {
	t.Helper()
	res, err := MigParted(File{Name: "mp.yaml", Data: []byte(migParted)}, opts)
	if err != nil {
		t.Fatalf("MigParted: %v", err)
	}
	checkValid(t, res.YAML)
	_, body, ok := strings.Cut(string(res.YAML), "version: v1\nprofiles:\n")
	if !ok {
		t.Fatalf("output lacks the version and profiles lines:\n%s", res.YAML)
	}
	for _, n := range res.Notes {
		notes = append(notes, n.String())
	}
	return body, notes
}

// checkValid parses and validates a profile file as carvectl validate does.
func checkValid(t *testing.T, data []byte) *configs.File {
	t.Helper()
	f, err := configs.Parse(data)
	if err != nil {
		t.Fatalf("the output does not parse: %v\n%s", err, data)
	}
	if err := f.Validate(partition.NewGeometry(partition.Catalogue()), nil); err != nil {
		t.Fatalf("the output does not validate: %v\n%s", err, data)
	}
	return f
}

func TestConvertMigParted(t *testing.T) {
	tests := []struct {
		name      string
		migParted string // the mig-configs mapping, indented by 2
		want      string // the profiles mapping of the output
		wantNotes []string
	}{
		{
			name: "mig-enabled false is whole GPUs; mig-devices {} is MIG on, no instances",
			migParted: `
  all-disabled:
    - devices: all
      mig-enabled: false
  all-enabled:
    - devices: all
      mig-enabled: true
      mig-devices: {}
`,
			want: `  all-disabled:
    - gpus: all
  all-enabled:
    - gpus: all
      mig: {}
`,
		},
		{
			name: "devices lists become gpus, sorted and without repeats; counts of 0 are left out",
			migParted: `
  split:
    - devices: [3, 1, 1, 0]
      mig-enabled: true
      mig-devices: {"1g.10gb": 7, "2g.20gb": 0}
    - devices: [4, 5]
      mig-enabled: true
      mig-devices: {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}
`,
			want: `  split:
    - gpus: [0, 1, 3]
      mig: {1g.10gb: 7}
    - gpus: [4, 5]
      mig: {1g.10gb: 2, 2g.20gb: 1, 3g.40gb: 1}
`,
			wantNotes: []string{"mp.yaml: mig-configs.split: mig-parted leaves the GPUs that no item selects as they are; carve makes them whole GPUs, MIG off"},
		},
		{
			name: "a device-filter string is a model filter",
			migParted: `
  a30:
    - device-filter: "0x20B710DE"
      devices: all
      mig-enabled: true
      mig-devices: {"2g.12gb": 2}
`,
			want: `  a30:
    - gpus: all
      model: A30-24GB
      mig: {2g.12gb: 2}
`,
			wantNotes: []string{"mp.yaml: mig-configs.a30: mig-parted leaves the GPUs that no item selects as they are; carve makes them whole GPUs, MIG off"},
		},
		{
			name: "IDs of several models are one entry per model, in the filter's order, same content",
			migParted: `
  p:
    - device-filter: ["0x20B210DE", "0x233010DE", "0x233110DE", "0x20B510DE", "0x20F310DE", "0x20F510DE", "0x232210DE", "0x232410DE", "0x233010de"]
      devices: [0, 1]
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
`,
			want: `  p:
    - gpus: [0, 1]
      model: A100-80GB
      mig: {1g.10gb: 7}
    - gpus: [0, 1]
      model: H100-80GB
      mig: {1g.10gb: 7}
`,
			wantNotes: []string{"mp.yaml: mig-configs.p: mig-parted leaves the GPUs that no item selects as they are; carve makes them whole GPUs, MIG off"},
		},
		{
			name: "unknown, malformed and subsystem IDs are named; the entry keeps the models carve knows",
			migParted: `
  p:
    - device-filter: ["0xDEADBEEF", "233010DE", "0x20B710DE:0x145F10DE", "nope"]
      devices: all
      mig-enabled: false
`,
			want: `  p:
    - gpus: all
      model: H100-80GB
    - gpus: all
      model: A30-24GB
`,
			wantNotes: []string{
				"mp.yaml: mig-configs.p[0].device-filter[0]: 0xDEADBEEF is not a GPU carve's catalogue knows; left out of the model filters",
				"mp.yaml: mig-configs.p[0].device-filter[2]: subsystem ID 0x145F10DE left out: carve's model filter A30-24GB selects every board of the model",
				`mp.yaml: mig-configs.p[0].device-filter[3]: "nope" is not a PCI device ID such as 0x233010DE (mig-parted matches no GPU with it); left out`,
				"mp.yaml: mig-configs.p[0].device-filter: model filter H100-80GB also selects 0x233110DE, 0x232210DE, 0x232410DE, boards of the same model the filter does not list",
				"mp.yaml: mig-configs.p: mig-parted leaves the GPUs that no item selects as they are; carve makes them whole GPUs, MIG off",
			},
		},
		{
			name: "an item none of whose IDs carve knows is left out; a profile with nothing left is left out",
			migParted: `
  mixed:
    - device-filter: "0xDEADBEEF"
      devices: all
      mig-enabled: true
      mig-devices: {"1g.50gb": 4}
    - device-filter: "0x20B710DE"
      devices: all
      mig-enabled: true
      mig-devices: {"4g.24gb": 1}
  unknown:
    - device-filter: ["0xDEADBEEF"]
      devices: all
      mig-enabled: true
      mig-devices: {"1g.50gb": 4}
`,
			want: `  mixed:
    - gpus: all
      model: A30-24GB
      mig: {4g.24gb: 1}
`,
			wantNotes: []string{
				"mp.yaml: mig-configs.mixed[0].device-filter: 0xDEADBEEF is not a GPU carve's catalogue knows; left out of the model filters",
				"mp.yaml: mig-configs.mixed[0].device-filter: item left out: carve's catalogue knows none of its GPUs, so no model filter can stand for them; GPUs that no entry selects are whole, MIG off, under carve (add an entry with the model key carve reports for them by hand)",
				"mp.yaml: mig-configs.mixed: mig-parted leaves the GPUs that no item selects as they are; carve makes them whole GPUs, MIG off",
				"mp.yaml: mig-configs.unknown[0].device-filter[0]: 0xDEADBEEF is not a GPU carve's catalogue knows; left out of the model filters",
				"mp.yaml: mig-configs.unknown[0].device-filter: item left out: carve's catalogue knows none of its GPUs, so no model filter can stand for them; GPUs that no entry selects are whole, MIG off, under carve (add an entry with the model key carve reports for them by hand)",
				"mp.yaml: mig-configs.unknown: profile unknown left out: none of its items could be carried over",
			},
		},
		{
			name: "compute instances: as large as the GPU instance is carve's name, smaller leaves the profile out",
			migParted: `
  same:
    - devices: all
      mig-enabled: true
      mig-devices: {"1c.1g.10gb": 7}
  smaller:
    - devices: all
      mig-enabled: true
      mig-devices: {"1c.2g.20gb": 3}
`,
			want: `  same:
    - gpus: all
      mig: {1g.10gb: 7}
`,
			wantNotes: []string{"mp.yaml: mig-configs.smaller[0].mig-devices: profile smaller left out: 1c.2g.20gb make compute instances smaller than their GPU instance; carve makes one compute instance per GPU instance, using all of it"},
		},
		{
			name: "items that select the same GPUs: the later one wins, as in mig-parted",
			migParted: `
  lists:
    - devices: [0, 1, 2, 3]
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
    - devices: [2, 3, 4]
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
  default-first:
    - devices: all
      mig-enabled: false
    - device-filter: "0x233010DE"
      devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
  overridden:
    - devices: [0, 1]
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
    - devices: all
      mig-enabled: true
      mig-devices: {"7g.80gb": 1}
`,
			want: `  default-first:
    - gpus: all
      model: H100-80GB
      mig: {1g.10gb: 7}
  lists:
    - gpus: [0, 1]
      mig: {1g.10gb: 7}
    - gpus: [2, 3, 4]
      mig: {3g.40gb: 2}
  overridden:
    - gpus: all
      mig: {7g.80gb: 1}
`,
			wantNotes: []string{
				"mp.yaml: mig-configs.default-first[1].device-filter: model filter H100-80GB also selects 0x233110DE, 0x232210DE, 0x232410DE, boards of the same model the filter does not list",
				"mp.yaml: mig-configs.lists: mig-parted leaves the GPUs that no item selects as they are; carve makes them whole GPUs, MIG off",
				"mp.yaml: mig-configs.overridden[0]: never takes effect: item 1 selects all of its GPUs and mig-parted applies the last item that selects a GPU; left out",
			},
		},
		{
			name: "items carve cannot keep apart leave the profile out",
			migParted: `
  all-then-list:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
    - devices: [0]
      mig-enabled: true
      mig-devices: {"7g.80gb": 1}
  any-then-model:
    - devices: [0, 1]
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
    - device-filter: "0x233010DE"
      devices: [1]
      mig-enabled: true
      mig-devices: {"7g.80gb": 1}
  boards:
    - device-filter: "0x233010DE"
      devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
    - device-filter: "0x233110DE"
      devices: all
      mig-enabled: true
      mig-devices: {"7g.80gb": 1}
  ok:
    - devices: all
      mig-enabled: false
`,
			want: `  ok:
    - gpus: all
`,
			wantNotes: []string{
				`mp.yaml: mig-configs.all-then-list[0]: profile all-then-list left out: item 1 selects some of the same GPUs; mig-parted gives them item 1's layout, and carve cannot say "the other GPUs" of an entry`,
				"mp.yaml: mig-configs.any-then-model[1].device-filter: model filter H100-80GB also selects 0x233110DE, 0x232210DE, 0x232410DE, boards of the same model the filter does not list",
				`mp.yaml: mig-configs.any-then-model[0]: profile any-then-model left out: item 1 selects some of the same GPUs (GPU 1 of model H100-80GB); mig-parted gives them item 1's layout, and carve cannot say "the other GPUs" of an entry`,
				"mp.yaml: mig-configs.boards[0].device-filter: model filter H100-80GB also selects 0x233110DE, 0x232210DE, 0x232410DE, boards of the same model the filter does not list",
				"mp.yaml: mig-configs.boards[1].device-filter: model filter H100-80GB also selects 0x233010DE, 0x232210DE, 0x232410DE, boards of the same model the filter does not list",
				`mp.yaml: mig-configs.boards[0]: profile boards left out: item 1 selects some of the same GPUs (of model H100-80GB); mig-parted gives them item 1's layout, and carve cannot say "the other GPUs" of an entry`,
			},
		},
		{
			name: "profiles carve rejects are left out with carve's reason; unknown MIG profiles are checked on nodes",
			migParted: `
  too-many:
    - devices: all
      mig-enabled: true
      mig-devices: {"3g.40gb": 3}
  this-name-is-far-too-long-for-a-kubernetes-label-value-which-carve-needs:
    - devices: all
      mig-enabled: false
  future:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.99gb": 7}
  none:
    - devices: []
      mig-enabled: false
    - devices: [0]
      mig-enabled: false
`,
			want: `  future:
    - gpus: all
      mig: {1g.99gb: 7}
  none:
    - gpus: [0]
`,
			wantNotes: []string{
				"mp.yaml: mig-configs.none[0].devices: [] selects no GPU; item left out",
				"mp.yaml: mig-configs.none: mig-parted leaves the GPUs that no item selects as they are; carve makes them whole GPUs, MIG off",
				"mp.yaml: mig-configs.this-name-is-far-too-long-for-a-kubernetes-label-value-which-carve-needs: profile this-name-is-far-too-long-for-a-kubernetes-label-value-which-carve-needs left out: carve rejects it: profiles.this-name-is-far-too-long-for-a-kubernetes-label-value-which-carve-needs: invalid profile name: longer than 63 characters",
				"mp.yaml: mig-configs.too-many[0]: profile too-many left out: carve rejects it: profiles.too-many[0].mig: 3g.40gb x3 cannot be placed on any known GPU model (on A100-80GB: 3g.40gb x3: at most 2 fit on A100-80GB; on H100-80GB: 3g.40gb x3: at most 2 fit on H100-80GB)",
				"mp.yaml: mig-configs.future[0]: not checked here: no GPU model known here has any of 1g.99gb; the entry is checked only on nodes whose GPUs have them",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, notes := convert(t, "version: v1\nmig-configs:"+tt.migParted, Options{})
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("profiles (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantNotes, notes); diff != "" {
				t.Errorf("notes (-want +got):\n%s", diff)
			}
		})
	}
}

const sharedMigParted = `version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  balanced:
    - device-filter: "0x233010DE"
      devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
  all-1g.10gb.me:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb+me": 1}
`

func TestConvertDevicePlugin(t *testing.T) {
	h100Notes := []string{
		"mp.yaml: mig-configs.balanced[0].device-filter: model filter H100-80GB also selects 0x233110DE, 0x232210DE, 0x232410DE, boards of the same model the filter does not list",
		"mp.yaml: mig-configs.balanced: mig-parted leaves the GPUs that no item selects as they are; carve makes them whole GPUs, MIG off",
	}
	tests := []struct {
		name      string
		dp        []File
		def       string
		want      string
		wantNotes []string
	}{
		{
			name: "one config: every profile shares as it says; whole GPUs by nvidia.com/gpu, MIG devices by their resource",
			dp: []File{{Name: "ts.yaml", Data: []byte(`version: v1
flags:
  migStrategy: mixed
sharing:
  timeSlicing:
    renameByDefault: true
    failRequestsGreaterThanOne: true
    resources:
    - name: nvidia.com/gpu
      replicas: 4
    - name: nvidia.com/mig-1g.10gb.me
      replicas: 3
    - name: mig-1g.10gb
      replicas: 2
`)}},
			want: `  all-1g.10gb.me:
    - gpus: all
      mig: {1g.10gb+me: 1}
      timeSlicing: {replicas: {1g.10gb+me: 3}, renameShared: true, failRequestsGreaterThanOne: true}
  all-disabled:
    - gpus: all
      timeSlicing: {replicas: 4, renameShared: true, failRequestsGreaterThanOne: true}
  balanced:
    - gpus: all
      model: H100-80GB
      mig: {1g.10gb: 2, 2g.20gb: 1, 3g.40gb: 1}
      timeSlicing: {replicas: {1g.10gb: 2}, renameShared: true, failRequestsGreaterThanOne: true}
`,
			wantNotes: append(h100Notes,
				"ts.yaml: sharing.timeSlicing.resources[0]: in profile balanced, the GPUs that no entry selects are whole and not shared under carve; the device plugin shares every nvidia.com/gpu (give them an entry to share them)"),
		},
		{
			name: "single strategy: nvidia.com/gpu sharing applies to MIG devices; migStrategy none is named",
			dp: []File{{Name: "single.yaml", Data: []byte(`version: v1
flags: {migStrategy: single}
sharing:
  timeSlicing:
    resources:
    - {name: nvidia.com/gpu, replicas: 2}
`)}, {Name: "none.yaml", Data: []byte(`version: v1
flags: {migStrategy: none}
sharing:
  timeSlicing:
    resources:
    - {name: nvidia.com/mig-3g.40gb, replicas: 2}
`)}},
			def: "single",
			want: `  all-1g.10gb.me:
    - gpus: all
      mig: {1g.10gb+me: 1}
      timeSlicing: {replicas: 2}
  all-1g.10gb.me_none:
    - gpus: all
      mig: {1g.10gb+me: 1}
  all-disabled:
    - gpus: all
      timeSlicing: {replicas: 2}
  all-disabled_none:
    - gpus: all
  balanced:
    - gpus: all
      model: H100-80GB
      mig: {1g.10gb: 2, 2g.20gb: 1, 3g.40gb: 1}
      timeSlicing: {replicas: 2}
  balanced_none:
    - gpus: all
      model: H100-80GB
      mig: {1g.10gb: 2, 2g.20gb: 1, 3g.40gb: 1}
      timeSlicing: {replicas: {3g.40gb: 2}}
`,
			wantNotes: append(h100Notes,
				"single.yaml: sharing.timeSlicing.resources[0]: in profile balanced, the GPUs that no entry selects are whole and not shared under carve; the device plugin shares every nvidia.com/gpu (give them an entry to share them)",
				"single.yaml: flags.migStrategy: single: carve advertises MIG devices as nvidia.com/mig-<profile>, as the mixed strategy does, not as nvidia.com/gpu; the nvidia.com/gpu sharing is applied to them, as single does",
				"none.yaml: flags.migStrategy: none: carve advertises the MIG devices of GPUs with MIG on as nvidia.com/mig-<profile>, as the mixed strategy does"),
		},
		{
			name: "a ConfigMap of named configs without a default: profiles under their own names share nothing",
			dp: []File{{Name: "cm.yaml", Data: []byte(`apiVersion: v1
kind: ConfigMap
metadata: {name: time-slicing-config}
data:
  shared-4: |-
    version: v1
    sharing:
      timeSlicing:
        resources:
        - name: nvidia.com/gpu
          replicas: 4
  mps: |-
    version: v1
    sharing:
      mps:
        resources:
        - name: nvidia.com/gpu
          replicas: 4
`)}},
			want: `  all-1g.10gb.me:
    - gpus: all
      mig: {1g.10gb+me: 1}
  all-1g.10gb.me_mps:
    - gpus: all
      mig: {1g.10gb+me: 1}
  all-1g.10gb.me_shared-4:
    - gpus: all
      mig: {1g.10gb+me: 1}
  all-disabled:
    - gpus: all
  all-disabled_mps:
    - gpus: all
  all-disabled_shared-4:
    - gpus: all
      timeSlicing: {replicas: 4}
  balanced:
    - gpus: all
      model: H100-80GB
      mig: {1g.10gb: 2, 2g.20gb: 1, 3g.40gb: 1}
  balanced_mps:
    - gpus: all
      model: H100-80GB
      mig: {1g.10gb: 2, 2g.20gb: 1, 3g.40gb: 1}
  balanced_shared-4:
    - gpus: all
      model: H100-80GB
      mig: {1g.10gb: 2, 2g.20gb: 1, 3g.40gb: 1}
`,
			wantNotes: append(h100Notes,
				"cm.yaml[mps]: sharing.mps: not carried over: carve shares devices by time-slicing only, not through MPS; the devices MPS would share are not shared",
				"cm.yaml[shared-4]: sharing.timeSlicing.resources[0]: in profile balanced_shared-4, the GPUs that no entry selects are whole and not shared under carve; the device plugin shares every nvidia.com/gpu (give them an entry to share them)",
				"cm.yaml[shared-4]: flags.migStrategy: not set: taken as mixed: the nvidia.com/gpu sharing applies to whole GPUs; MIG devices are shared as their nvidia.com/mig-<profile> resources say"),
		},
		{
			name: "what the device plugin ignores or carve lacks is named, one line each",
			dp: []File{{Name: "dp.yaml", Data: []byte(`version: v1
flags:
  migStrategy: mixed
  failOnInitError: true
  nvidiaDriverRoot: /run/nvidia/driver
  gdsEnabled: null
  plugin:
    deviceListStrategy: [envvar, cdi-cri]
    deviceIDStrategy: index
    passDeviceSpecs: true
resources:
  gpus:
  - {pattern: "*", name: gpu}
imex: {channelIDs: [0]}
extra: 1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/mig-1g.10gb
      replicas: 2
      devices: [0, 1]
      rename: nvidia.com/small
    - name: nvidia.com/mig-7g.80gb
      replicas: 2
    - name: example.com/fpga
      replicas: 2
`)}},
			want: `  all-1g.10gb.me:
    - gpus: all
      mig: {1g.10gb+me: 1}
  all-disabled:
    - gpus: all
  balanced:
    - gpus: all
      model: H100-80GB
      mig: {1g.10gb: 2, 2g.20gb: 1, 3g.40gb: 1}
      timeSlicing: {replicas: {1g.10gb: 2}}
`,
			wantNotes: append(h100Notes,
				"dp.yaml: extra: unknown field; ignored, as the device plugin ignores it",
				"dp.yaml: flags.failOnInitError: not carried over: a device plugin setting with no counterpart in a carve profile",
				"dp.yaml: flags.nvidiaDriverRoot: not carried over: a device plugin setting with no counterpart in a carve profile",
				"dp.yaml: flags.plugin.deviceIDStrategy: index: not carried over: carve's device IDs are GPU and MIG device UUIDs",
				"dp.yaml: flags.plugin.deviceListStrategy: cdi-cri: not part of a carve profile: carve-agent --cdi answers Allocate with CDI device names too",
				"dp.yaml: flags.plugin.passDeviceSpecs: not carried over: a device plugin setting with no counterpart in a carve profile",
				"dp.yaml: imex: not carried over: IMEX channels are no part of a carve profile",
				"dp.yaml: resources: not carried over: the device plugin ignores custom resource names too; carve advertises nvidia.com/gpu and nvidia.com/mig-<profile>",
				"dp.yaml: sharing.timeSlicing.resources[0].rename: nvidia.com/small: ignored, as the device plugin ignores it: without renameByDefault the shared devices keep their name",
				"dp.yaml: sharing.timeSlicing.resources[0].devices: ignored, as the device plugin ignores it: every device of nvidia.com/mig-1g.10gb is shared",
				"dp.yaml: sharing.timeSlicing.resources[2].name: example.com/fpga: not carried over: carve advertises nvidia.com/gpu and nvidia.com/mig-<profile> only",
				"dp.yaml: sharing.timeSlicing.resources[1]: nvidia.com/mig-7g.80gb: no imported profile makes such MIG devices; nothing to share"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, notes := convert(t, sharedMigParted, Options{DevicePlugin: tt.dp, DefaultDevicePlugin: tt.def})
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("profiles (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantNotes, notes); diff != "" {
				t.Errorf("notes (-want +got):\n%s", diff)
			}
		})
	}
}

// TestConfigMapInput: NVIDIA's MIG manager keeps its configuration in a
// ConfigMap under config.yaml; the manifest is read as the file itself.
func TestConfigMapInput(t *testing.T) {
	cm := `apiVersion: v1
kind: ConfigMap
metadata: {name: custom-mig-config}
data:
  README: "not YAML of interest: [here"
  config.yaml: |
    version: v1
    mig-configs:
      all-disabled:
        - devices: all
          mig-enabled: false
`
	_, err := MigParted(File{Name: "cm.yaml", Data: []byte(cm)}, Options{})
	want := `cm.yaml[README]: invalid YAML: `
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("a data key that is not YAML: err = %v, want %q...", err, want)
	}
	cm = strings.Replace(cm, `"not YAML of interest: [here"`, `"see config.yaml"`, 1)
	res, err := MigParted(File{Name: "cm.yaml", Data: []byte(cm)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkValid(t, res.YAML)
	if diff := cmp.Diff([]string{"all-disabled"}, res.Profiles); diff != "" {
		t.Errorf("profiles (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(string(res.YAML), "# carve profiles imported by `carvectl import mig-parted` from cm.yaml[config.yaml].\n") {
		t.Errorf("header does not name the source:\n%s", res.YAML)
	}
}

func TestRefused(t *testing.T) {
	item := func(s string) string { return "version: v1\nmig-configs:\n  p:\n    - " + s + "\n" }
	okDP := []File{{Name: "dp.yaml", Data: []byte("version: v1\n")}}
	tests := []struct {
		name      string
		migParted string
		opts      Options
		want      []string
	}{
		{"invalid YAML", "version: v1\nmig-configs: [", Options{}, []string{"mp.yaml: invalid YAML: "}},
		{"duplicate keys", "version: v1\nversion: v1\nmig-configs: {}\n", Options{}, []string{`mp.yaml: invalid YAML: `}},
		{"too large", "version: v1\n#" + strings.Repeat("x", MaxFileSize), Options{}, []string{"mp.yaml: 1048589 bytes: larger than the 1048576 bytes a configuration may have"}},
		{"not a mapping", "[1]", Options{}, []string{"mp.yaml: must be a mapping, not a list"}},
		{"version and mig-configs", "kind: x\n", Options{}, []string{
			"mp.yaml: kind: unknown field; a mig-parted configuration has version and mig-configs",
			"mp.yaml: version: required: v1",
			"mp.yaml: mig-configs: required: the named MIG configurations",
		}},
		{"bad version, empty configs", "version: v2\nmig-configs: {}\n", Options{}, []string{
			`mp.yaml: version: "v2": only v1 is known`,
			"mp.yaml: mig-configs: must hold at least one configuration",
		}},
		{"empty item list", "version: v1\nmig-configs:\n  p: []\n", Options{}, []string{"mp.yaml: mig-configs.p: must hold at least one item"}},
		{"item fields", item("{device: all, mig-enabled: yes}"), Options{}, []string{
			"mp.yaml: mig-configs.p[0].device: unknown field; an item has device-filter, devices, mig-enabled and mig-devices",
			"mp.yaml: mig-configs.p[0].devices: required: all, or a list of GPU indices",
			"mp.yaml: mig-configs.p[0].mig-devices: required when mig-enabled is true ({} for MIG on with no instances)",
		}},
		{"devices", item(`{devices: some, mig-enabled: false}`), Options{}, []string{`mp.yaml: mig-configs.p[0].devices: must be all or a list of GPU indices, not "some"`}},
		{"GPU indices", item(`{devices: [-1, 256, x], mig-enabled: false}`), Options{}, []string{
			"mp.yaml: mig-configs.p[0].devices[0]: -1 is less than 0",
			"mp.yaml: mig-configs.p[0].devices[1]: 256 is more than 255",
			`mp.yaml: mig-configs.p[0].devices[2]: must be a whole number, not the string "x"`,
		}},
		{"mig-enabled", item(`{devices: all, mig-enabled: "true"}`), Options{}, []string{`mp.yaml: mig-configs.p[0].mig-enabled: must be true or false, not the string "true"`}},
		{"MIG devices with MIG off", item(`{devices: all, mig-enabled: false, mig-devices: {1g.10gb: 1}}`), Options{}, []string{"mp.yaml: mig-configs.p[0].mig-devices: must be empty when mig-enabled is false"}},
		{"MIG device counts", item(`{devices: all, mig-enabled: true, mig-devices: {1g.10gb: 0, 2g.20gb: 0}}`), Options{}, []string{"mp.yaml: mig-configs.p[0].mig-devices: every count is 0; use {} for MIG on with no instances"}},
		{"MIG device names and counts", item(`{devices: all, mig-enabled: true, mig-devices: {big: 1, 1g.10gb: 129, 3c.2g.20gb: 1}}`), Options{}, []string{
			"mp.yaml: mig-configs.p[0].mig-devices.1g.10gb: 129 is more than 128",
			`mp.yaml: mig-configs.p[0].mig-devices.3c.2g.20gb: "3c.2g.20gb": a compute instance cannot have more slices than its GPU instance`,
			`mp.yaml: mig-configs.p[0].mig-devices.big: "big" is not a MIG profile name such as 1g.10gb or 1g.10gb+me`,
		}},
		{"device-filter", item(`{device-filter: 0x233010DE, devices: all, mig-enabled: false}`), Options{}, []string{
			`mp.yaml: mig-configs.p[0].device-filter: must be a PCI device ID such as "0x233010DE", or a list of them; not the number 590352606`,
		}},
		{"a ConfigMap without the configuration", "kind: ConfigMap\ndata:\n  a: x\n  b: z\n", Options{}, []string{"mp.yaml: data: holds a, b; which one is the configuration? (expected a single key, or config.yaml)"}},
		{"a ConfigMap without data", "kind: ConfigMap\n", Options{}, []string{"mp.yaml: data: a ConfigMap with the configuration under a data key is expected; this one has no data"}},
		{"device plugin: what it refuses", item("{devices: all, mig-enabled: false}"), Options{DevicePlugin: []File{{Name: "dp.yaml", Data: []byte(`version: v2
flags: {migStrategy: double}
sharing:
  timeSlicing:
    renameByDefault: 1
    resources:
    - {name: nvidia.com/gpu, replicas: 1}
    - {name: nvidia.com/gpu, replicas: 1025}
    - {replicas: 2}
    - {name: nvidia.com/mig-1g.10gb, replicas: 2}
    - {name: nvidia.com/mig-1g.10gb, replicas: 3}
`)}}}, []string{
			`dp.yaml: flags.migStrategy: "double": want none, single or mixed`,
			"dp.yaml: sharing.timeSlicing.renameByDefault: must be true or false, not the number 1",
			"dp.yaml: sharing.timeSlicing.resources[0].replicas: 1 is less than 2",
			"dp.yaml: sharing.timeSlicing.resources[1].replicas: 1025 is more than 1024",
			"dp.yaml: sharing.timeSlicing.resources[2].name: required: the resource to share, e.g. nvidia.com/gpu",
			"dp.yaml: sharing.timeSlicing.resources[4]: nvidia.com/mig-1g.10gb is also shared at sharing.timeSlicing.resources[3]",
			`dp.yaml: version: "v2": only v1 is known`,
		}},
		{"device plugin: no resources", item("{devices: all, mig-enabled: false}"), Options{DevicePlugin: []File{{Name: "dp.yaml", Data: []byte("sharing: {timeSlicing: {renameByDefault: true}}\n")}}}, []string{
			"dp.yaml: sharing.timeSlicing.resources: required: the resources to share",
		}},
		{"device plugin: names must differ", item("{devices: all, mig-enabled: false}"), Options{DevicePlugin: append(okDP, okDP...)}, []string{
			"dp.yaml: a device plugin config named dp also comes from dp.yaml; names must differ",
		}},
		{"device plugin: unknown default", item("{devices: all, mig-enabled: false}"), Options{DevicePlugin: okDP, DefaultDevicePlugin: "x"}, []string{
			"--device-plugin-default x: no device plugin config of that name (have: dp)",
		}},
		{"device plugin: default without configs", item("{devices: all, mig-enabled: false}"), Options{DefaultDevicePlugin: "x"}, []string{
			"--device-plugin-default x: no device plugin config given",
		}},
		{"a variant's name is a profile's", "version: v1\nmig-configs:\n  p: [{devices: all, mig-enabled: false}]\n  p_dp: [{devices: all, mig-enabled: false}]\n",
			Options{DevicePlugin: []File{{Name: "dp.yaml", Data: []byte("version: v1\n")}, {Name: "other.yaml", Data: []byte("version: v1\n")}}, DefaultDevicePlugin: "other"}, []string{
				"profile p_dp would be made twice: from mp.yaml: mig-configs.p with device plugin config dp and from mp.yaml: mig-configs.p_dp; rename a mig-configs entry or a device plugin config",
			}},
		{"nothing left", item(`{device-filter: "0xDEADBEEF", devices: all, mig-enabled: false}`), Options{}, []string{
			"mp.yaml: mig-configs.p[0].device-filter: 0xDEADBEEF is not a GPU carve's catalogue knows; left out of the model filters",
			"mp.yaml: mig-configs.p[0].device-filter: item left out: carve's catalogue knows none of its GPUs, so no model filter can stand for them; GPUs that no entry selects are whole, MIG off, under carve (add an entry with the model key carve reports for them by hand)",
			"mp.yaml: mig-configs.p: profile p left out: none of its items could be carried over",
			"mp.yaml: nothing could be carried over: no profile is left",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := MigParted(File{Name: "mp.yaml", Data: []byte(tt.migParted)}, tt.opts)
			ierr, ok := errors.AsType[*Error](err)
			if !ok {
				t.Fatalf("err = %v, want an *Error; result:\n%s", err, resultYAML(res))
			}
			var got []string
			for _, p := range ierr.Problems {
				got = append(got, p.String())
			}
			// Messages from the YAML library are compared by their start.
			for i, w := range tt.want {
				if i < len(got) && strings.HasSuffix(w, "invalid YAML: ") && strings.HasPrefix(got[i], w) {
					got[i] = w
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

func resultYAML(r *Result) string {
	if r == nil {
		return "(none)"
	}
	return string(r.YAML)
}

// TestBounds: absurd counts are refused, naming the place.
func TestBounds(t *testing.T) {
	var b strings.Builder
	b.WriteString("version: v1\nmig-configs:\n")
	for i := range maxMigConfigs + 1 {
		b.WriteString("  p" + strings.Repeat("x", i%3) + string(rune('a'+i%26)) + "-" + strconv.Itoa(i) + ": [{devices: all, mig-enabled: false}]\n")
	}
	_, err := MigParted(File{Name: "mp.yaml", Data: []byte(b.String())}, Options{})
	if err == nil || err.Error() != "mp.yaml: mig-configs: 1025 configurations: more than the 1024 this importer takes" {
		t.Errorf("too many configurations: err = %v", err)
	}
	items := strings.Repeat("    - {devices: all, mig-enabled: false}\n", maxEntries+1)
	_, err = MigParted(File{Name: "mp.yaml", Data: []byte("version: v1\nmig-configs:\n  p:\n" + items)}, Options{})
	if err == nil || err.Error() != "mp.yaml: mig-configs.p: 65 items: more than the 64 this importer takes" {
		t.Errorf("too many items: err = %v", err)
	}
	idx := strings.Repeat("0, ", maxListLen) + "0"
	_, err = MigParted(File{Name: "mp.yaml", Data: []byte("version: v1\nmig-configs:\n  p:\n    - {devices: [" + idx + "], mig-enabled: false}\n")}, Options{})
	if err == nil || err.Error() != "mp.yaml: mig-configs.p[0].devices: 257 GPU indices: more than the 256 this importer takes" {
		t.Errorf("too many indices: err = %v", err)
	}
}

func TestScalar(t *testing.T) {
	for in, want := range map[string]string{
		"all-1g.10gb": "all-1g.10gb",
		"1g.10gb+me":  "1g.10gb+me",
		"on":          `"on"`,
		"No":          `"No"`,
		"1e3":         `"1e3"`,
		"0x1F":        `"0x1F"`,
		"12":          `"12"`,
		"a b":         `"a b"`,
		"-x":          `"-x"`,
		"":            `""`,
	} {
		if got := scalar(in); got != want {
			t.Errorf("scalar(%q) = %s, want %s", in, got, want)
		}
	}
}
