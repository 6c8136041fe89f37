package partition

import (
	"errors"
	"fmt"
	"strings"
)

// ErrUnknownModel means a GPU model is not among the models a Geometry knows.
var ErrUnknownModel = errors.New("unknown GPU model")

// Geometry answers the hardware questions of profile validation (it
// satisfies configs.Geometry without importing it) from a list of GPU
// models: the built-in Catalogue for carvectl, or the models
// read from a node's devices for the agent.
type Geometry struct {
	models []Model
}

// NewGeometry returns a Geometry over models. Models with the same key
// (the identical GPUs of one node) count once; the first one wins. The
// models are copied, so later changes to the slice do not affect it.
func NewGeometry(models []Model) *Geometry {
	g := &Geometry{}
	for _, m := range models {
		if _, dup := g.Model(m.Key); dup {
			continue
		}
		m.Profiles = append([]GIProfile(nil), m.Profiles...)
		g.models = append(g.models, m)
	}
	return g
}

// Model returns the model with that key, ignoring case.
func (g *Geometry) Model(key string) (Model, bool) {
	for _, m := range g.models {
		if strings.EqualFold(m.Key, strings.TrimSpace(key)) {
			return m, true
		}
	}
	return Model{}, false
}

// ModelKeys returns the keys of the known models, in the order given to
// NewGeometry.
func (g *Geometry) ModelKeys() []string {
	out := make([]string, len(g.models))
	for i, m := range g.models {
		out[i] = m.Key
	}
	return out
}

// ModelInfo returns the product name and MIG profile names of the model
// with that key ("" and nil when unknown).
func (g *Geometry) ModelInfo(key string) (product string, profiles []string) {
	m, ok := g.Model(key)
	if !ok {
		return "", nil
	}
	return m.Product, m.ProfileNames()
}

// Fit returns nil when one GPU of the model can hold all the MIG instances
// in counts at once. Otherwise the error says why: it wraps ErrUnknownModel
// for a model the geometry lacks, or ErrCannotPlace (see Place).
func (g *Geometry) Fit(model string, counts map[string]int) error {
	m, ok := g.Model(model)
	if !ok {
		known := strings.Join(g.ModelKeys(), ", ")
		if known == "" {
			known = "none"
		}
		return fmt.Errorf("%w %q (known: %s)", ErrUnknownModel, model, known)
	}
	_, err := Place(m, counts)
	return err
}
