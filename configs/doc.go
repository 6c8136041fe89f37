// Package configs reads carve's profile file (the profiles.yaml key of the
// profile ConfigMap), checks it, and answers the questions the agent and
// carvectl ask of it:
//
//   - Parse decodes the file strictly and reports every problem at once,
//     each with the path of the place it concerns.
//   - (*File).Validate checks the MIG geometries of every profile against a
//     Geometry (implemented by the partition package), for a node's GPUs or
//     for every GPU model the geometry knows.
//   - (*File).Resolve turns a profile into one Assignment per GPU of a node.
//   - (*File).Select picks the profile in force for a node's labels at an
//     instant, from windows, the carve.dev/profile label, rules and the
//     default; NextChange, InMaintenance and Timeline tell when answers
//     change.
//
// The package imports no other carve package and reads no clock: every
// time-dependent question takes the instant as an argument. docs/profiles.md
// is the user-facing reference of the format.
package configs
