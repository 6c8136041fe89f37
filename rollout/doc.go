// Package rollout decides, without a central controller, which nodes may
// be in a disruptive change at once: the agents that read one profile file
// share slots, kept as Leases in the file's namespace, and count one
// another and their failures from Leases too. This package holds the
// accounting alone (names, counts, percentages, expiry, the failure
// budget) over a snapshot of those Leases; the agent reads and writes the
// Leases themselves.
package rollout
