package v1

// PlanDocument is what `carvectl plan -o json` prints: the plan of one
// profile on one machine, per GPU, with the resources the node would
// advertise once it has run.
type PlanDocument struct {
	// Profile is the profile planned.
	Profile string `json:"profile"`
	// GPUs is the --gpus value the plan was made for, or "node:<name>"
	// for a plan made from a node's record (carvectl plan --node).
	GPUs string `json:"gpus"`
	// Plan holds one plan per GPU, in index order.
	Plan NodePlan `json:"plan"`
	// Resources counts the devices that would be advertised per resource.
	Resources map[string]int `json:"resources"`
	// NeedsReset is true when some GPU must be reset (or the node
	// rebooted) to change its MIG mode.
	NeedsReset bool `json:"needsReset"`
}
