// Command carve-agent is carve's node agent, run as a DaemonSet: it
// realises the profile in force for its Node on the GPUs and advertises the
// result to the kubelet. Flags are described in docs/reference.md; each can
// also be given through an environment variable.
package main
