// Command carve-cluster runs the local single-node Kubernetes cluster of
// carve's end-to-end tests by hand, for demos and debugging.
//
//	carve-cluster up [-d] [--dir DIR] [--node-name NAME] [--label k=v]...
//	carve-cluster env
//	carve-cluster status
//	carve-cluster kubectl ARGS...
//	carve-cluster down
//	carve-cluster build
//
// It must run as root. Only one cluster runs per machine at a time; env,
// status, kubectl and down find it through the machine lock, so they need no
// flags.
package main
