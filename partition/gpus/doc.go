// Package gpus opens the GPUs a --gpus flag names, the one way carvectl and
// carve-agent do it:
//
//   - "nvml": this machine's GPUs through the NVIDIA driver (partition/nvml);
//   - "sim:<machine>": a simulated machine (partition/sim), e.g.
//     "sim:dgx-h100" or "sim:h100-80gb*2,a30*2".
//
// A simulated machine may start from a state file, either read only
// (carvectl's --from) or kept up to date across restarts (carve-agent's
// --sim-state), and its mutating calls may take time as on hardware
// (--sim-latency); see Options. Errors name the flag they are about, so
// the commands print them as they are.
package gpus
