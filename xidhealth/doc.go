// Package xidhealth keeps the health of a node's GPU and MIG devices from
// NVML's XID events: it watches them, sorts each by the XID policy
// (package xidpolicy) into ignored, recoverable and critical, and keeps the
// devices an XID hit unhealthy, a recoverable one for a quiet period, a
// critical one until its GPU is reset or the node reboots, across restarts
// of the agent (a state file). The device plugin reports the unhealthy
// devices to the kubelet; the DRA driver taints them in its ResourceSlice.
package xidhealth
