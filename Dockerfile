# syntax=docker/dockerfile:1
#
# carve: the node agent (carve-agent), the operator CLI (carvectl) and the
# read-only NVML probe (carve-probe) in one image.
#
#   docker build -t carve-agent:latest .
#
# cgo is on: go-nvml loads libnvidia-ml.so.1 with dlopen at run time, which
# needs a glibc (dynamically linked) binary. The image carries no NVIDIA
# library: on a GPU node the NVIDIA container toolkit injects
# libnvidia-ml.so.1 and nvidia-smi (NVIDIA_DRIVER_CAPABILITIES=utility, set in
# configs/deploy/base/daemonset.yaml), matching the node's driver. Without them
# `--gpus nvml` fails at start; `--gpus sim:<machine>` needs neither.

FROM golang:1.26-bookworm AS build
WORKDIR /src
ENV CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations"
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags='-s -w' -o /out/ ./cmd/carve-agent ./cmd/carvectl ./cmd/carve-probe

FROM debian:bookworm-slim
COPY --from=build /out/carve-agent /out/carvectl /out/carve-probe /usr/local/bin/
# Root, on purpose: creating and destroying MIG instances and changing MIG
# mode need CAP_SYS_ADMIN and the /dev/nvidia-caps MIG config capability, and
# the device-plugin and pod-resources sockets under /var/lib/kubelet are
# root's. The DaemonSet runs it privileged; see docs/agent.md.
USER 0:0
EXPOSE 9465
ENTRYPOINT ["/usr/local/bin/carve-agent"]
