// Package nvimport turns the configuration of NVIDIA's GPU Operator stack
// into a carve profile file: a MIG manager (mig-parted) configuration, and
// optionally the time-slicing configs of NVIDIA's device plugin. It is what
// `carvectl import mig-parted` runs.
//
// MigParted reads the files, converts them and returns the profile file as
// YAML together with Notes: one per thing that could not be carried over as
// it was (a PCI device ID carve's catalogue does not know, MPS sharing, a
// device plugin flag without a counterpart, ...), each naming the file and
// the YAML path it comes from. Nothing is dropped without a note. Input that
// is not a valid configuration of its kind is refused with an *Error that
// names every problem's place.
//
// The result is checked as `carvectl validate` checks a file (configs.Parse
// and configs.File.Validate against carve's catalogue); a converted profile
// carve would reject is left out, with a note saying why.
//
// Both inputs may also be given as a Kubernetes ConfigMap manifest holding
// the configuration under a data key, as the GPU Operator stores them.
// docs/import.md is the user-facing description of what maps to what.
package nvimport
