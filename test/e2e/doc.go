// Package e2e holds carve's end-to-end tests: the device plugin, the agent
// (in process and as the carve-agent binary), crash recovery and the
// DaemonSet of configs/deploy, each on the real local Kubernetes of package
// cluster with simulated GPUs. It has tests only; `make e2e` runs them as
// root.
package e2e
