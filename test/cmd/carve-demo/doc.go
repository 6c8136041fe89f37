// Command carve-demo is `make demo`: it brings up the local single-node
// Kubernetes (test/cluster), runs the carve-agent binary on simulated GPUs,
// loads the example profiles, and switches the node through a list of
// profiles by labelling it, running a pod at each step and printing what
// an operator wants to see: how long the repartition took, the node's
// allocatable, the carve labels, and the devices the pod was given. The
// simulated GPUs take as long for each MIG operation as real ones
// (--sim-latency realistic, the agent's flag) unless told otherwise.
//
//	carve-demo [--agent bin/carve-agent] [--profiles configs/examples/profiles.yaml]
//	           [--gpus sim:dgx-h100] [--sim-latency realistic|none|DURATION|op=DURATION,...]
//	           [--steps full,balanced,shared-4] [--keep]
//
// It must run as root (the kubelet does); the first run on a machine
// builds Kubernetes and containerd (about 10 minutes on 2 cores).
package main
