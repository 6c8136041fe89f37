package configs

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// hybrid is the hybrid profile of the format's documentation: four static
// GPUs and four dynamic ones limited to three MIG profiles, and a profile
// whose dynamic GPUs offer every profile of their model.
const hybrid = `version: v1
profiles:
  hybrid:
    - gpus: [0, 1, 2, 3]
      mig: {"1g.10gb": 7}
    - gpus: [4, 5, 6, 7]
      dynamic: {profiles: ["1g.10gb", "3g.40gb", "7g.80gb"]}
  all-dynamic:
    - gpus: all
      model: H100-80GB
      dynamic: {}
`

func TestParseDynamic(t *testing.T) {
	f := mustParse(t, hybrid)
	want := map[string]Profile{
		"hybrid": {
			{GPUs: GPUSelector{Indices: []int{0, 1, 2, 3}}, MIG: map[string]int{"1g.10gb": 7}},
			{GPUs: GPUSelector{Indices: []int{4, 5, 6, 7}}, Dynamic: &Dynamic{Profiles: []string{"1g.10gb", "3g.40gb", "7g.80gb"}}},
		},
		"all-dynamic": {{GPUs: GPUSelector{All: true}, Model: "H100-80GB", Dynamic: &Dynamic{}}},
	}
	if diff := cmp.Diff(want, f.Profiles); diff != "" {
		t.Errorf("profiles (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"profiles.all-dynamic[0].dynamic", "profiles.hybrid[1].dynamic"}, f.DynamicPlaces()); diff != "" {
		t.Errorf("DynamicPlaces (-want +got):\n%s", diff)
	}
	if err := f.Validate(catalogue(), nil); err != nil {
		t.Errorf("Validate without a node: %v", err)
	}
	if err := f.Validate(catalogue(), dgxH100()); err != nil {
		t.Errorf("Validate on a DGX H100: %v", err)
	}
}

func TestParseDynamicErrors(t *testing.T) {
	entry := "version: v1\nprofiles:\n  p:\n    - gpus: [4]\n      "
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{"with mig", entry + "mig: {1g.10gb: 1}\n      dynamic: {}\n", []string{
			"profiles.p[0].dynamic: dynamic excludes mig: the MIG instances of a dynamic GPU are made for the claims given its devices; keep one of them",
		}},
		{"with timeSlicing", entry + "timeSlicing: {replicas: 2}\n      dynamic: {}\n", []string{
			"profiles.p[0].dynamic: dynamic excludes timeSlicing: each MIG device of a dynamic GPU is made for one claim; keep one of them",
		}},
		{"unknown field", entry + "dynamic: {profile: [1g.10gb]}\n", []string{
			"profiles.p[0].dynamic.profile: unknown field (did you mean profiles?)",
		}},
		{"null", entry + "dynamic:\n", []string{
			"profiles.p[0].dynamic: must be a mapping: {} for every MIG profile of the GPU's model, or {profiles: [1g.10gb, ...]} for some",
		}},
		{"not a mapping", entry + "dynamic: [1g.10gb]\n", []string{"profiles.p[0].dynamic: must be a mapping, not a list"}},
		{"profiles not a list", entry + "dynamic: {profiles: 1g.10gb}\n", []string{"profiles.p[0].dynamic.profiles: must be a list, not"}},
		{"empty list", entry + "dynamic: {profiles: []}\n", []string{
			"profiles.p[0].dynamic.profiles: must name at least one MIG profile; leave profiles out to offer every profile of the GPU's model",
		}},
		{"bad items", entry + "dynamic: {profiles: [1g.10gb, 3, '', nvidia.com/mig-3g.40gb, 1g.10gb]}\n", []string{
			"profiles.p[0].dynamic.profiles[1]: must be a string, not the number 3 (quote it)",
			"profiles.p[0].dynamic.profiles[2]: must not be empty",
			"profiles.p[0].dynamic.profiles[3]: write the MIG profile name alone, e.g. 3g.40gb",
			"profiles.p[0].dynamic.profiles[4]: 1g.10gb is listed twice (also profiles.p[0].dynamic.profiles[0])",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse([]byte(tc.src))
			if f != nil || err == nil {
				t.Fatalf("Parse accepted:\n%s", tc.src)
			}
			var perr *Error
			if !errors.As(err, &perr) {
				t.Fatalf("Parse = %v, want *Error", err)
			}
			if len(perr.Problems) != len(tc.want) {
				t.Fatalf("got %d problems, want %d:\n%v", len(perr.Problems), len(tc.want), err)
			}
			for i, w := range tc.want {
				if got := perr.Problems[i].String(); !strings.HasPrefix(got, w) {
					t.Errorf("problem %d = %q\nwant prefix %q", i, got, w)
				}
			}
		})
	}
}

func TestValidateDynamic(t *testing.T) {
	mixed := append(nodeOf(2, "H100-80GB", "NVIDIA H100 80GB HBM3", true),
		GPU{Index: 2, Model: "T4-16GB", Product: "Tesla T4", MIGCapable: false},
		GPU{Index: 3, Model: "X200-180GB", Product: "NVIDIA X200", MIGCapable: true})
	tests := []struct {
		name           string
		profiles       string
		gpus           []GPU // nil: no node, check the catalogue
		want           []string
		wantUnverified []string
	}{
		{"on a node: a profile the model lacks, at its place", `
  hybrid:
    - gpus: [0, 1, 2, 3]
      mig: {1g.10gb: 7}
    - gpus: [4, 5, 6, 7]
      dynamic: {profiles: [1g.10gb, 2g.10gb, 7g.80gb, 1g.5gb]}
`, dgxH100(), []string{
			"profiles.hybrid[1].dynamic.profiles[1]: 2g.10gb is not a MIG profile of H100-80GB (GPUs 4-7); it has 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb",
			"profiles.hybrid[1].dynamic.profiles[3]: 1g.5gb is not a MIG profile of H100-80GB (GPUs 4-7)",
		}, nil},
		{"on a node: every profile of the model needs MIG and a known geometry", `
  p:
    - gpus: all
      dynamic: {}
`, mixed, []string{
			"profiles.p[0].dynamic: GPU 2 (T4-16GB) cannot run MIG",
			"profiles.p[0].dynamic: no MIG geometry is known for X200-180GB (GPU 3)",
		}, nil},
		{"on a node: GPUs the node lacks", `
  p:
    - gpus: [8]
      dynamic: {}
`, dgxH100(), []string{"profiles.p[0].gpus: GPU 8 is not on this node (it has GPUs 0-7)"}, nil},
		{"without a node: the filtered model lacks a profile", `
  p:
    - gpus: all
      model: A100-40GB
      dynamic: {profiles: [1g.5gb, 3g.40gb]}
`, nil, []string{"profiles.p[0].dynamic.profiles[1]: 3g.40gb is not a MIG profile of A100-40GB; it has"}, nil},
		{"without a node: no model has all the profiles", `
  p:
    - gpus: all
      dynamic: {profiles: [1g.5gb, 3g.40gb]}
`, nil, []string{"profiles.p[0].dynamic.profiles: no known GPU model has all of 1g.5gb, 3g.40gb (A100-40GB has 1g.5gb; A100-80GB has 3g.40gb;"}, nil},
		{"without a node: one model has them all", `
  p:
    - gpus: all
      dynamic: {profiles: [1g.10gb, 3g.40gb]}
`, nil, nil, nil},
		{"without a node: profiles of a model not known here", `
  p:
    - gpus: all
      dynamic: {profiles: [1g.50gb]}
  q:
    - gpus: all
      model: X200
      dynamic: {}
`, nil, nil, []string{
			"profiles.p[0].dynamic.profiles: no GPU model known here has any of 1g.50gb",
			`profiles.q[0].model: "X200" matches no GPU model known here`,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := mustParse(t, "version: v1\nprofiles:"+tc.profiles)
			unverified, err := f.Check(catalogue(), tc.gpus)
			checkPrefixes(t, "unverified", unverified, tc.wantUnverified)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				return
			}
			var verr *Error
			if !errors.As(err, &verr) {
				t.Fatalf("Check = %v, want *Error", err)
			}
			checkPrefixes(t, "problem", verr.Problems, tc.want)
		})
	}
}

// checkPrefixes checks that got are exactly as many problems as want, each
// starting with its want.
func checkPrefixes(t *testing.T, what string, got []Problem, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d %ss %v, want %d: %q", len(got), what, got, len(want), want)
	}
	for i, w := range want {
		if s := got[i].String(); !strings.HasPrefix(s, w) {
			t.Errorf("%s %d = %q\nwant prefix %q", what, i, s, w)
		}
	}
}

func TestResolveDynamic(t *testing.T) {
	f := mustParse(t, hybrid)
	got, err := f.Resolve("hybrid", dgxH100())
	if err != nil {
		t.Fatal(err)
	}
	var want []Assignment
	for i := range 4 {
		want = append(want, Assignment{GPU: i, Entry: 0, Replicas: 1, MIG: map[string]int{"1g.10gb": 7}})
	}
	for i := 4; i < 8; i++ {
		want = append(want, Assignment{GPU: i, Entry: 1, Replicas: 1, MIG: map[string]int{},
			Dynamic: &Dynamic{Profiles: []string{"1g.10gb", "3g.40gb", "7g.80gb"}}})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Resolve(hybrid) (-want +got):\n%s", diff)
	}
	got[4].Dynamic.Profiles[0] = "changed"
	if f.Profiles["hybrid"][1].Dynamic.Profiles[0] != "1g.10gb" {
		t.Error("Resolve shares the entry's list of dynamic profiles")
	}
	t4 := []GPU{{Index: 0, Model: "T4-16GB", Product: "Tesla T4"}}
	_, err = f.Resolve("all-dynamic", append(dgxH100()[:1], GPU{Index: 1, Model: "H100-80GB", Product: "NVIDIA H100 80GB HBM3"}))
	if err == nil || !strings.Contains(err.Error(), "profiles.all-dynamic[0].dynamic: GPU 1 (H100-80GB) cannot run MIG") {
		t.Errorf("Resolve on a GPU without MIG = %v, want it named", err)
	}
	if _, err := f.Resolve("all-dynamic", t4); err == nil {
		t.Error("Resolve of an H100 profile on a T4 succeeded")
	}
}

func TestProfileHashDynamic(t *testing.T) {
	f := mustParse(t, `version: v1
profiles:
  a:
    - gpus: [0, 1]
      dynamic: {profiles: [1g.10gb, 3g.40gb]}
  same-as-a:
    - gpus: [1, 0]
      dynamic: {profiles: [3g.40gb, 1g.10gb]}
  fewer:
    - gpus: [0, 1]
      dynamic: {profiles: [1g.10gb]}
  every:
    - gpus: [0, 1]
      dynamic: {}
  mig-empty:
    - gpus: [0, 1]
      mig: {}
`)
	if f.ProfileHash("a") != f.ProfileHash("same-as-a") {
		t.Error("the order of dynamic profiles changed the hash")
	}
	seen := map[string]string{}
	for _, name := range []string{"a", "fewer", "every", "mig-empty"} {
		h := f.ProfileHash(name)
		if other, dup := seen[h]; dup {
			t.Errorf("profiles %s and %s hash alike", name, other)
		}
		seen[h] = name
	}
}
