package partition

import (
	"errors"
	"fmt"
	"strings"

	"github.com/carve-dev/carve/configs"
)

// ErrUnknownModel means a GPU model is not among the models a Geometry knows.
var ErrUnknownModel = errors.New("unknown GPU model")

// Geometry answers configs' hardware questions (configs.Geometry) from a
// list of GPU models: the built-in Catalogue for carvectl, or the models
// read from a node's devices for the agent.
type Geometry struct {
	models []Model
}

var _ configs.Geometry = (*Geometry)(nil)

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

// Models returns the known models with their profile names, in the order
// given to NewGeometry.
func (g *Geometry) Models() []configs.GPUModel {
	out := make([]configs.GPUModel, len(g.models))
	for i, m := range g.models {
		out[i] = configs.GPUModel{Key: m.Key, Product: m.Product, Profiles: m.ProfileNames()}
	}
	return out
}

// Fit returns nil when one GPU of the model can hold all the MIG instances
// in counts at once. Otherwise the error says why: it wraps ErrUnknownModel
// for a model the geometry lacks, or ErrCannotPlace (see Place).
func (g *Geometry) Fit(model string, counts map[string]int) error {
	m, ok := g.Model(model)
	if !ok {
		keys := make([]string, len(g.models))
		for i, m := range g.models {
			keys[i] = m.Key
		}
		known := strings.Join(keys, ", ")
		if known == "" {
			known = "none"
		}
		return fmt.Errorf("%w %q (known: %s)", ErrUnknownModel, model, known)
	}
	_, err := Place(m, counts)
	return err
}
