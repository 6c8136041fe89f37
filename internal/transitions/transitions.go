// Package transitions is carve's reference suite of geometry transitions:
// profile files for several GPU models and the changes between their
// profiles that the chaos runs (`make chaos`) and the benchmarks put the
// agent through. It is data only; it imports nothing of carve.
package transitions

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Transition is one change of profile on a simulated machine.
type Transition struct {
	// Model is the catalogue key of the machine's GPUs ("H100-80GB").
	Model string
	// Machine is the simulated machine (`--gpus sim:<Machine>`): two GPUs
	// of Model, so that every transition touches more than one GPU.
	Machine string
	// From and To are profile names in Profiles(Model).
	From, To string
	// What says in a few words what the transition exercises.
	What string
}

// Name is "<model>:<from>-><to>", unique within Suite.
func (t Transition) Name() string { return fmt.Sprintf("%s:%s->%s", t.Model, t.From, t.To) }

// shapes are the MIG profiles each profile name stands for, per model; a
// profile missing from a model's map is not defined for it. "full" (MIG
// off, whole GPUs) and "shared-4" (whole GPUs time-sliced four times) are
// defined for every model.
var shapes = map[string]map[string]string{
	"H100-80GB": {
		"all-1g":    "{1g.10gb: 7}",
		"balanced":  "{1g.10gb: 2, 2g.20gb: 1, 3g.40gb: 1}",
		"halves":    "{4g.40gb: 1, 3g.40gb: 1}",
		"half":      "{3g.40gb: 1}",
		"half-plus": "{3g.40gb: 1, 1g.10gb: 3}",
		"whole":     "{7g.80gb: 1}",
		"big-1g":    "{1g.20gb: 4}",
	},
	"A100-40GB": {
		"all-1g":   "{1g.5gb: 7}",
		"balanced": "{1g.5gb: 2, 2g.10gb: 1, 3g.20gb: 1}",
		"halves":   "{4g.20gb: 1, 3g.20gb: 1}",
		"half":     "{3g.20gb: 1}",
	},
	"A30-24GB": {
		"all-1g": "{1g.6gb: 4}",
		"halves": "{2g.12gb: 2}",
		"whole":  "{4g.24gb: 1}",
	},
	"H200-141GB": {
		"all-1g":   "{1g.18gb: 7}",
		"balanced": "{1g.18gb: 2, 2g.35gb: 1, 3g.71gb: 1}",
		"halves":   "{4g.71gb: 1, 3g.71gb: 1}",
	},
}

// Profiles returns the profile file (format v1) for the model's
// transitions: "full", "shared-4" and the model's MIG shapes, each on all
// GPUs. It panics for a model the suite does not know, which is a
// programming error.
func Profiles(model string) string {
	mig, ok := shapes[model]
	if !ok {
		panic(fmt.Sprintf("transitions: no profiles for model %q", model))
	}
	var b strings.Builder
	b.WriteString("version: v1\ndefaultProfile: full\nprofiles:\n")
	b.WriteString("  full:\n    - gpus: all\n")
	b.WriteString("  shared-4:\n    - gpus: all\n      timeSlicing: {replicas: 4}\n")
	for _, name := range slices.Sorted(maps.Keys(mig)) {
		fmt.Fprintf(&b, "  %s:\n    - gpus: all\n      model: %s\n      mig: %s\n", name, model, mig[name])
	}
	return b.String()
}

// Suite returns the reference transitions, 22 of them on four models:
// MIG off to on and back, all-1g to a balanced mix, balanced to halves,
// adding instances to a partly used GPU and taking them away, and a
// time-slicing change that touches no GPU.
func Suite() []Transition {
	t := func(model, from, to, what string) Transition {
		return Transition{Model: model, Machine: strings.ToLower(model) + "*2", From: from, To: to, What: what}
	}
	return []Transition{
		t("H100-80GB", "full", "all-1g", "MIG off to on"),
		t("H100-80GB", "all-1g", "balanced", "all-1g to a balanced mix"),
		t("H100-80GB", "balanced", "halves", "balanced to halves"),
		t("H100-80GB", "halves", "full", "MIG on to off"),
		t("H100-80GB", "full", "half", "MIG on, one instance"),
		t("H100-80GB", "half", "half-plus", "instances added to a partly used GPU"),
		t("H100-80GB", "half-plus", "half", "instances taken from a GPU, one kept"),
		t("H100-80GB", "half-plus", "balanced", "a mix to another; the 3g must move from 0 to 4"),
		t("H100-80GB", "balanced", "all-1g", "a mix to all-1g"),
		t("H100-80GB", "all-1g", "big-1g", "1g.10gb to 1g.20gb"),
		t("H100-80GB", "halves", "whole", "halves to one 7g"),
		t("H100-80GB", "whole", "full", "MIG on to off from one 7g"),
		t("H100-80GB", "full", "shared-4", "time-slicing only, no GPU touched"),
		t("A100-40GB", "full", "all-1g", "MIG off to on"),
		t("A100-40GB", "all-1g", "balanced", "all-1g to a balanced mix"),
		t("A100-40GB", "balanced", "halves", "balanced to halves"),
		t("A100-40GB", "half", "halves", "a 4g added; the 3g must move from 0 to 4"),
		t("A30-24GB", "full", "all-1g", "MIG off to on"),
		t("A30-24GB", "all-1g", "halves", "four 1g to two 2g"),
		t("A30-24GB", "halves", "whole", "two 2g to one 4g"),
		t("H200-141GB", "all-1g", "balanced", "all-1g to a balanced mix"),
		t("H200-141GB", "halves", "full", "MIG on to off"),
	}
}
