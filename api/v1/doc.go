// Package v1 holds carve's public formats, version 1: everything another
// program (a dashboard, a script, carvectl, an older or newer agent) reads
// from carve or writes for it, in one place.
//
//   - the node labels carve writes and the annotation key (labels.go);
//   - the node states (states.go) and the Event reasons (events.go);
//   - the node record, the JSON of the carve.dev/partition annotation
//     (record.go);
//   - how resource names and per-profile label keys are formed, and the
//     limit on time-slicing replicas (resources.go);
//   - the document `carvectl plan -o json` prints (plan.go);
//   - the apply checkpoint the agent keeps in its state directory
//     (checkpoint.go).
//
// The profile file has its own versioned format in package configs.
// This package depends on nothing else of carve (a test checks it): the
// plan types the plan document and the checkpoint hold are its own
// (nodeplan.go), and package partition converts its planner's types to and
// from them. Importers name it carvev1:
//
//	import carvev1 "github.com/carve-dev/carve/api/v1"
//
// Fields are only ever added to these formats; a reader must ignore fields
// it does not know (the checkpoint is the exception: an agent refuses one
// with a field it does not know and re-plans from the GPUs instead). A
// change that removes or redefines a field is a new version, in a new
// package. docs/versioning.md says what carve promises and the golden
// files in testdata pin the encodings.
package v1
