package configs

import (
	"errors"
	"strings"
	"testing"
)

func nodeOf(n int, model, product string, capable bool) []GPU {
	gpus := make([]GPU, n)
	for i := range gpus {
		gpus[i] = GPU{Index: i, Model: model, Product: product, MIGCapable: capable}
	}
	return gpus
}

func dgxH100() []GPU { return nodeOf(8, "H100-80GB", "NVIDIA H100 80GB HBM3", true) }

func TestValidate(t *testing.T) {
	mixed := append(nodeOf(2, "H100-80GB", "NVIDIA H100 80GB HBM3", true),
		GPU{Index: 2, Model: "T4-16GB", Product: "Tesla T4", MIGCapable: false},
		GPU{Index: 3, Model: "X200-180GB", Product: "NVIDIA X200", MIGCapable: true})
	tests := []struct {
		name     string
		profiles string
		gpus     []GPU // nil: no node, check the catalogue
		want     []string
	}{
		// 1g.10gb is a two-slice profile on the A100-40GB: without a
		// model filter, split[0] is checked there too and fails.
		// 1g.10gb x7 is impossible on an A100-40GB (where 1g.10gb takes two
		// memory slices) but fits an H100: without a node, that is valid.
		{"spec example: split[0] has no model filter", "", nil, nil},
		{"placement fails with Fit's reason", `
  p:
    - gpus: all
      model: H100-80GB
      mig: {3g.40gb: 2, 1g.10gb: 1}
`, nil, []string{"profiles.p[0].mig: 3g.40gb x2 + 1g.10gb cannot be placed on H100-80GB: needs 9 of 8 memory slices: 3g.40gb x2 cover all 8 memory slices, leaving none for 1g.10gb x1"}},
		{"no filter: fits on one model with all the names", `
  p:
    - gpus: all
      mig: {1g.10gb: 7}
`, nil, nil},
		{"no filter: fits on no model with all the names", `
  p:
    - gpus: all
      mig: {1g.10gb: 8}
`, nil, []string{"profiles.p[0].mig: 1g.10gb x8 cannot be placed on any known GPU model (on A100-40GB: 1g.10gb x8: at most 4 fit on A100-40GB; on A100-80GB: 1g.10gb x8: at most 7 fit on A100-80GB; on H100-80GB: 1g.10gb x8: at most 7 fit on H100-80GB)"}},
		{"no model knows all the names", `
  p:
    - gpus: all
      mig: {1g.5gb: 1, 1g.18gb: 1}
`, nil, []string{"profiles.p[0].mig: no known GPU model has all of 1g.18gb, 1g.5gb (A100-40GB has 1g.5gb; A100-80GB has none of them; H100-80GB has none of them; H100-94GB has none of them; H100-96GB has none of them; H200-141GB has 1g.18gb; GH200-144GB has 1g.18gb; B200-180GB has none of them; GB200-186GB has none of them; B300-288GB has none of them; GB300-288GB has none of them; A30-24GB has none of them; RTX-PRO-6000-96GB has none of them)"}},
		{"profile unknown to the filtered model", `
  p:
    - gpus: all
      model: A30
      mig: {1g.10gb: 1, 2g.20gb: 1}
`, nil, []string{"profiles.p[0].mig: 1g.10gb, 2g.20gb are not MIG profiles of A30-24GB; it has 1g.6gb, 1g.6gb+me, 2g.12gb, 2g.12gb+me, 4g.24gb"}},
		{"two +me", `
  p:
    - gpus: all
      model: A30
      mig: {1g.6gb+me: 1, 2g.12gb+me: 1}
`, nil, []string{"profiles.p[0].mig: 2g.12gb+me + 1g.6gb+me cannot be placed on A30-24GB: 1g.6gb+me x1 and 2g.12gb+me x1: at most one +me instance fits on a GPU"}},
		{"different filters that match one model", `
  p:
    - gpus: all
      model: h100 80gb
      mig: {7g.80gb: 1}
    - gpus: [3]
      model: H100-80GB-HBM3
  q:
    - gpus: all
      model: H100
    - gpus: all
      model: A100
`, nil, []string{"profiles.p[1].gpus: on H100-80GB, GPU 3 is also selected by profiles.p[0] (both model filters match H100-80GB)"}},
		{"mig {} needs no placement", `
  p:
    - gpus: all
      mig: {}
`, nil, nil},
		{"on a node: fits", "", dgxH100(), nil},
		{"on a node: indices the node lacks", `
  p:
    - gpus: [0, 9, 8]
      mig: {1g.10gb: 1}
    - gpus: [12]
`, dgxH100(), []string{
			"profiles.p[0].gpus: GPUs 8-9 are not on this node (it has GPUs 0-7)",
			"profiles.p[1].gpus: GPU 12 is not on this node (it has GPUs 0-7)",
		}},
		{"on a node: checked on the models of the selected GPUs", `
  p:
    - gpus: all
      mig: {1g.10gb: 7}
`, nodeOf(4, "A100-40GB", "NVIDIA A100-SXM4-40GB", true), []string{
			"profiles.p[0].mig: 1g.10gb x7 cannot be placed on A100-40GB (GPUs 0-3): 1g.10gb x7: at most 4 fit on A100-40GB",
		}},
		{"on a node: unknown profile, incapable GPU, unknown geometry", `
  p:
    - gpus: all
      mig: {1g.5gb: 2}
`, mixed, []string{
			"profiles.p[0].mig: 1g.5gb is not a MIG profile of H100-80GB (GPUs 0-1); it has 1g.10gb",
			"profiles.p[0].mig: GPU 2 (T4-16GB) cannot run MIG",
			"profiles.p[0].mig: no MIG geometry is known for X200-180GB (GPU 3)",
		}},
		{"on a node: the model filter keeps MIG off other GPUs", `
  p:
    - gpus: all
      model: H100
      mig: {3g.40gb: 2}
    - gpus: all
      model: T4
      timeSlicing: {replicas: 4}
`, mixed, nil},
		{"on a node: two filters match one GPU", `
  p:
    - gpus: [0]
      model: H100
    - gpus: [0, 1]
      model: HBM3
`, mixed, []string{
			"profiles.p[1].gpus: GPU 0 (H100-80GB) is also selected by profiles.p[0]",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := specExample
			if tc.profiles != "" {
				src = "version: v1\nprofiles:" + tc.profiles
			}
			f := mustParse(t, src)
			err := f.Validate(catalogue(), tc.gpus)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			var verr *Error
			if !errors.As(err, &verr) {
				t.Fatalf("Validate = %v, want *Error", err)
			}
			if len(verr.Problems) != len(tc.want) {
				t.Fatalf("got %d problems, want %d:\n%v", len(verr.Problems), len(tc.want), err)
			}
			for i, w := range tc.want {
				if got := verr.Problems[i].String(); !strings.HasPrefix(got, w) {
					t.Errorf("problem %d = %q\nwant prefix %q", i, got, w)
				}
			}
		})
	}
}

// A mixed-fleet file: split names GPUs 4-7 and a100 holds A100-only MIG
// profiles. Valid without a node; on a 4-GPU H100 node only the profiles
// that fit it pass, each checked alone.
const mixedFleet = `version: v1
profiles:
  full:
    - gpus: all
  split:
    - gpus: [0, 1, 2, 3]
      mig: {1g.10gb: 7}
    - gpus: [4, 5, 6, 7]
      timeSlicing: {replicas: 2}
  a100:
    - gpus: all
      model: A100-40GB
      mig: {1g.5gb: 7}
  h100:
    - gpus: all
      mig: {3g.40gb: 2}
`

func TestValidateProfile(t *testing.T) {
	h100x4 := nodeOf(4, "H100-80GB", "NVIDIA H100 80GB HBM3", true)
	a100x4 := nodeOf(4, "A100-40GB", "NVIDIA A100-SXM4-40GB", true)
	tests := []struct {
		name    string
		profile string
		gpus    []GPU // nil: no node, check the models
		want    []string
		unknown bool
	}{
		{name: "whole GPUs fit any node", profile: "full", gpus: h100x4},
		{name: "indices the node lacks", profile: "split", gpus: h100x4, want: []string{
			"profiles.split[1].gpus: GPUs 4-7 are not on this node (it has GPUs 0-3)",
		}},
		{name: "indices the node lacks: fine without a node", profile: "split"},
		{name: "1g.10gb x7 does not fit an A100-40GB", profile: "split", gpus: nodeOf(8, "A100-40GB", "NVIDIA A100-SXM4-40GB", true), want: []string{
			"profiles.split[0].mig: 1g.10gb x7 cannot be placed on A100-40GB (GPUs 0-3): 1g.10gb x7: at most 4 fit on A100-40GB",
		}},
		{name: "model filter selects no GPU of an H100 node", profile: "a100", gpus: h100x4},
		{name: "A100 profile on an A100 node", profile: "a100", gpus: a100x4},
		{name: "H100 geometry on an A100 node", profile: "h100", gpus: a100x4, want: []string{
			"profiles.h100[0].mig: 3g.40gb is not a MIG profile of A100-40GB (GPUs 0-3)",
		}},
		{name: "unknown profile", profile: "nope", gpus: h100x4, unknown: true},
	}
	f := mustParse(t, mixedFleet)
	if err := f.Validate(catalogue(), nil); err != nil {
		t.Fatalf("Validate without a node: %v", err)
	}
	if err := f.Validate(catalogue(), h100x4); err == nil {
		t.Fatal("Validate of every profile on a 4-GPU H100 node succeeded; the test file should not fit it whole")
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := f.ValidateProfile(tc.profile, catalogue(), tc.gpus)
			if tc.unknown {
				var uerr *UnknownProfileError
				if !errors.As(err, &uerr) || uerr.Name != tc.profile {
					t.Fatalf("ValidateProfile = %v, want *UnknownProfileError for %q", err, tc.profile)
				}
				return
			}
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("ValidateProfile: %v", err)
				}
				return
			}
			var verr *Error
			if !errors.As(err, &verr) {
				t.Fatalf("ValidateProfile = %v, want *Error", err)
			}
			if len(verr.Problems) != len(tc.want) {
				t.Fatalf("got %d problems, want %d:\n%v", len(verr.Problems), len(tc.want), err)
			}
			for i, w := range tc.want {
				if got := verr.Problems[i].String(); !strings.HasPrefix(got, w) {
					t.Errorf("problem %d = %q\nwant prefix %q", i, got, w)
				}
			}
		})
	}
	if err := f.ValidateProfile("full", nil, h100x4); err == nil {
		t.Error("ValidateProfile(nil geometry) succeeded")
	}
}

func TestValidateNeedsGeometry(t *testing.T) {
	f := mustParse(t, specExample)
	if err := f.Validate(nil, nil); err == nil {
		t.Error("Validate(nil geometry) succeeded")
	}
}

func TestDescribeMIG(t *testing.T) {
	tests := []struct {
		mig  map[string]int
		want string
	}{
		{map[string]int{"1g.10gb": 1, "3g.40gb": 2}, "3g.40gb x2 + 1g.10gb"},
		{map[string]int{"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}, "3g.40gb + 2g.20gb + 1g.10gb x2"},
		{map[string]int{"1g.20gb": 1, "1g.10gb": 1, "7g.80gb": 1}, "7g.80gb + 1g.10gb + 1g.20gb"},
		{map[string]int{"odd": 1, "1g.5gb": 3}, "1g.5gb x3 + odd"},
	}
	for _, tc := range tests {
		if got := describeMIG(tc.mig); got != tc.want {
			t.Errorf("describeMIG(%v) = %q, want %q", tc.mig, got, tc.want)
		}
	}
}

// TestCheckUnverified: without a node, entries for GPU models neither the
// catalogue nor the node knows are unverified, not problems, so that one
// file serves a mixed fleet; a mix of known and unknown names stays a
// problem (a typo, not another GPU).
func TestCheckUnverified(t *testing.T) {
	tests := []struct {
		name           string
		profiles       string
		wantUnverified []string
		wantErr        string
	}{
		{"a filter for a model known nowhere here", `
  p:
    - gpus: all
      model: V100
      mig: {1g.5gb: 1}
`, []string{`profiles.p[0].model: "V100" matches no GPU model known here (known: `}, ""},
		{"profiles no model here has", `
  p:
    - gpus: all
      mig: {1g.50gb: 2, 2g.100gb: 1}
`, []string{"profiles.p[0].mig: no GPU model known here has any of 1g.50gb, 2g.100gb; the entry is checked only on nodes whose GPUs have them"}, ""},
		{"known and unknown names mixed is a problem", `
  p:
    - gpus: all
      mig: {1g.5gb: 1, 1g.50gb: 1}
`, nil, "profiles.p[0].mig: no known GPU model has all of 1g.50gb, 1g.5gb"},
		{"an unverified entry beside a wrong one", `
  p:
    - gpus: [0]
      model: V100
      mig: {1g.5gb: 1}
    - gpus: [1]
      model: A100-40GB
      mig: {1g.5gb: 8}
`, []string{`profiles.p[0].model: "V100" matches no GPU model known here`}, "profiles.p[1].mig: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := mustParse(t, "version: v1\nprofiles:"+tc.profiles)
			unverified, err := f.Check(catalogue(), nil)
			var got []string
			for i, p := range unverified {
				if !p.Unverified {
					t.Errorf("unverified place %d has Unverified false", i)
				}
				got = append(got, p.String())
			}
			if len(got) != len(tc.wantUnverified) {
				t.Fatalf("unverified %q, want %d starting %q", got, len(tc.wantUnverified), tc.wantUnverified)
			}
			for i, w := range tc.wantUnverified {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("unverified %d = %q, want prefix %q", i, got[i], w)
				}
			}
			if (err != nil) != (tc.wantErr != "") || err != nil && !strings.HasPrefix(err.Error(), tc.wantErr) {
				t.Errorf("error %v, want one starting %q", err, tc.wantErr)
			}
			if verr := f.Validate(catalogue(), nil); (verr == nil) != (err == nil) {
				t.Errorf("Validate = %v, Check's error %v: they must agree", verr, err)
			}
		})
	}
}
