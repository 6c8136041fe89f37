// Package allocate measures carve's device-plugin answers over gRPC
// (Allocate and GetPreferredAllocation) beside the kubelet's own reference
// stub device plugin (k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/plugin/v1beta1),
// the benchmark `make bench BENCH=allocate` runs.
//
// Both servers advertise the same devices (the same IDs and health) on
// unix sockets in one temporary directory and are registered with a small
// kubelet stand-in that, like the kubelet, dials each back and keeps a
// ListAndWatch stream open. carve's side is the real plugin.Manager with
// the options the agent uses by default (NVML from the simulator, CDI off,
// a metrics registry), fed with the resources timeslice.Expand computes
// from a simulated DGX H100. Each case sends the same request to both,
// alternating carve, stub, carve, stub..., and times every call.
package allocate
