// Command carve-probe prints, as JSON, what carve sees of this machine's
// GPUs through the real NVML: each GPU with its MIG mode and instances, the
// GPU instance profiles and placements of MIG-capable GPUs, the topology
// matrix and whether XID events can be watched.
//
// It only reads: it never changes a MIG mode, creates or destroys an
// instance, or resets a GPU. It exits 1 when NVML cannot be opened and 2
// when some part could not be read (the JSON then says which).
//
//	carve-probe [-xid-wait 100ms]
//	carve-probe --version
package main
