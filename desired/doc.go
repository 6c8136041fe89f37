// Package desired computes what a node's GPUs should be: the profile in
// force, checked and resolved onto the node's GPUs, as MIG targets for the
// planner (partition) and sharing settings for the advertised resources
// (timeslice). It is the one place where configs' types meet partition's
// and timeslice's, so that neither of those imports configs; the agent and
// `carvectl plan` both compute a node's desired state here.
package desired
