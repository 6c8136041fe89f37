// Package harness holds what carve's end-to-end tests and its demo do to a
// real cluster: pods that report the devices they were given, waits on a
// Node's allocatable, labels and annotation, the profile ConfigMap, objects
// of any kind from a rendered manifest, and the carve-agent binary as a
// process. Functions return errors rather than failing a test, so that the
// demo can use them too.
package harness
