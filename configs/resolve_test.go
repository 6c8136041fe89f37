package configs

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func whole(gpu int) Assignment { return Assignment{GPU: gpu, Entry: -1, Replicas: 1} }

func TestResolve(t *testing.T) {
	f := mustParse(t, strings.Replace(specExample, "\nrules:", `
  whole: []
  mig-on:
    - gpus: [1]
      mig: {}
      timeSlicing: {replicas: 3, failRequestsGreaterThanOne: true}
  h100-only:
    - gpus: all
      model: NVIDIA-H100-80GB-HBM3
      mig: {7g.80gb: 1}
  clash:
    - gpus: [0, 1]
      model: H100
    - gpus: [1]
      model: HBM3
  clash-3:
    - gpus: [1]
      model: H100
    - gpus: [1]
      model: HBM3
    - gpus: [1]
      model: 80GB
rules:`, 1))
	mixed := []GPU{
		{Index: 1, Model: "A100-40GB", Product: "NVIDIA A100-SXM4-40GB", MIGCapable: true},
		{Index: 0, Model: "H100-80GB", Product: "NVIDIA H100 80GB HBM3", MIGCapable: true},
		{Index: 2, Model: "T4-16GB", Product: "Tesla T4"},
	}
	tests := []struct {
		name    string
		profile string
		gpus    []GPU
		want    []Assignment
		wantErr []string
	}{
		{"full", "full", dgxH100()[:2], []Assignment{
			{GPU: 0, Entry: 0, Replicas: 1}, {GPU: 1, Entry: 0, Replicas: 1},
		}, nil},
		{"empty profile: whole GPUs", "whole", dgxH100()[:2], []Assignment{whole(0), whole(1)}, nil},
		{"time-sliced", "shared-4", dgxH100()[:1], []Assignment{{GPU: 0, Entry: 0, Replicas: 4}}, nil},
		{"MIG with per-profile replicas", "balanced", dgxH100()[:1], []Assignment{{
			GPU: 0, Entry: 0, Replicas: 1,
			MIG:         map[string]int{"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
			MIGReplicas: map[string]int{"1g.10gb": 2},
		}}, nil},
		{"split on eight GPUs", "split", dgxH100(), func() []Assignment {
			var out []Assignment
			for i := range 4 {
				out = append(out, Assignment{GPU: i, Entry: 0, Replicas: 1, MIG: map[string]int{"1g.10gb": 7}})
			}
			for i := 4; i < 8; i++ {
				out = append(out, Assignment{GPU: i, Entry: 1, Replicas: 2, RenameShared: true})
			}
			return out
		}(), nil},
		{"split on a four-GPU node", "split", dgxH100()[:4], nil, []string{
			"profiles.split[1].gpus: GPUs 4-7 are not on this node (it has GPUs 0-3)",
		}},
		{"mig {} and unlisted GPUs", "mig-on", dgxH100()[:3], []Assignment{
			whole(0),
			{GPU: 1, Entry: 0, MIG: map[string]int{}, Replicas: 3, FailRequestsGreaterThanOne: true},
			whole(2),
		}, nil},
		{"model filter, GPUs out of order", "h100-only", mixed, []Assignment{
			{GPU: 0, Entry: 0, Replicas: 1, MIG: map[string]int{"7g.80gb": 1}}, whole(1), whole(2),
		}, nil},
		{"MIG on a GPU that cannot", "split", []GPU{{Index: 0, Model: "T4-16GB"}}, nil, []string{
			"profiles.split[0].gpus: GPUs 1-3 are not on this node (it has GPU 0 only)",
			"profiles.split[0].mig: GPU 0 (T4-16GB) cannot run MIG",
			"profiles.split[1].gpus: GPUs 4-7 are not on this node (it has GPU 0 only)",
		}},
		{"two entries select one GPU", "clash", dgxH100()[:2], nil, []string{
			"profiles.clash[1].gpus: GPU 1 (H100-80GB) is also selected by profiles.clash[0]",
		}},
		{"three entries select one GPU", "clash-3", dgxH100()[:2], nil, []string{
			"profiles.clash-3[1].gpus: GPU 1 (H100-80GB) is also selected by profiles.clash-3[0]",
			"profiles.clash-3[2].gpus: GPU 1 (H100-80GB) is also selected by profiles.clash-3[0]",
		}},
		{"node lists a GPU twice", "full", append(dgxH100()[:1], dgxH100()[0]), nil, []string{
			"the node lists GPU 0 twice",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := f.Resolve(tc.profile, tc.gpus)
			if tc.wantErr != nil {
				var rerr *Error
				if !errors.As(err, &rerr) {
					t.Fatalf("Resolve = %v, %v; want *Error", got, err)
				}
				if len(rerr.Problems) != len(tc.wantErr) {
					t.Fatalf("got %d problems, want %d:\n%v", len(rerr.Problems), len(tc.wantErr), err)
				}
				for i, w := range tc.wantErr {
					if !strings.HasPrefix(rerr.Problems[i].String(), w) {
						t.Errorf("problem %d = %q, want prefix %q", i, rerr.Problems[i], w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Resolve mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestResolveUnknownProfile(t *testing.T) {
	f := mustParse(t, specExample)
	_, err := f.Resolve("balancd", dgxH100())
	var uerr *UnknownProfileError
	if !errors.As(err, &uerr) || uerr.Name != "balancd" {
		t.Fatalf("Resolve(unknown) = %v", err)
	}
	if diff := cmp.Diff([]string{"balanced", "full", "hybrid", "shared-4", "split"}, uerr.Known); diff != "" {
		t.Errorf("known profiles (-want +got):\n%s", diff)
	}
	want := `unknown profile "balancd" (did you mean balanced?); known profiles: balanced, full, hybrid, shared-4, split`
	if err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
}

func TestResolveDoesNotShareMaps(t *testing.T) {
	f := mustParse(t, specExample)
	got, err := f.Resolve("balanced", dgxH100()[:1])
	if err != nil {
		t.Fatal(err)
	}
	got[0].MIG["1g.10gb"] = 99
	got[0].MIGReplicas["1g.10gb"] = 99
	if diff := cmp.Diff(mustParse(t, specExample).Profiles["balanced"], f.Profiles["balanced"]); diff != "" {
		t.Errorf("changing an Assignment changed the File (-before +after):\n%s", diff)
	}
}

func TestProfileHash(t *testing.T) {
	f := mustParse(t, `version: v1
profiles:
  a:
    - gpus: [0, 1]
      mig: {1g.10gb: 7}
  same-as-a:
    - gpus: [1, 0]
      mig: {1g.10gb: 7}
  more-replicas:
    - gpus: [0, 1]
      mig: {1g.10gb: 7}
      timeSlicing: {replicas: 2}
  mig-off:
    - gpus: [0, 1]
  mig-empty:
    - gpus: [0, 1]
      mig: {}
  all:
    - gpus: all
`)
	hashes := map[string]string{}
	for name := range f.Profiles {
		h := f.ProfileHash(name)
		if len(h) != 16 {
			t.Errorf("ProfileHash(%s) = %q, want 16 hex digits", name, h)
		}
		if h != f.ProfileHash(name) {
			t.Errorf("ProfileHash(%s) is not stable", name)
		}
		hashes[name] = h
	}
	if hashes["a"] != hashes["same-as-a"] {
		t.Errorf("index order or name changed the hash")
	}
	seen := map[string]string{}
	for _, name := range []string{"a", "more-replicas", "mig-off", "mig-empty", "all"} {
		if other, dup := seen[hashes[name]]; dup {
			t.Errorf("profiles %s and %s hash alike", name, other)
		}
		seen[hashes[name]] = name
	}
	if f.ProfileHash("nope") != "" {
		t.Errorf("unknown profile must hash to \"\"")
	}
	// The hash must not depend on the order of the file's text.
	g := mustParse(t, "version: v1\nprofiles:\n  x:\n    - mig: {1g.10gb: 7}\n      gpus: [1, 0]\n")
	if g.ProfileHash("x") != hashes["a"] {
		t.Errorf("field order changed the hash")
	}
}

// TestResolveSelectsNoneNamesThePinLabel: the hint of a profile that
// selects none of the node's GPUs names the label that pins a profile on
// this cluster: carve.dev/profile, or the agent's --profile-label.
func TestResolveSelectsNoneNamesThePinLabel(t *testing.T) {
	a100 := []GPU{{Index: 0, Model: "A100-40GB", Product: "NVIDIA A100-SXM4-40GB", MIGCapable: true}}
	for _, tt := range []struct{ profileLabel, want string }{
		{"", "(a rule or the carve.dev/profile label)"},
		{"nvidia.com/mig.config", "(a rule or the nvidia.com/mig.config label)"},
	} {
		f := mustParse(t, "version: v1\nprofiles:\n  h100:\n    - gpus: all\n      model: H100-80GB\n      mig: {1g.10gb: 7}\n")
		f.ProfileLabel = tt.profileLabel
		_, err := f.Resolve("h100", a100)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("profile label %q: error %v, want one containing %q", tt.profileLabel, err, tt.want)
		}
	}
}
