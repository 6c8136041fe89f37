// Package plugin advertises carve's devices to the kubelet through the
// device-plugin API (v1beta1).
//
// A Manager runs one gRPC device-plugin server per resource name, each on its
// own unix socket in the kubelet's device-plugin directory, and keeps them in
// step with the resource map the agent computes (timeslice.Resources):
// Update diffs the new map against the old one, starts and registers servers
// for new resources, pushes a ListAndWatch message to the resources whose
// devices changed and stops the servers of resources that vanished.
// Withdraw takes devices out of ListAndWatch and waits until every open
// stream has been sent the reduced list, so the agent can destroy the GPU
// instances behind them afterwards. Run watches the directory for kubelet
// restarts and deleted sockets and, given an NVML, marks devices unhealthy
// on critical XID errors.
//
// PodResourcesClient asks the kubelet's PodResources API which of carve's
// devices are assigned to which containers.
package plugin
