// Package buildinfo says which build of carve is running: its version, the
// source revision it was built from and the Go release that compiled it,
// for carve-agent --version, carve-probe --version, carvectl version, the
// agent's start-up log line, its node record and its build_info metric.
//
// Release builds stamp the version and revision at link time:
//
//	go build -ldflags "-X github.com/carve-dev/carve/internal/buildinfo.version=v1.2.3 \
//	  -X github.com/carve-dev/carve/internal/buildinfo.revision=$(git rev-parse HEAD)"
//
// A build without them (go build, go install, go run) falls back to what
// the Go toolchain recorded in the binary (debug.ReadBuildInfo): the main
// module's version and the VCS revision, else "devel" and "unknown".
package buildinfo
