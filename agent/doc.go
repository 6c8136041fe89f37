// Package agent is carve's node agent: it selects the profile in force for
// its node, computes the desired state (package desired), plans and applies
// the MIG partition through partition, expands the result into
// device-plugin resources through timeslice, advertises them through
// plugin, and records what it did in node labels, the node record
// annotation (api/v1) and Events. It is the only package of carve that
// knows Kubernetes; the reconcile itself (Reconciler) is free of it.
//
// One reconcile is a pass through steps, each in its own file: select
// (select.go), plan and order (plan.go), withdraw and re-plan
// (withdraw.go), drain (drain.go), apply (apply.go), advertise and record
// (advertise.go). The Controller (controller.go) feeds it from informers
// and writes its Result to the API server; run.go wires the parts.
package agent
