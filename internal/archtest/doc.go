// Package archtest holds tests only: they check that the package layout
// docs/architecture.md describes is the one the code has, and that the
// data flows one way (partition and timeslice never depend on configs,
// api/v1 depends on nothing of carve).
package archtest
